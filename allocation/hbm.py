"""A host's declared HBM (`hbmGiB`, `hbmBytes`) against the card npu-smi shows: one rule, two times.

The host check judges each planned card on the host before `pulumi up` changes it
(records.host_check `HBM_JUDGE`, an awk script over `npu-smi info`); `card_passes` is that judgement
in Python, and `declared_hbm_problem` asks it when the config is read, so that a pair no card can
pass (`hbmBytes` of a 64 GB card on a host of `hbmGiB: 32`) is refused by `plan`, naming the host
and both values, instead of by the first `pulumi up`. tests/test_hbm.py runs the awk judge beside
`card_passes`. Pure.
"""

from __future__ import annotations

import math

MIB = 1 << 20
# How far npu-smi's HBM total (MB, which are MiB: 65536 for a 64 GB card) may stray from `hbmGiB`
# x 1024: 10%. Cards come in 32 and 64 GB, so a wrong declaration is off by half or double, and
# a driver that shows a few percent less still passes. `hbmBytes`, the runtime's total, sits below
# npu-smi's: 65452113920 bytes is 95.2% of 65536 MiB, 31662800896 is 92.2% of 32768 MiB (DOMAIN.md,
# vllm-ascend issues 3843, 6250); it must lie within 85-100% of the card's.
HBM_TOLERANCE = 0.10
HBM_BYTES_FLOOR = 0.85


def card_passes(total_mib: int, hbm_gi_b: int, hbm_bytes: int | None) -> bool:
    """The host check's verdict on a card whose npu-smi total is `total_mib`, with the awk judge's
    very comparisons (floating point, as awk computes): within 10% of `hbmGiB`, and `hbmBytes`, when
    set, within 85-100% of the card's."""
    mib = hbm_gi_b * 1024
    if total_mib < mib * (1 - HBM_TOLERANCE) or total_mib > mib * (1 + HBM_TOLERANCE):
        return False
    return not hbm_bytes or not (hbm_bytes > total_mib * MIB or hbm_bytes < total_mib * MIB * HBM_BYTES_FLOOR)


def declared_hbm_problem(hbm_gi_b: int, hbm_bytes: int | None) -> str | None:
    """Why no card passes the host check with both declarations, or None. Each bound is monotone in the
    card's size, so the smallest card that meets both lower bounds passes if any card does."""
    if not hbm_bytes:
        return None
    smallest = max(math.ceil(hbm_gi_b * 1024 * (1 - HBM_TOLERANCE)), -(-hbm_bytes // MIB))
    if card_passes(smallest, hbm_gi_b, hbm_bytes):
        return None
    low = math.ceil(hbm_gi_b * 1024 * (1 - HBM_TOLERANCE))
    high = math.floor(hbm_gi_b * 1024 * (1 + HBM_TOLERANCE))
    return (
        f"hbmBytes {hbm_bytes} cannot be the runtime's total of a card of hbmGiB {hbm_gi_b}: the host check "
        f"takes such a card to show {low}-{high} MB in npu-smi, and hbmBytes to be {HBM_BYTES_FLOOR:.0%}-100% of "
        f"it, so between {math.ceil(low * MIB * HBM_BYTES_FLOOR)} and {high * MIB} bytes; set hbmBytes to the "
        "total the runtime reports (vLLM logs it), or hbmGiB to the card's size"
    )
