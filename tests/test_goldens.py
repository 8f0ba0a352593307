"""The plan's every output (JSON, table, markdown, pins, compose, docker run, Prometheus, dashboard)
for the committed stacks and two fleets using every replica, router and defaults feature is byte
for byte what the code before the replica model wrote (`tests/goldens.py` says how they were made).
"""

from __future__ import annotations

import json

import pytest

from tests.goldens import GOLDENS, fleets, outputs

FLEETS = fleets()


@pytest.mark.parametrize("name", sorted(FLEETS))
def test_every_output_of_the_plan_is_byte_identical_to_the_golden_written_before_the_refactor(name):
    golden = json.loads((GOLDENS / f"{name}.json").read_text())
    now = json.loads(json.dumps(outputs(FLEETS[name]), sort_keys=True))
    for what in golden:
        assert now[what] == golden[what], f"{name}: {what} differs from the golden"
    assert sorted(now) == sorted(golden)
