"""The exact card-level lower bound on hosts, for `plan_bench.py` only (needs `highspy`).

A service of tensor-parallel size T and memory fraction f puts T *slots* of size f on T cards,
and a card holds slots whose sizes sum to at most its budget (0.95 by default). Forget everything
else a real placement must respect (the T slots of one service on T different cards, on one host,
on an aligned block; `hcclPortRanges: false` keeping a card to itself): what is left is a bin
packing of the slots into cards. Every real placement is one of those packings, so it uses at
least as many cards as the smallest one, C, and at least ceil(C / NPUs per host) hosts. That is
the bound, and it is tight only as far as the forgotten rules cost nothing.

It is sharper than the closed-form ceil(sum(T x f) / budget / NPUs): that one assumes every card
can be filled to the last unit, but two 0.6 slots never share a card, a 0.9 leaves 0.05 nothing
fits, and most fractions are multiples of 0.05 or 0.1.

The packing is solved exactly as Gilmore and Gomory's pattern model: a *pattern* is a multiset of
slot sizes that fits one card; x_p cards use pattern p; minimise the cards subject to every size
being covered (sum_p count(size, p) x_p >= slots of that size; covering with >= is exact, since
dropping a slot from a pattern leaves a pattern). With a handful of distinct fractions there are
a few hundred patterns, and HiGHS's MIP solver proves the optimum in milliseconds.

Never imported by the planner: `plan` stays a pure-Python dependency of pydantic alone.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterable

import highspy


def patterns(sizes: list[int], budget: int) -> list[tuple[int, ...]]:
    """Every maximal pattern: counts per size (in `sizes` order) that fit `budget`, to which no
    further slot of any size can be added."""
    out: list[tuple[int, ...]] = []

    def extend(i: int, room: int, counts: list[int]) -> None:
        if i == len(sizes):
            if room < min(sizes):  # no slot fits in what is left: maximal
                out.append(tuple(counts))
            return
        for k in range(room // sizes[i], -1, -1):
            counts.append(k)
            extend(i + 1, room - k * sizes[i], counts)
            counts.pop()

    extend(0, budget, [])
    return out


def min_cards(slots: Iterable[int], budget: int) -> int:
    """The fewest cards of `budget` units that hold all `slots` (sizes in units), proven by HiGHS."""
    demand = Counter(slots)
    if not demand:
        return 0
    if max(demand) > budget:
        raise ValueError(f"a slot of {max(demand)} units is over the card budget {budget}")
    sizes = sorted(demand, reverse=True)
    pats = patterns(sizes, budget)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    x = [h.addVariable(lb=0, type=highspy.HighsVarType.kInteger) for _ in pats]
    for i, size in enumerate(sizes):
        h.addConstr(h.qsum(p[i] * x[j] for j, p in enumerate(pats) if p[i]) >= demand[size])
    h.minimize(h.qsum(x))
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"HiGHS did not prove an optimum: {h.modelStatusToString(h.getModelStatus())}")
    return round(h.getInfo().objective_function_value)


def min_hosts(services: Iterable[tuple[int, int]], budget: int, npus: int = 8) -> int:
    """The card-level bound on hosts for services given as (TP, fraction in units)."""
    slots = [units for tp, units in services for _ in range(tp)]
    return math.ceil(min_cards(slots, budget) / npus)
