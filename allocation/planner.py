"""plan_fleet: the pure, deterministic allocator.

The plan is a function of the configuration alone: hosts and services are
handled in name order, never in YAML order, and nothing is read from the
network or the disk. Every problem found is reported at once in one
`AllocationError`; no partial plan is ever returned.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

from allocation.capacity import auto_fraction, gib, runtime_total, size_service
from allocation.config import FRACTION_SCALE, FleetConfig, Host, Service, vllm_ascend_version
from allocation.errors import AllocationError, listing
from allocation.placement import Placer
from allocation.plan import HostPlan, Plan, PlannedService, RouterPlan
from allocation.ports import assign_ports


def _resolve_auto(fleet: FleetConfig, problems: list[str]) -> tuple[FleetConfig, frozenset[str], frozenset[str]]:
    """The fleet with every `memoryFraction: auto` replaced by the fraction chosen for it; the services
    that were `auto`, and those for which no fraction fits (already a problem)."""
    services, auto, unsized = [], set(), set()
    for s in fleet.services:
        if s.memory_fraction == "auto":
            chosen = auto_fraction(fleet, s)
            if isinstance(chosen, str):
                problems.append(chosen)
                # Placed with the least fraction, so every other problem is reported too, but none
                # that only restates this one (a card over budget, a cache that does not fit).
                chosen = Decimal(1) / FRACTION_SCALE
                unsized.add(s.name)
            s = s.model_copy(update={"memory_fraction": chosen})
            auto.add(s.name)
        services.append(s)
    return fleet.model_copy(update={"services": services}), frozenset(auto), frozenset(unsized)


def _replicas(fleet: FleetConfig) -> tuple[FleetConfig, dict[str, Service], dict[str, str]]:
    """The fleet with each replicated service replaced by its replicas, each an ordinary service
    with that replica's pins, the service's model name and its own previous names; the replicated
    services by name; and each replica's service."""
    services, replicated, replica_of = [], {}, {}
    for s in fleet.services:
        if s.replicas == 1:
            services.append(s)
            continue
        replicated[s.name] = s
        pins = list(s.replica_pins or ())
        old = [s.replica_names(p) for p in s.previous_names or ()]  # per previous name, its replicas' names
        for i, name in enumerate(s.replica_names()):
            own = {k: getattr(pins[i], k) for k in type(pins[i]).model_fields} if i < len(pins) else {}
            update = {"name": name, "served_model_name": s.served_model_name or s.original_name, "replicas": 1}
            update |= {"previous_names": [names[i] for names in old] or None}
            update |= {"replica_pins": None, "router": None, "router_port": None, "router_metrics_port": None}
            services.append(s.model_copy(update=update | own))
            replica_of[name] = s.name
    return fleet.model_copy(update={"services": services}), replicated, replica_of


def _router_hosts(
    replicated: dict[str, Service], placed: dict[str, tuple[str, tuple[int, ...]]]
) -> dict[str, list[Service]]:
    """Host -> the replicated services whose router runs there: `router.host`, else the first
    replica's host. A service whose first replica found no room has no router (already a problem)."""
    hosts: dict[str, list[Service]] = {}
    for s in replicated.values():
        host = s.router.host if s.router and s.router.host else placed.get(s.replica_names()[0], (None,))[0]
        if host is not None:
            hosts.setdefault(host, []).append(s)
    return hosts


def plan_fleet(fleet: FleetConfig) -> Plan:
    problems: list[str] = []
    fleet, replicated, replica_of = _replicas(fleet)
    fleet, auto, unsized = _resolve_auto(fleet, problems)
    placer = Placer(fleet, replica_of)
    placed = placer.run(list(fleet.services))
    problems += placer.problems
    router_hosts = _router_hosts(replicated, placed)
    routers = []

    per_host: dict[str, list[tuple[Service, tuple[int, ...]]]] = {h.name: [] for h in fleet.hosts}
    for service in fleet.services:
        if service.name in placed:
            host, group = placed[service.name]
            per_host[host].append((service, group))

    host_plans, warnings = [], []
    for host in sorted(fleet.hosts, key=lambda h: h.name):
        services = sorted(per_host[host.name], key=lambda p: p[0].name)
        mine = router_hosts.get(host.name, [])
        exporter = fleet.metrics.npu_exporter_port
        assignments, router_ports = assign_ports(host, services, fleet.ports, problems, mine, exporter)
        routers += [
            RouterPlan(s, host.name, *router_ports[s.name], replicas=tuple(s.replica_names()))
            for s in mine
            if s.name in router_ports
        ]
        planned = []
        for (s, _), a in zip(services, assignments):
            verdict = size_service(fleet, host, s)
            problems += [verdict.problem] if verdict.problem and s.name not in unsized else []
            warnings += [verdict.warning] if verdict.warning else []
            planned.append(
                PlannedService(s, a, verdict.capacity, auto_fraction=s.name in auto, replica_of=replica_of.get(s.name))
            )
        planned = _running_totals(fleet, host, planned, warnings, problems)
        host_plans.append(HostPlan(host=host, budget=fleet.budget(host), services=tuple(planned)))
    if problems:
        raise AllocationError(f"stack {fleet.stack}: cannot allocate the fleet: " + listing(problems) + ".")
    warnings += _crowded(replicated, placed)
    routers.sort(key=lambda r: r.service.name)
    return Plan(fleet=fleet, hosts=tuple(host_plans), warnings=tuple(warnings), routers=tuple(routers))


