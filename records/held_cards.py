"""Held cards: the running services a plan stops, told by the plan itself.

A card opened by one container cannot be opened by a second one unless it is in device-share
mode, and the mode can only change while no container uses the card (records/device_share.py).
So a plan that puts a new service on a card a running service holds alone stops that service while
the card switches, or `pulumi up` refuses at the host check (the host's `heldCards`). `plan
--against` sees this by comparing two plans; plain `plan` and `pin` have only one, and take a
pinned service (`devices`, or its replica's `replicaPins`) to be running, as placement does
(allocation/placement.py). The card is held when the host's `cardSharing` is `deviceShare`, the
plan puts it into the mode, and the pinned services alone would not (so it is not shared today),
while a pinned service uses it; its holder is that service (one at most: two pinned services on a
card already share it). On Atlas A3 the mode reaches both chips of an NPU, so a pinned service on
the other chip of a newly shared card is a holder too. What the plan cannot know: a service pinned
in the same edit that adds it (as `pin` does) looks as if it ran; `plan --against` knows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from allocation.plan import HostPlan, ServicePlan

# What `pulumi up` does about such a card, by the host's `heldCards` (records/host_check.py and
# records/device_share.py); a plan written before the key existed behaves as `refuse`.
HELD_CARDS = {
    "stopHolders": "heldCards stopHolders: pulumi up stops them, switches the card and starts them again",
    "refuse": "heldCards refuse: pulumi up stops at the host check until they are stopped by hand "
    "(or the host's heldCards is stopHolders)",
}


@dataclass(frozen=True)
class HeldCard:
    """A card the plan switches to device-share mode while a pinned service holds it alone."""

    card: int
    holder: str
    """The pinned service on the card, which must stop while it switches."""
    newcomers: tuple[str, ...]
    """The unpinned services that join it (on A3: join a card of its NPU), by name."""
    shared_with: tuple[int, ...]
    """Empty when the card itself becomes shared; on A3 the newly shared cards of its NPU otherwise."""
    held_cards: str
    """The host's `heldCards`: what `pulumi up` does about the holder."""

    def text(self) -> str:
        joined = ", ".join(self.newcomers)
        if self.shared_with:
            cards = ",".join(map(str, self.shared_with))
            why = f"card {self.card} shares its NPU with card {cards}, which becomes shared with {joined}"
        else:
            why = f"card {self.card} becomes shared with {joined}"
        return (
            f"{why}: {self.holder}, pinned there and so running, holds it alone and must stop while the card "
            f"switches to device-share mode; {HELD_CARDS[self.held_cards]}"
        )

    def to_json(self) -> dict[str, Any]:
        return {"card": self.card, "holder": self.holder, "joinedBy": list(self.newcomers), "reason": self.text()}


def _pinned(ps: ServicePlan) -> bool:
    return ps.instance.devices is not None


def held_cards(hp: HostPlan) -> tuple[HeldCard, ...]:
    """The cards of `hp` the plan switches to device-share mode under a pinned service, ascending."""
    if hp.host.card_sharing != "deviceShare" or not any(map(_pinned, hp.services)):
        return ()  # without a pinned service, no card has a holder
    load = hp.card_load()
    today = {c for card, on in load.items() if sum(map(_pinned, on)) > 1 for c in hp.host.sharing_unit(card)}
    shared = set(hp.shared_cards())
    out = []
    for card in sorted(set(hp.device_share_cards()) - today):
        holders = [ps.name for ps in load[card] if _pinned(ps)]
        if not holders:
            continue
        unit = [c for c in hp.host.sharing_unit(card) if c in shared]
        newcomers = sorted({ps.name for c in unit for ps in load[c] if not _pinned(ps)})
        others = tuple(c for c in unit if c != card) if card not in shared else ()
        out.append(HeldCard(card, holders[0], tuple(newcomers), others, hp.host.held_cards))
    return tuple(out)
