"""Which shard deploys each host, when the fleet is deployed as shards (`ascend-fleet:shards`).

Cards and ports are per host, so a fleet splits cleanly by host: one plan, many stacks, each owning
a set of hosts. The one link across hosts is a replicated service (its router waits on every
replica), so its replicas and router live in one shard; the placer keeps them there and
`split_services` refuses a pin that splits them. A pinned host keeps its shard; the others fill the
lowest shard with room, in name order, so the assignment is a function of the config alone.
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

from allocation.config import FleetConfig, Service
from allocation.outcome import Outcome
from allocation.placeable import Placement


def assign_shards(fleet: FleetConfig) -> Outcome[dict[str, int]]:
    """Host name -> shard, for every host of a sharded fleet (empty for one that is not); a problem
    for each shard that pins more hosts than `shards.size`."""
    if fleet.shards is None:
        return Outcome({})
    size = fleet.shards.size
    held = Counter(h.shard for h in fleet.hosts if h.shard is not None)
    problems = tuple(
        f"shard {k}: {n} hosts are pinned to it, more than shards.size {size}; pin some of them to another "
        "shard (moving a host between shards is `python -m allocation move-host`, docs/shards.md), or raise shards.size"
        for k, n in sorted(held.items())
        if n > size
    )
    shard_of = {h.name: h.shard for h in fleet.hosts if h.shard is not None}
    k = 0
    for host in sorted((h for h in fleet.hosts if h.shard is None), key=lambda h: h.name):
        while held[k] >= size:
            k += 1
        shard_of[host.name] = k
        held[k] += 1
    return Outcome(shard_of, problems + _unheld(fleet, shard_of))


def _unheld(fleet: FleetConfig, shard_of: Mapping[str, int]) -> tuple[str, ...]:
    """A problem when this is a shard's stack (`shardOf`) and its shard holds no host: its program
    would register nothing, and `pulumi up` would delete every resource the stack has."""
    cut = fleet.shard_of
    held = sorted(set(shard_of.values()))
    if cut is None or cut.index in held:
        return ()
    return (
        f"shardOf names shard {cut.index} of fleet {cut.fleet}, which holds no host (its hosts are in shards "
        f"{', '.join(map(str, held))}): `pulumi up` here would delete every resource of stack {fleet.stack}; "
        f"to retire an emptied shard run `pulumi destroy` on its stack and delete its file",
    )


def split_services(
    fleet: FleetConfig, shard_of: Mapping[str, int], replicas: Mapping[str, Sequence[Placement]]
) -> Outcome[None]:
    """A problem for each replicated service whose replicas (`replicas`: the placements of each
    replicated service's replicas) or router would be deployed by two shards: only a pin can do that,
    since the placer keeps a service's replicas in one shard."""
    problems = []
    for s in (s for s in fleet.services if s.replicated and shard_of):
        hosts = {p.host.name for p in replicas.get(s.name, ())}
        if s.router and s.router.host:
            hosts.add(s.router.host)
        problems += _split(
            s.name, hosts, shard_of, "its replicas and router",
            "a replicated service lives in one shard (its router waits on every replica), so pin its replicas and router",
        )  # fmt: skip
    return Outcome(None, tuple(problems))


def split_disaggregated(
    shard_of: Mapping[str, int], roles_on: Mapping[str, Sequence[Placement]], proxies_on: Mapping[str, Sequence[Service]]
) -> Outcome[None]:
    """A problem for each disaggregated service whose prefill and decode instances and proxy would be deployed by
    two shards (`roles_on`: the instances' placements by host; `proxies_on`: the services whose proxy runs on each
    host): only a pin can do that, since the placer keeps a service's instances in one shard (`shard_key`), and
    the proxy names every instance and is created after them by one stack."""
    hosts: dict[str, set[str]] = {}
    for host, placed in roles_on.items():
        for p in placed:
            hosts.setdefault(p.instance.parent.name, set()).add(host)
    for host, services in proxies_on.items():
        for s in services:
            hosts.setdefault(s.name, set()).add(host)
    problems = []
    for name, where in sorted(hosts.items()) if shard_of else ():
        problems += _split(
            name, where, shard_of, "its prefill and decode instances and proxy",
            "a disaggregated service lives in one shard (its proxy names every instance and is created after them), "
            "so pin its replicaPins and proxy",
        )  # fmt: skip
    return Outcome(None, tuple(problems))


def _split(name: str, hosts: set[str], shard_of: Mapping[str, int], what: str, why: str) -> list[str]:
    """The problem of service `name` whose `what` on `hosts` would be deployed by two shards; none in one."""
    shards = sorted({shard_of[h] for h in hosts})
    if len(shards) < 2:
        return []
    where = ", ".join(f"{h} (shard {shard_of[h]})" for h in sorted(hosts))
    return [f"service {name}: {what} would be deployed by shards {', '.join(map(str, shards))}: {where}; {why} to hosts of one shard"]
