"""The plan JSON says what each entry is (`kind`: service, replica or router), and `plan --against`
reads that, not the entry's name, for what a re-created container costs; it compares exactly the
capacity keys the plan JSON writes."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from tests.support.stacks import host, service
from views.diff import diff_plans, render_diff
from tests.support.pipeline import plan_json_of

PROFILE = {"weightBytes": 2 << 30, "numHiddenLayers": 24, "numKeyValueHeads": 8, "headDim": 128}
NEW_IMAGE = "quay.io/ascend/vllm-ascend:v0.20.3"


def values(image: str = "quay.io/ascend/vllm-ascend:v0.20.2rc1") -> dict[str, Any]:
    return {
        "hosts": [host("npu-a"), host("npu-b")],
        "defaults": {"image": image},
        "services": [
            service("solo", 1, 0.2, maxModelLen=4096, profile=PROFILE),
            service("bge", 1, 0.2, replicas=2, maxModelLen=4096, profile=PROFILE),
        ],
    }


def plan_doc(v: dict[str, Any]) -> dict[str, Any]:
    return plan_json_of(v, "t")


def entries(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every service, replica and router of a plan document, by name."""
    out = {s["name"]: s for h in doc["hosts"] for s in h["services"]}
    return out | {r["name"]: r for r in doc["routers"]}


def costs(old: dict[str, Any], new: dict[str, Any]) -> dict[str, str]:
    """Container -> the cost the markdown's "Will restart" table gives it."""
    markdown = render_diff(diff_plans(old, new), "markdown")
    return dict(re.findall(r"^\| `[^`]*` \| `([^`]*)` \| `[^`]*` \| (.*) \|$", markdown, re.M))


def test_each_entry_of_the_plan_json_says_whether_it_is_a_service_a_replica_or_a_router():
    assert {n: e["kind"] for n, e in entries(plan_doc(values())).items()} == {
        "solo": "service",
        "bge-1": "replica",
        "bge-2": "replica",
        "bge-router": "router",
    }


EXPECTED_COSTS = {
    "solo": "down for the model load",
    "bge-1": "replica of bge: one replica at a time, the others keep serving",
    "bge-2": "replica of bge: one replica at a time, the others keep serving",
    "bge-router": "router of bge: the endpoint is down until it is back",
}


def test_a_new_image_says_what_each_re_created_container_costs_by_what_it_is():
    assert costs(plan_doc(values()), plan_doc(values(NEW_IMAGE))) == EXPECTED_COSTS


def test_the_cost_follows_the_kind_not_the_name():
    """A router whose name has no `-router` suffix is still the endpoint's router."""
    old, new = plan_doc(values()), plan_doc(values(NEW_IMAGE))
    for doc in (old, new):
        doc["routers"][0]["name"] = "front"
    assert costs(old, new) == {**{k: v for k, v in EXPECTED_COSTS.items() if k != "bge-router"},
                               "front": EXPECTED_COSTS["bge-router"]}  # fmt: skip


def test_a_plan_written_before_kinds_is_read_by_where_each_entry_is():
    """`plan --against` an older revision: its plan JSON has no `kind`."""
    old, new = plan_doc(values()), plan_doc(values(NEW_IMAGE))
    for entry in entries(old).values():
        del entry["kind"]
    assert costs(old, new) == EXPECTED_COSTS


def test_every_capacity_key_the_plan_json_writes_is_compared_by_the_diff():
    old = plan_doc(values())
    written = list(entries(old)["solo"]["capacity"])
    assert len(written) == 8, written
    for key in written:
        new = copy.deepcopy(old)
        capacity = entries(new)["solo"]["capacity"]
        capacity[key] = not capacity[key] if isinstance(capacity[key], bool) else (capacity[key] or 0) + 1
        [solo] = [s for s in diff_plans(old, new).services if s.name == "solo"]
        assert [c.key for c in solo.capacity] == [key], f"a change of {key} alone"


@pytest.mark.parametrize("key", ["kvCacheBlocks", "blockSizeTokens", "bytesPerRequest"])
def test_a_change_of_a_capacity_detail_shows_in_every_format(key: str):
    old = plan_doc(values())
    new = copy.deepcopy(old)
    entries(new)["solo"]["capacity"][key] = (entries(old)["solo"]["capacity"][key] or 0) + 1
    for fmt in ("table", "markdown", "json"):
        assert key in render_diff(diff_plans(old, new), fmt), fmt
