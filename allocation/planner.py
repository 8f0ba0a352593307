"""plan_fleet: the pure, deterministic allocator.

The plan is a function of the configuration alone: hosts and services are
handled in name order, never in YAML order, and nothing is read from the
network or the disk. Every problem found is reported at once in one
`AllocationError`; no partial plan is ever returned.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Mapping

from allocation.capacity import auto_fraction, fixed_kv_fraction, gib, runtime_total, size_service
from allocation.config import FRACTION_SCALE, FleetConfig, Host, Service
from allocation.errors import AllocationError, listing
from allocation.graph_room import graph_room
from allocation.disaggregated import RoleInstance, role_instances
from allocation.disaggregated_config import CONNECTOR, SUPPORTED
from allocation.group import Group, Member, groups_of
from allocation.measured import stale
from allocation.instance import Instance, instances
from allocation.outcome import Outcome, T, card_words, where
from allocation.placeable import Placement
from allocation.placement import Placer
from allocation.plan import DisaggregatedPlan, GroupPlan, HostPlan, MemberPlan, Plan, RolePlan, ServicePlan, RouterPlan
from allocation.ports import assign_ports
from allocation.resolved import resolve, resolve_router
from allocation.shards import assign_shards, split_disaggregated, split_services
from allocation.windows import PortWindow


def _instances(fleet: FleetConfig) -> Outcome[tuple[list[Instance], frozenset[str]]]:
    """Every instance of every service, each `memoryFraction: auto` and each `kvCacheGiB`'s fraction
    replaced by the fraction chosen for it; and the instances for which no fraction fits, each a problem."""
    out, unsized, problems = [], set(), list[str]()
    # A multi-host service is a group; a disaggregated one, its role instances (`_roles`).
    for service in (s for s in fleet.services if s.data_parallel is None and s.disaggregated is None):
        for i in instances(service, fleet.defaults):
            choose = auto_fraction if i.auto_fraction else fixed_kv_fraction if service.kv_cache_gi_b is not None else None
            if choose is not None:
                chosen = choose(fleet, i)
                problems += chosen.problems
                fraction = chosen.value
                if fraction is None:
                    # Placed with the least fraction, so every other problem is reported too, but none
                    # that only restates this one (a card over budget, a cache that does not fit).
                    fraction = Decimal(1) / FRACTION_SCALE
                    unsized.add(i.name)
                i = replace(i, memory_fraction=fraction)
            out.append(i)
    return Outcome((out, frozenset(unsized)), tuple(problems))


def _replicas(placed: list[Placement[Instance]]) -> dict[str, list[Placement[Instance]]]:
    """Replicated service -> the placements of its replicas placed, in replica order."""
    out: dict[str, list[Placement[Instance]]] = {}
    for p in sorted(placed, key=lambda p: p.instance.index):
        if p.instance.group is not None:
            out.setdefault(p.instance.group, []).append(p)
    return out


def _router_hosts(fleet: FleetConfig, replicas: Mapping[str, list[Placement[Instance]]]) -> dict[str, list[Service]]:
    """Host -> the replicated services whose router runs there: `router.host`, else the first
    replica's host. A service whose first replica found no room has no router (already a problem)."""
    hosts: dict[str, list[Service]] = {}
    for s in fleet.services:
        if not s.replicated:
            continue
        first = next((p for p in replicas.get(s.name, ()) if p.instance.index == 1), None)
        host = s.router.host if s.router and s.router.host else first.host.name if first else None
        if host is not None:
            hosts.setdefault(host, []).append(s)
    return hosts


