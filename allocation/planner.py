"""plan_fleet: the pure, deterministic allocator.

The plan is a function of the configuration alone: hosts and services are
handled in name order, never in YAML order, and nothing is read from the
network or the disk. Every problem found is reported at once in one
`AllocationError`; no partial plan is ever returned.
"""

from __future__ import annotations

from decimal import Decimal

from allocation.capacity import auto_fraction, size_service
from allocation.config import FleetConfig, Service
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
        host_plans.append(HostPlan(host=host, budget=fleet.budget(host), services=tuple(planned)))
    if problems:
        raise AllocationError(f"stack {fleet.stack}: cannot allocate the fleet: " + listing(problems) + ".")
    return Plan(fleet=fleet, hosts=tuple(host_plans), warnings=tuple(warnings))
