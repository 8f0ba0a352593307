"""`pin`: write a reviewed plan back into its stack file, so it never moves again.

Without pins, adding or removing a service can shift the allocator's choices
for others on the same host. Pinning writes every service's host, cards and
port windows into `Pulumi.<stack>.yaml` as explicit keys, through
`cli.stack_editor`, which changes only those values in the file's own text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from allocation.errors import ConfigError
from allocation.plan import DisaggregatedPlan, GroupPlan, Plan, RouterPlan, ServicePlan
from allocation.windows import KINDS, MEMBER_KINDS, PROXY, ROLE_KINDS, ROUTER_KINDS
from cli.stack_editor import set_service_keys


def pins_of(ps: ServicePlan) -> dict[str, Any]:
    """The config keys that fix a service's current assignment."""
    a = ps.assignment
    # A service that lists candidate `hosts` keeps that key (narrowed to its host): `host` beside it is
    # refused. A replica's pins (`replicaPins`) have only `host`.
    narrowed = ps.service.hosts is not None and not ps.instance.index
    where: dict[str, Any] = {"hosts": list([a.host_name])} if narrowed else {"host": a.host_name}
    pins: dict[str, Any] = where | {"devices": list(list(a.cards))}
    if ps.instance.auto_fraction:  # `auto` becomes the number the planner chose
        pins["memoryFraction"] = float(ps.memory_fraction)
    for kind in KINDS:
        if kind.key in a.windows:
            value = kind.value(a.windows[kind.key])
            pins[kind.key] = list(value) if isinstance(value, list) else value
    return pins


def _replicated_pins(router: RouterPlan) -> dict[str, Any]:
    """A replicated service's pins: each replica's under `replicaPins`, in order, and its router's ports."""
    each = [pins_of(ps) for ps in router.replicas]
    fractions = sorted({pins.pop("memoryFraction") for pins in each if "memoryFraction" in pins})
    if len(fractions) > 1:
        sized = ", ".join(f"{ps.name} {ps.memory_fraction} on {ps.assignment.host_name}" for ps in router.replicas)
        raise ConfigError(
            f"service {router.service.name}: memoryFraction auto chose different fractions for its replicas "
            f"({sized}), and a service has one memoryFraction: set it by hand (the largest that fits every "
            "replica's host), or give its replicas hosts of one HBM size; nothing was written"
        )
    shared = {"memoryFraction": fractions[0]} if fractions else {}
    return shared | {"replicaPins": each} | {k.key: k.value(router.windows[k.key]) for k in ROUTER_KINDS}


def _group_pins(group: GroupPlan) -> dict[str, Any]:
    """A multi-host service's pins: its `dataParallel` as configured, with each member's host, cards and
    windows under `memberPins`, in member order (the leader first), so its hosts never change."""
    dp = group.service.data_parallel
    assert dp is not None
    each = []
    for mp in group.members:
        a = mp.assignment
        windows = {k.key: k.value(a.windows[k.key]) for k in MEMBER_KINDS if k.key in a.windows}
        each.append({"host": a.host_name, "devices": list(a.cards)} | windows)
    return {"dataParallel": dp.model_dump(by_alias=True, exclude={"member_pins"}) | {"memberPins": each}}


def _disaggregated_pins(d: DisaggregatedPlan) -> dict[str, Any]:
    """A disaggregated service's pins: its `disaggregated` as configured, with each instance's host, cards and
    windows (its `kvPort` among them) under its role's `replicaPins`, in order, and the proxy's host and port."""
    pd = d.service.disaggregated
    assert pd is not None
    out: dict[str, Any] = {}
    for (role, r), plans in zip(pd.roles(), (d.prefill, d.decode)):
        each = [
            {"host": rp.assignment.host_name, "devices": list(rp.assignment.cards)}
            | {k.key: k.value(rp.assignment.windows[k.key]) for k in ROLE_KINDS if k.key in rp.assignment.windows}
            for rp in plans
        ]
        shown = r.model_dump(by_alias=True, exclude={"replica_pins", "memory_fraction"})
        out[role] = shown | {"memoryFraction": float(r.memory_fraction), "replicaPins": each}
    rest = pd.model_dump(by_alias=True, exclude_none=True, exclude={"prefill", "decode", "proxy"})
    return {"disaggregated": out | rest | {"proxy": {"host": d.proxy_host.name, PROXY.key: d.proxy_port}}}


def stack_pins(plan: Plan) -> dict[str, dict[str, Any]]:
    """Every configured service's pins, by its name in the stack file, in the file's order: a service
    of its own from its plan, a replicated one from its router, which holds its replicas' plans, a
    multi-host one from its group, which holds its members' plans, a disaggregated one from its plan,
    which holds its instances'."""
    keys = {ps.service.name: pins_of(ps) for _, ps in plan.services() if not ps.service.replicated}
    keys |= {r.service.name: _replicated_pins(r) for r in plan.routers}
    keys |= {g.name: _group_pins(g) for g in plan.groups}
    keys |= {d.name: _disaggregated_pins(d) for d in plan.disaggregated}
    return {s.name: keys[s.name] for s in plan.fleet.services}


def pin_stack_file(path: Path, plan: Plan, read: bytes | None = None) -> list[str]:
    """Write the plan's pins into the stack file (and, in a fleet deployed as shards, each host's
    shard); return the names of services that changed, then `host NAME` for each host.
    `read`: the file's bytes the plan was made from; a file that no longer holds them is not written."""
    return set_service_keys(path, stack_pins(plan), every=True, read=read, hosts=shard_pins(plan))


def shard_pins(plan: Plan) -> dict[str, dict[str, Any]]:
    """In a fleet deployed as shards, every host's shard: once written, adding hosts or services
    never moves a host to another shard's stack (allocation.shards)."""
    return {hp.host.name: {"shard": hp.shard} for hp in plan.hosts if hp.shard is not None}


NAMED = 10
"""How many names `pin` prints: a large fleet's pins (hundreds of services, every host's shard)
would make one line of hundreds of names; past this, it counts them and names the first."""


def pinned_line(path: Path, changed: list[str]) -> str:
    """What `pin` says it wrote: the names `pin_stack_file` returned, or their count and the first
    `NAMED` of them when there are more."""
    if not changed:
        return f"pinned {path}: nothing new: every service was already pinned"
    if len(changed) <= NAMED:
        return f"pinned {path}: {', '.join(changed)}"
    hosts = sum(1 for name in changed if name.startswith("host "))
    services = len(changed) - hosts
    counts = [f"{n:,} {what}{'s' if n != 1 else ''}" for n, what in ((services, "service"), (hosts, "host")) if n]
    return (
        f"pinned {path}: {' and '.join(counts)}, among them {', '.join(changed[:NAMED])} "
        f"(git diff {path} shows every pin)"
    )