def plan_fleet(fleet: FleetConfig) -> Plan:
    problems: list[str] = []
    warnings: list[str] = []
    notes: list[str] = []

    def kept(outcome: Outcome[T]) -> T:
        """What a rule keeps; its problems, warnings and notes join the plan's, in the order the rules ran."""
        problems.extend(outcome.problems)
        warnings.extend(outcome.warnings)
        notes.extend(outcome.notes)
        return outcome.value

    every, unsized = kept(_instances(fleet))
    shard_of = kept(assign_shards(fleet))
    groups = groups_of(fleet.services, fleet.defaults)
    placer = Placer(fleet, shard_of=shard_of)
    placed, roles_on, proxies_on = _apart(fleet, kept(placer.run([*every, *kept(_roles(fleet))], groups)))
    members = _members_by_host(placer.members, groups)
    replicas = _replicas(placed)
    kept(split_services(fleet, shard_of, replicas))
    kept(split_disaggregated(shard_of, roles_on, proxies_on))
    router_hosts = _router_hosts(fleet, replicas)
    router_windows: dict[str, tuple[str, Mapping[str, PortWindow]]] = {}
    per_host: dict[str, list[Placement[Instance]]] = {h.name: [] for h in fleet.hosts}
    for p in placed:
        per_host[p.host.name].append(p)

    host_plans = []
    for host in sorted(fleet.hosts, key=lambda h: h.name):
        placed_here = sorted(per_host[host.name], key=lambda p: p.instance.name)
        mine = router_hosts.get(host.name, [])
        exporter = fleet.metrics.npu_exporter_port
        here = (members.get(host.name, ()), roles_on.get(host.name, []), proxies_on.get(host.name, []))
        ports = kept(assign_ports(host, placed_here, fleet.ports, mine, exporter, *here))
        assignments, windows = ports.assignments, ports.routers
        router_windows |= {s.name: (host.name, windows[s.name]) for s in mine}
        planned = []
        for i, a in zip((p.instance for p in placed_here), assignments):
            if host.board != "a2":  # the image's default is the board's build
                i = replace(i, resolved=resolve(i.service, fleet.defaults, host.board))
            kept(_image_for_board(host, i, a.cards))
            sized = size_service(fleet, host, i, a.cards)
            kept(stale(host.name, i, a.cards))
            # An instance `auto` found no fraction for is sized at the least one: its problem says so already.
            planned.append(ServicePlan(i, a, kept(replace(sized, problems=()) if i.name in unsized else sized)))
        planned = kept(_running_totals(host, planned))
        unchecked = kept(graph_room(host, planned))
        kept(_not_sized(host, planned, unchecked))
        joined = tuple(kept(_member_plans(fleet, host, members.get(host.name, ()), ports.members)))
        roled = tuple(kept(_role_plans(fleet, host, here[1], ports.roles)))
        host_plans.append(HostPlan(host, fleet.budget(host), tuple(planned), shard_of.get(host.name), joined, roled, ports.proxies))
    if problems:
        raise AllocationError(f"stack {fleet.stack}: cannot allocate the fleet: " + listing(problems) + ".")
    kept(_crowded(fleet, replicas))
    routers = _routers(fleet, host_plans, router_windows)
    return Plan(
        fleet=fleet, hosts=tuple(host_plans), warnings=tuple(warnings), routers=routers, groups=_groups(host_plans),
        notes=tuple(notes), disaggregated=_disaggregated(fleet, host_plans),
    )


def _roles(fleet: FleetConfig) -> Outcome[list[RoleInstance]]:
    """Every prefill and decode instance of the fleet; a problem for each disaggregated service whose image
    is not a vllm-ascend version the plan follows (`allocation.disaggregated_config.SUPPORTED`)."""
    out, problems = role_instances(fleet.services, fleet.defaults), list[str]()
    (first, last), seen = SUPPORTED, set()
    for ri in out:
        version = ri.resolved.vllm_ascend_version
        if ri.parent.name in seen or (version is not None and first <= version <= last):
            continue
        seen.add(ri.parent.name)
        runs = f"vLLM-Ascend {version[0]}.{version[1]}" if version else "a vLLM-Ascend version the plan cannot read"
        problems.append(
            f"service {ri.parent.name}: disaggregated: its image {ri.resolved.image} runs {runs}, and the plan of "
            f"{CONNECTOR}'s ports and ids follows vLLM-Ascend {first[0]}.{first[1]} to {last[0]}.{last[1]} only "
            f"(read at each tag from v{first[0]}.{first[1]}.0rc1 to v{last[0]}.{last[1]}.0rc1): use such an image, "
            "or set vllmAscendVersion when its tag does not say"
        )
    return Outcome(out, tuple(problems))


