"""plan_fleet: the pure, deterministic allocator.

The plan is a function of the configuration alone: hosts and services are
handled in name order, never in YAML order, and nothing is read from the
network or the disk. Every problem found is reported at once in one
`AllocationError`; no partial plan is ever returned.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

from allocation.capacity import auto_fraction, size_service
from allocation.config import FleetConfig, Service, vllm_ascend_version
from allocation.errors import AllocationError, listing
from allocation.placement import Placer
from allocation.plan import HostPlan, Plan, PlannedService
from allocation.ports import assign_ports


def _resolve_auto(fleet: FleetConfig, problems: list[str]) -> tuple[FleetConfig, frozenset[str]]:
    """The fleet with every `memoryFraction: auto` replaced by the fraction chosen for it."""
    services, auto = [], set()
    for s in fleet.services:
        if s.memory_fraction == "auto":
            chosen = auto_fraction(fleet, s)
            if isinstance(chosen, str):
                problems.append(chosen)
                chosen = Decimal("1")  # placed anyway, so every other problem is reported too
            s = s.model_copy(update={"memory_fraction": chosen})
            auto.add(s.name)
        services.append(s)
    return fleet.model_copy(update={"services": services}), frozenset(auto)


def plan_fleet(fleet: FleetConfig) -> Plan:
    problems: list[str] = []
    fleet, auto = _resolve_auto(fleet, problems)
    placer = Placer(fleet)
    placed = placer.run(list(fleet.services))
    problems += placer.problems

    per_host: dict[str, list[tuple[Service, tuple[int, ...]]]] = {h.name: [] for h in fleet.hosts}
    for service in fleet.services:
        if service.name in placed:
            host, group = placed[service.name]
            per_host[host].append((service, group))

    host_plans, warnings = [], []
    for host in sorted(fleet.hosts, key=lambda h: h.name):
        services = sorted(per_host[host.name], key=lambda p: p[0].name)
        assignments = assign_ports(host, services, fleet.ports, problems)
        planned = []
        for (s, _), a in zip(services, assignments):
            verdict = size_service(fleet, host, s)
            problems += [verdict.problem] if verdict.problem else []
            warnings += [verdict.warning] if verdict.warning else []
            planned.append(PlannedService(s, a, verdict.capacity, auto_fraction=s.name in auto))
        planned = _running_totals(fleet, planned, warnings)
        host_plans.append(HostPlan(host=host, budget=fleet.budget(host), services=tuple(planned)))
    if problems:
        raise AllocationError(f"stack {fleet.stack}: cannot allocate the fleet: " + listing(problems) + ".")
    return Plan(fleet=fleet, hosts=tuple(host_plans), warnings=tuple(warnings))


def _running_totals(fleet: FleetConfig, services: list[PlannedService], notes: list[str]) -> list[PlannedService]:
    """Before vLLM-Ascend 0.15 an instance counts every process's memory on its cards as its own
    overhead (vllm-ascend issue 7308), so on a shared card a later service needs the fractions of
    those before it (in start order: name order) plus its own as `--gpu-memory-utilization`."""
    before: dict[int, Decimal] = {}
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
        for c in cards:
            before[c] = before.get(c, Decimal(0)) + s.memory_fraction
        out.append(ps)
    return out
