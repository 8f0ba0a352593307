"""Which services on a host must wait for others before they start.

Services sharing a card must start one after another (vllm-ascend issues 5917
and 5707: a second instance profiling memory while the first one loads finds no
room for its cache blocks). On each card the services are chained in name
order; services without a shared card, and services on other hosts, never wait
for each other, so independent deployments run in parallel. Pure.
"""

from __future__ import annotations

from allocation.plan import HostPlan


def start_after(host_plan: HostPlan) -> dict[str, tuple[str, ...]]:
    """Service name -> names of the services it starts after (its predecessor on each card)."""
    after: dict[str, set[str]] = {ps.name: set() for ps in host_plan.services}
    for services in host_plan.card_load().values():
        names = sorted(ps.name for ps in services)
        for before, current in zip(names, names[1:]):
            after[current].add(before)
    return {name: tuple(sorted(deps)) for name, deps in after.items()}
