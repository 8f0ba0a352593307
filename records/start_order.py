"""Which services on a host `pulumi up` creates after others: a resource dependency, never an input.

Services sharing a card must not load at the same time (vllm issue 55827: a loading
neighbour's memory counts as the profiling instance's own). At run time the start gate's
card locks see to that (records.containers), in this order after a reboot too (records.card_order
writes `card_ranks` on the host); during `pulumi up` each service on a card
is also created after the one before it in name order, so its start timeout is not spent
waiting for a neighbour's load. A dependency replaces nothing, so a newcomer, whatever its
name, re-creates no neighbour. Services without a shared card, and services on other
hosts, never wait for each other, so independent deployments run in parallel. Pure.
"""

from __future__ import annotations

from typing import Iterable

from allocation.plan import HostPlan, ServicePlan


def card_ranks(host_plan: HostPlan) -> dict[int, tuple[ServicePlan, ...]]:
    """Each shared card's services in their deploy-time rank: name order. One order for every card,
    so no service comes before another on one card and after it on a second (the start gate's
    waits for predecessors, records.card_order, cannot go round in a circle)."""
    return {
        card: tuple(sorted(services, key=lambda ps: ps.name))
        for card, services in host_plan.card_load().items()
        if len(services) > 1
    }


def start_after(host_plan: HostPlan) -> list[tuple[ServicePlan, tuple[ServicePlan, ...]]]:
    """Each service of the host, in its order, with the services it starts after (its predecessor on
    each card), in name order."""
    after: dict[int, dict[int, ServicePlan]] = {id(ps): {} for ps in host_plan.services}  # by identity
    for ranked in card_ranks(host_plan).values():
        for before, current in zip(ranked, ranked[1:]):
            after[id(current)][id(before)] = before
    return [(ps, tuple(sorted(after[id(ps)].values(), key=lambda p: p.name))) for ps in host_plan.services]


def longest_start(services: Iterable[tuple[str, Iterable[int], int]]) -> tuple[int, tuple[str, ...]]:
    """The longest `pulumi up` can take, from the moment a host's containers may start (after its
    takeover), until every one of them answers /health, if each takes its whole start timeout: the
    services of a shared card are created one after another in name order (`card_ranks`), the
    others together. `services`: (name, cards, start timeout in seconds). Returns the seconds and the
    chain of names that takes them, in start order; (0, ()) for no service. The bound assumes
    every independent container is created at once: `pulumi up` runs at most `--parallel` operations
    at a time, by default 4 per CPU of the machine running it (pulumi/pulumi
    `pkg/cmd/pulumi/operations/up.go`, `defaultParallel`), and a container waiting for its health
    holds its slot, so more containers than that queue behind the loads."""
    last: dict[int, tuple[int, tuple[str, ...]]] = {}  # per card: its latest service's bound and chain
    longest: tuple[int, tuple[str, ...]] = (0, ())
    for name, cards, seconds in sorted(services, key=lambda s: s[0]):
        on = tuple(cards)
        before = max((last[c] for c in on if c in last), default=(0, ()))
        mine = (before[0] + seconds, (*before[1], name))
        last |= dict.fromkeys(on, mine)
        longest = mine if mine[0] > longest[0] else longest  # of equal ones, the first in name order
    return longest
