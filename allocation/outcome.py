"""What a rule of the planner returns: what it keeps, and why it refuses.

Placement, port windows, the capacity check, the fraction `memoryFraction: auto` picks and the
running totals on shared cards each return an `Outcome`: their value with the problems that stop
the plan, the warnings it goes on with and the notes it adds, as gpustack's scheduler filters return (kept, messages)
(gpustack/policies/). The planner gathers them in order; no rule appends to a list it was handed,
so a rule's refusal is written where the rule is. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Sequence, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Outcome(Generic[T]):
    value: T
    problems: tuple[str, ...] = ()
    """Why the plan cannot be made as asked (vLLM would refuse to start, a window has no room...): it stops."""
    warnings: tuple[str, ...] = ()
    """What runs, but not as configured, or a real risk: shown, and the plan goes on."""
    notes: tuple[str, ...] = ()
    """Where a figure comes from when the plan cannot vouch for it (an unverified profile, an estimate, a
    service it could not size), and how to make it sure: no fault of the layout, so never a warning."""


def where(host: str, cards: Sequence[int] = ()) -> str:
    """Where a warning or a note applies, its first words: `host npu-a`, `host npu-a card 0`, `host npu-a cards 0,1`.
    After them it names the key to change (`host npu-a card 0: graphMemoryGiB: ...`)."""
    return f"host {host} {card_words(cards)}" if cards else f"host {host}"


def card_words(cards: Sequence[int]) -> str:
    """`card 0`, `cards 0,1`."""
    return f"card{'s' if len(cards) > 1 else ''} {','.join(map(str, cards))}"
