"""A host's cards while a plan is made (allocation.placement.Cards): its quick answers (`fits`, `capacity`)
say what its worded rule (`refusal`) and a recount of every card say, whatever the cards hold."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from hypothesis import given, note, settings
from hypothesis import strategies as st

from allocation.config import units
from allocation.placement import Cards
from allocation.windows import PortWindow, WindowKind
from tests.support.stacks import fleet, host, service


@dataclass(frozen=True)
class Job:
    """What placement reads of a service, and no more."""

    name: str
    memory_fraction: Decimal
    tp_size: int = 1
    hccl_ranges: bool = True
    alone: str | None = None
    """Words when it holds its cards alone (a multi-host member, a prefill or decode instance)."""
    devices: list[int] | None = None
    host: str | None = None
    allowed_hosts: list[str] | None = None
    group: str | None = None

    def pinned(self, kind: WindowKind, size: int) -> PortWindow | None:
        return None


FRACTIONS = st.sampled_from([Decimal(f) for f in ("0.05", "0.1", "0.3", "0.45", "0.6", "0.85", "0.9")])
JOBS = st.builds(
    Job,
    name=st.sampled_from(["a", "b", "c"]),
    memory_fraction=FRACTIONS,
    tp_size=st.sampled_from([1, 2, 4, 8]),
    hccl_ranges=st.booleans(),
    alone=st.sampled_from([None, None, "a prefill or decode instance"]),
    devices=st.sampled_from([None, [0]]),
)
SHARING = st.sampled_from(["deviceShare", "privileged", "refuse"])


def _cards(sharing: str) -> Cards:
    values = fleet([host("npu-a", cardSharing=sharing)], [service("unused")])
    h = values.hosts[0]
    return Cards(h, units(values.budget(h)))


def _recount(cards: Cards, tp: int, alone: bool, unheld: bool) -> int:
    """The largest fraction a block of `tp` cards could still get, counted card by card."""
    best = -1
    for start in range(0, cards.host.npus - tp + 1, tp):
        block = range(start, start + tp)
        if any(cards.sole[c] or (unheld and cards.pinned[c]) or (alone and cards.users[c]) for c in block):
            continue
        best = max(best, min(cards.free[c] for c in block))
    return best


def _taken(sharing: str, taken: list[tuple[Job, int]]) -> Cards:
    """Cards after each job took the aligned block at `start` (mod the host), where it fit."""
    cards = _cards(sharing)
    for job, start in taken:
        blocks = cards.aligned_blocks(job.tp_size)
        block = blocks[start % len(blocks)]
        if all(cards.refusal(c, job) is None for c in block):
            cards.take(block, job)
    return cards


@settings(max_examples=150, deadline=None)
@given(SHARING, st.lists(st.tuples(JOBS, st.integers(0, 7)), max_size=12), JOBS, st.frozensets(st.integers(0, 7)))
def test_a_block_fits_exactly_when_no_card_of_it_refuses_the_service(sharing, taken, job, avoid):
    cards = _cards(sharing) if not taken else _taken(sharing, taken)
    for block in cards.aligned_blocks(job.tp_size):
        worded = [cards.refusal(c, job, avoid) for c in block]
        note(f"block {block}: {worded}")
        assert cards.fits(block, job, avoid) == all(w is None for w in worded)


def _every_capacity_is_recounted(cards: Cards) -> None:
    for tp in (1, 2, 4, 8):
        for alone in (False, True):
            for unheld in (False, True):
                assert cards.capacity(tp, alone, unheld) == _recount(cards, tp, alone, unheld), (tp, alone, unheld)


@settings(max_examples=150, deadline=None)
@given(SHARING, st.lists(st.tuples(JOBS, st.integers(0, 7)), max_size=12))
def test_the_capacity_of_a_host_is_what_a_recount_of_its_cards_gives_after_every_take(sharing, taken):
    cards = _cards(sharing)
    _every_capacity_is_recounted(cards)
    for job, start in taken:
        blocks = cards.aligned_blocks(job.tp_size)
        block = blocks[start % len(blocks)]
        if cards.fits(block, job):
            cards.take(block, job)
            note(f"{job.name} took {block}: free {cards.free}")
            _every_capacity_is_recounted(cards)