def _crowded(replicated: dict[str, Service], placed: dict[str, tuple[str, tuple[int, ...]]]) -> list[str]:
    """A warning for each replicated service with two replicas on one host: losing it loses both."""
    notes = []
    for s in replicated.values():
        hosts = [placed[n][0] for n in s.replica_names() if n in placed]
        shared = sorted({h for h in hosts if hosts.count(h) > 1})
        if shared:
            notes.append(
                f"service {s.name}: {len(hosts)} replicas on {len(set(hosts))} hosts; host(s) {', '.join(shared)} "
                "hold more than one, so losing one of them loses several replicas"
            )
    return notes


def _running_totals(
    fleet: FleetConfig, host: Host, services: list[PlannedService], notes: list[str], problems: list[str]
) -> list[PlannedService]:
    """What a later service on a shared card (in start order: name order) gets from the memory of
    those before it, by vLLM-Ascend version (vllm-ascend issue 7308, fixed by PR 7427 in v0.18.0rc1):

    - before 0.15 an instance counts every process's memory on its cards as its own overhead, so it
      needs the fractions before it plus its own as `--gpu-memory-utilization`;
    - 0.15 to 0.17 each asks for its own fraction, but the memory the others hold is still subtracted
      from its KV cache (`non_torch_memory_cleared_by_empty_cache` in the PR's before/after logs): a
      warning says by how much, and the plan stops if what is left cannot hold one request."""
    before: dict[int, Decimal] = {}
    total = runtime_total(host)
    out = []
    for ps in services:  # name order, the start order on each card
        s, cards = ps.service, ps.assignment.cards
        prior = max((before.get(c, Decimal(0)) for c in cards), default=Decimal(0))
        version = vllm_ascend_version(fleet, s)
        if prior and version is not None and version < (0, 15):
            ps = replace(ps, running_total=prior + s.memory_fraction)
            notes.append(
                f"service {s.name}: vLLM-Ascend {version[0]}.{version[1]} counts the memory of the services started "
                f"before it on its cards as its own, so it gets --gpu-memory-utilization {ps.running_total} "
                f"({prior} before it + its {s.memory_fraction})"
            )
        elif prior and version is not None and version < (0, 18) and total is not None:
            _subtracted(ps, version, int(prior * total), notes, problems)
        for c in cards:
            before[c] = before.get(c, Decimal(0)) + s.memory_fraction
        out.append(ps)
    return out


def _subtracted(ps: PlannedService, version: tuple[int, int], held: int, notes: list[str], problems: list[str]) -> None:
    """vLLM-Ascend 0.15-0.17 takes `held` bytes (the fractions before it on its cards) off its KV cache."""
    cap = ps.capacity
    why = (
        f"service {ps.name}: vLLM-Ascend {version[0]}.{version[1]} (before 0.18, vllm-ascend issue 7308) subtracts the "
        f"{gib(held)} GiB the services started before it hold on its cards from its own KV cache"
    )
    if cap is None or cap.encoder:
        notes.append(f"{why}; its KV cache will be that much smaller than the plan's")
        return
    left = cap.kv_bytes_per_card - held
    if left < (cap.bytes_per_request or 1):
        need = f"the {gib(cap.bytes_per_request)} GiB one request of maxModelLen needs" if cap.bytes_per_request else "anything"
        problems.append(f"{why}: {gib(cap.kv_bytes_per_card)} - {gib(held)} = {gib(left)} GiB per card, less than {need}, "
                        "so vLLM will not start; use vLLM-Ascend 0.18 or later, or give it cards of its own")  # fmt: skip
    else:
        notes.append(f"{why}: {gib(left)} GiB per card instead of the plan's {gib(cap.kv_bytes_per_card)} GiB")
