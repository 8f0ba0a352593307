"""A host's `hbmGiB` and `hbmBytes` are judged by one rule: the host check's awk judge on the host, and
`plan` before it, which refuses a pair that no card could pass (allocation.hbm)."""

from __future__ import annotations

import math
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocation.errors import ConfigError
from allocation.hbm import HBM_BYTES_FLOOR, HBM_TOLERANCE, card_passes, declared_hbm_problem
from records.host_check import HBM_JUDGE
from tests.support.stacks import fleet, host, service


def near(gib: int) -> st.SearchStrategy[int]:
    """hbmBytes around a card of `gib` (70-120% of it), where the two bounds meet."""
    return st.integers(int(gib * 0.7 * (1 << 30)), int(gib * 1.2 * (1 << 30)))


def awk_verdicts(gib: int, hbm_bytes: int | None, totals: list[int]) -> list[bool]:
    """HBM_JUDGE, run by awk as the host check runs it, on one card per total: whether each passes."""
    lines = "".join(f"{card} {total}\n" for card, total in enumerate(totals))
    variables = {"want": " ".join(map(str, range(len(totals)))), "host": "h", "mib": gib * 1024,
                 "tol": HBM_TOLERANCE, "bytes": hbm_bytes or 0, "floor": HBM_BYTES_FLOOR}  # fmt: skip
    argv = ["awk", *(a for k, v in variables.items() for a in ("-v", f"{k}={v}")), HBM_JUDGE]
    said = subprocess.run(argv, input=lines, capture_output=True, text=True, check=True).stdout
    failed = {int(problem.split()[1]) for problem in said.split("\n  - ") if problem}
    return [card not in failed for card in range(len(totals))]


@settings(max_examples=60, deadline=None)
@given(gib=st.integers(1, 4096), data=st.data())
def test_card_passes_is_the_host_checks_awk_judgement(gib, data):
    mib, hbm_bytes = gib * 1024, data.draw(st.none() | near(gib))
    edges = [math.floor(mib * 0.9), math.ceil(mib * 0.9), math.floor(mib * 1.1), math.ceil(mib * 1.1)]
    if hbm_bytes:
        edges += [hbm_bytes // (1 << 20), -(-hbm_bytes // (1 << 20)), math.floor(hbm_bytes / (1 << 20) / 0.85)]
    totals = [t for e in edges for t in (e - 1, e, e + 1)] + data.draw(st.lists(st.integers(1, 2 * mib), max_size=20))
    assert [card_passes(t, gib, hbm_bytes) for t in totals] == awk_verdicts(gib, hbm_bytes, totals)


@settings(max_examples=60, deadline=None)
@given(gib=st.integers(1, 48), data=st.data())
def test_plan_refuses_exactly_the_declarations_no_card_passes(gib, data):
    hbm_bytes = data.draw(near(gib))
    window = range(math.floor(gib * 1024 * 0.9), math.ceil(gib * 1024 * 1.1) + 1)
    some_card = any(card_passes(total, gib, hbm_bytes) for total in window)
    assert (declared_hbm_problem(gib, hbm_bytes) is None) == some_card


@pytest.mark.parametrize(("gib", "hbm_bytes"), [(32, 65452113920), (64, 31662800896), (64, 80_000_000_000)])
def test_hbm_bytes_no_card_of_hbm_gib_holds_is_refused_naming_the_host_and_both_values(gib, hbm_bytes):
    with pytest.raises(ConfigError) as refused:
        fleet([host("npu-b", hbmGiB=gib, hbmBytes=hbm_bytes)], [service("a")])
    message = str(refused.value)
    assert f"hosts[0] (npu-b): hbmBytes {hbm_bytes} cannot be the runtime's total of a card of hbmGiB {gib}" in message
    assert "\n" not in message


@pytest.mark.parametrize(("gib", "hbm_bytes"), [(64, 65452113920), (32, 31662800896), (48, 48 << 30), (32, 35_000_000_000)])
def test_hbm_bytes_a_card_of_hbm_gib_can_hold_is_accepted(gib, hbm_bytes):
    assert fleet([host("npu-a", hbmGiB=gib, hbmBytes=hbm_bytes)], [service("a")]).hosts[0].hbm_bytes == hbm_bytes