def _apart(
    fleet: FleetConfig, placed: list[Placement]
) -> tuple[list[Placement[Instance]], dict[str, list[Placement[RoleInstance]]], dict[str, list[Service]]]:
    """The placements of instances, those of prefill and decode instances by host, and by host the
    disaggregated services whose proxy runs there: `proxy.host`, else its first prefill instance's host (a
    service whose first prefill instance found no room has no proxy: already a problem)."""
    roles: dict[str, list[Placement[RoleInstance]]] = {}
    first: dict[str, str] = {}
    for p in placed:
        if isinstance(p.instance, RoleInstance):
            roles.setdefault(p.host.name, []).append(p)
            if p.instance.role == "prefill" and p.instance.index <= 1:
                first[p.instance.parent.name] = p.host.name
    proxies: dict[str, list[Service]] = {}
    for s in fleet.services:
        if s.disaggregated is not None and (host := s.disaggregated.proxy.host or first.get(s.name)) is not None:
            proxies.setdefault(host, []).append(s)
    return [p for p in placed if not isinstance(p.instance, RoleInstance)], roles, proxies


def _role_plans(
    fleet: FleetConfig, host: Host, placed: list[Placement[RoleInstance]], assignments: list
) -> Outcome[list[RolePlan]]:
    """The plans of the prefill and decode instances on `host` (in name order, as `assign_ports` returns
    their assignments), each sized on its cards."""
    out, problems, warnings, notes = [], list[str](), list[str](), list[str]()
    for p, a in zip(sorted(placed, key=lambda p: p.instance.name), assignments):
        ri = p.instance if host.board == "a2" else replace(p.instance, resolved=resolve(p.instance.parent, fleet.defaults, host.board))
        sized = size_service(fleet, host, ri, a.cards)
        problems += sized.problems
        warnings += sized.warnings
        notes += sized.notes
        out.append(RolePlan(ri, a, sized.value, host=host))
    return Outcome(out, tuple(problems), tuple(warnings), tuple(notes))


def _disaggregated(fleet: FleetConfig, host_plans: list[HostPlan]) -> tuple[DisaggregatedPlan, ...]:
    """One plan per disaggregated service with a proxy, by name, holding its instances' plans (those of the
    host plans) and its proxy's host and windows."""
    plans: dict[str, list[RolePlan]] = {}
    proxies = {s: (hp.host, w) for hp in host_plans for s, w in hp.proxies.items()}
    for hp in host_plans:
        for rp in hp.roles:
            plans.setdefault(rp.role_instance.parent.name, []).append(rp)
    out = []
    for s in sorted((s for s in fleet.services if s.name in proxies), key=lambda s: s.name):
        mine = sorted(plans.get(s.name, ()), key=lambda rp: rp.instance.index)
        prefill = tuple(rp for rp in mine if rp.role_instance.role == "prefill")
        decode = tuple(rp for rp in mine if rp.role_instance.role == "decode")
        out.append(DisaggregatedPlan(s, prefill, decode, *proxies[s.name]))
    return tuple(out)


def _members_by_host(placed: list[Placement[Member]], groups: list[Group]) -> dict[str, list[tuple[Placement, tuple]]]:
    """Host -> the members placed there, each with the windows it binds in its group."""
    size = {g.name: len(g.members) for g in groups}
    out: dict[str, list[tuple[Placement, tuple]]] = {}
    for p in placed:
        out.setdefault(p.host.name, []).append((p, p.instance.kinds(size[p.instance.service.name])))
    return out


def _member_plans(
    fleet: FleetConfig, host: Host, placed: list[tuple[Placement, tuple]], assignments: list
) -> Outcome[list[MemberPlan]]:
    """The plans of the members on `host` (in name order, as `assign_ports` returns their assignments),
    each sized on its cards; the problems, warnings and notes of their capacity check."""
    out, problems, warnings, notes = [], list[str](), list[str](), list[str]()
    for (p, _), a in zip(sorted(placed, key=lambda m: m[0].instance.name), assignments):
        m = p.instance if host.board == "a2" else replace(p.instance, resolved=resolve(p.instance.service, fleet.defaults, host.board))
        sized = size_service(fleet, host, m, a.cards)
        problems += sized.problems
        warnings += sized.warnings
        notes += sized.notes
        out.append(MemberPlan(m, a, host, sized.value))
    return Outcome(out, tuple(problems), tuple(warnings), tuple(notes))


