"""The plan's every output (JSON, table, markdown, pins, compose, docker run, Prometheus, dashboard)
for the committed stacks and two fleets using every replica, router and defaults feature is byte
for byte what the code before the replica model wrote (`tests/goldens.py` says how they were made),
but for the one documented change below.
"""

from __future__ import annotations

import json

import pytest

from tests.goldens import GOLDENS, fleets, outputs

FLEETS = fleets()


def one_meaning_of_replica_of(plan_text: str) -> str:
    """The golden plan JSON with the one value the replica model changed (README, "The JSON format"):
    `replicaOf` names the service a container serves, so a service of its own names itself where the
    plan before wrote `null`, as Prometheus's `replica_of` label always did."""
    plan = json.loads(plan_text)
    for host in plan["hosts"]:
        for service in host["services"]:
            service["replicaOf"] = service["replicaOf"] or service["name"]
    return json.dumps(plan, indent=2)


def test_the_golden_plan_json_is_written_as_the_plan_writes_it_so_the_comparison_is_byte_for_byte():
    for name in FLEETS:
        text = json.loads((GOLDENS / f"{name}.json").read_text())["json"]
        assert json.dumps(json.loads(text), indent=2) == text


@pytest.mark.parametrize("name", sorted(FLEETS))
def test_every_output_of_the_plan_is_byte_identical_to_the_golden_written_before_the_refactor(name):
    golden = json.loads((GOLDENS / f"{name}.json").read_text())
    golden["json"] = one_meaning_of_replica_of(golden["json"])
    now = json.loads(json.dumps(outputs(FLEETS[name]), sort_keys=True))
    for what in golden:
        assert now[what] == golden[what], f"{name}: {what} differs from the golden"
    assert sorted(now) == sorted(golden)