def _groups(host_plans: list[HostPlan]) -> tuple[GroupPlan, ...]:
    """One plan per multi-host service, by name, holding its members' plans (those of the host plans) in order."""
    members: dict[str, list[MemberPlan]] = {}
    for hp in host_plans:
        for mp in hp.members:
            members.setdefault(mp.service.name, []).append(mp)
    return tuple(
        GroupPlan(ms[0].service, tuple(sorted(ms, key=lambda mp: mp.member.index))) for _, ms in sorted(members.items())
    )


def _routers(
    fleet: FleetConfig, host_plans: list[HostPlan], windows: Mapping[str, tuple[str, Mapping[str, PortWindow]]]
) -> tuple[RouterPlan, ...]:
    """One router per replicated service, by service name, holding its replicas' plans in replica order."""
    replicas: dict[str, list[ServicePlan]] = {}
    for hp in host_plans:
        for ps in hp.services:
            replicas.setdefault(ps.service.name, []).append(ps)
    routed = sorted((s for s in fleet.services if s.name in windows), key=lambda s: s.name)
    return tuple(_router(fleet, s, *windows[s.name], replicas[s.name]) for s in routed)


def _router(
    fleet: FleetConfig, s: Service, host: str, windows: Mapping[str, PortWindow], replicas: list[ServicePlan]
) -> RouterPlan:
    """The router of `s` on `host`, resolved once, in front of `replicas` (put in replica order)."""
    in_order = tuple(sorted(replicas, key=lambda ps: ps.instance.index))
    settings = resolve_router(s, fleet.defaults, max(ps.resolved.start_timeout_seconds for ps in in_order))
    return RouterPlan(s, settings, host, windows, in_order)


def _image_for_board(host: Host, i: Instance, cards: tuple[int, ...]) -> Outcome[None]:
    """A warning when a vllm-ascend image is not the build of the host's board: vllm-ascend tags its
    A3 build `<version>-a3` (`docs/source/quick_start.md`), the A2 build has no suffix."""
    repository, _, tag = i.resolved.image.partition("@")[0].rpartition(":")
    if not repository.endswith("/vllm-ascend") or (tag.endswith("-a3") == (host.board == "a3")):
        return Outcome(None)
    build = "an A3 build (-a3)" if host.board == "a2" else "not the A3 build (no -a3 tag)"
    image = i.resolved.image.partition("@")[0]
    other = image.removesuffix("-a3") if host.board == "a2" else f"{image}-a3"
    return Outcome(None, warnings=(
        f"{where(host.name, cards)}: image: {i.name} runs {i.resolved.image}, {build}, but the host has board: "
        f"{host.board}; vllm-ascend publishes one build per board: set the service's own image to {other}",
    ))  # fmt: skip


def _not_sized(host: Host, planned: list[ServicePlan], unchecked: tuple[int, ...]) -> Outcome[None]:
    """A note naming the services of the host without a profile, which the plan cannot size, and the
    shared cards whose room for NPU graphs it therefore does not check (`graph_room`): the layout may be
    right, the plan cannot tell, and `profile` is how it can."""
    bare = [ps.name for ps in planned if ps.service.profile is None]
    if not bare:
        return Outcome(None)
    cache, are = ("its KV cache", "is") if len(bare) == 1 else ("their KV caches", "are")
    unsized = f"{cache} and {card_words(unchecked)}'s room for NPU graphs are" if unchecked else f"{cache} {are}"
    return Outcome(None, notes=(
        f"{where(host.name)}: profile: {', '.join(bare)} not sized (no profile): {unsized} not checked; "
        f"python -m allocation profile writes {'the profile' if len(bare) == 1 else 'them'}",
    ))  # fmt: skip


def _crowded(fleet: FleetConfig, replicas: Mapping[str, list[Placement[Instance]]]) -> Outcome[None]:
    """A warning for each replicated service with two replicas on one host: losing it loses both."""
    notes = []
    for s in (s for s in fleet.services if s.replicated):
        hosts = [p.host.name for p in replicas.get(s.name, ())]
        shared = sorted({h for h in hosts if hosts.count(h) > 1})
        if shared:
            notes.append(
                f"host{'s' if len(shared) > 1 else ''} {', '.join(shared)}: replicas, hosts: {s.name}: {len(hosts)} "
                f"replicas on {len(set(hosts))} hosts, more than one on each of these, so losing one loses several"
            )
    return Outcome(None, warnings=tuple(notes))


def _running_totals(host: Host, services: list[ServicePlan]) -> Outcome[list[ServicePlan]]:
    """What a later service on a shared card (in start order: name order) gets from the memory of
    those before it, by vLLM-Ascend version (vllm-ascend issue 7308, fixed by PR 7427 in v0.18.0rc1):

    - before 0.15 an instance counts every process's memory on its cards as its own overhead, so it
      needs the fractions before it plus its own as `--gpu-memory-utilization`;
    - 0.15 to 0.17 each asks for its own fraction, but the memory the others hold is still subtracted
      from its KV cache (`non_torch_memory_cleared_by_empty_cache` in the PR's before/after logs): a
      warning says by how much, and the plan stops if what is left cannot hold one request."""
    before: dict[int, Decimal] = {}
    total = runtime_total(host)
    out, notes, problems = [], list[str](), list[str]()
    for ps in services:  # name order, the start order on each card
        fraction, cards = ps.memory_fraction, ps.assignment.cards
        prior = max((before.get(c, Decimal(0)) for c in cards), default=Decimal(0))
        version = ps.resolved.vllm_ascend_version
        if prior and version is not None and version < (0, 15):
            ps = replace(ps, running_total=prior + fraction)
            notes.append(
                f"{where(host.name, cards)}: image: {ps.name}: vLLM-Ascend {version[0]}.{version[1]} counts the memory "
                f"of the services started before it on its cards as its own, so it gets --gpu-memory-utilization "
                f"{ps.running_total} ({prior} before it + its {fraction})"
            )
        elif prior and version is not None and version < (0, 18) and total is not None:
            subtracted = _subtracted(ps, version, int(prior * total), where(host.name, cards))
            notes += subtracted.warnings
            problems += subtracted.problems
        for c in cards:
            before[c] = before.get(c, Decimal(0)) + fraction
        out.append(ps)
    return Outcome(out, tuple(problems), tuple(notes))


def _subtracted(ps: ServicePlan, version: tuple[int, int], held: int, place: str) -> Outcome[None]:
    """vLLM-Ascend 0.15-0.17 takes `held` bytes (the fractions before it on its cards) off its KV cache:
    a warning (at `place`) by how much, or a problem when what is left cannot hold one request."""
    cap = ps.capacity
    why = (
        f"vLLM-Ascend {version[0]}.{version[1]} (before 0.18, vllm-ascend issue 7308) subtracts the "
        f"{gib(held)} GiB the services started before it hold on its cards from its own KV cache"
    )
    if cap is None or cap.encoder:
        smaller = "its KV cache will be that much smaller than the plan's"
        return Outcome(None, warnings=(f"{place}: image: {ps.name}: {why}; {smaller}",))
    left = cap.kv_bytes_per_card - held
    if left < (cap.bytes_per_request or 1):
        need = f"the {gib(cap.bytes_per_request)} GiB one request of maxModelLen needs" if cap.bytes_per_request else "anything"
        return Outcome(None, (
            f"service {ps.name}: {why}: {gib(cap.kv_bytes_per_card)} - {gib(held)} = {gib(left)} GiB per card, less "
            f"than {need}, so vLLM will not start; use vLLM-Ascend 0.18 or later, or give it cards of its own",
        ))  # fmt: skip
    instead = f"{gib(left)} GiB per card instead of the plan's {gib(cap.kv_bytes_per_card)} GiB"
    return Outcome(None, warnings=(f"{place}: image: {ps.name}: {why}: {instead}",))
