"""The plan diff's formats (views.diff.render): each old and new value reaches the table, the JSON
and the markdown on its own side, for a host, a port, a move and a capacity change at once. The
expected values are read from the two plan documents, never from the diff."""

from __future__ import annotations

import copy
import json

import pytest

from tests.support.plan_documents import fleet
from views.diff import diff_plans, render_diff


@pytest.fixture(scope="module")
def plans() -> tuple[dict, dict]:
    old = fleet()
    for h in old["hosts"]:
        for s in h["services"]:
            s["capacity"] = {"fits": True, "kvCacheTokens": 1280}
    new = copy.deepcopy(old)
    host = new["hosts"][0]
    host["memoryBudget"] = 0.9
    by_name = {s["name"]: s for s in host["services"]}
    by_name["bge-m3"]["apiPort"] = 7008
    by_name["bge-m3"]["capacity"]["kvCacheTokens"] = 2560
    by_name["qwen-vl"]["devices"] = [4, 5, 6, 7]
    return old, new


def test_every_format_shows_each_changed_value_old_first(plans):
    old, new = plans
    text = {fmt: render_diff(diff_plans(old, new), fmt) for fmt in ("table", "markdown")}
    old_bge, new_bge = old["hosts"][0]["services"][0], new["hosts"][0]["services"][0]
    facts = [
        f"memoryBudget {old['hosts'][0]['memoryBudget']} -> {new['hosts'][0]['memoryBudget']}",
        f"apiPort {old_bge['apiPort']} -> {new_bge['apiPort']}",
        f"kvCacheTokens {old_bge['capacity']['kvCacheTokens']} -> {new_bge['capacity']['kvCacheTokens']}",
        "npu-a cards 0-3 -> npu-a cards 4-7",
    ]
    for fmt, rendered in text.items():
        for fact in facts:
            assert fact in rendered, f"{fmt} lacks {fact!r}"


def test_the_json_format_puts_each_old_value_under_old_and_each_new_value_under_new(plans):
    old, new = plans
    doc = json.loads(render_diff(diff_plans(old, new), "json"))
    [host] = doc["hosts"]
    budget = {"key": "memoryBudget", "old": old["hosts"][0]["memoryBudget"], "new": new["hosts"][0]["memoryBudget"]}
    assert host["changes"] == [budget]
    services = {s["name"]: s for s in doc["services"]}
    old_bge, new_bge = old["hosts"][0]["services"][0], new["hosts"][0]["services"][0]
    assert services["bge-m3"]["ports"] == [{"key": "apiPort", "old": old_bge["apiPort"], "new": new_bge["apiPort"]}]
    tokens = (old_bge["capacity"]["kvCacheTokens"], new_bge["capacity"]["kvCacheTokens"])
    assert services["bge-m3"]["capacity"] == [{"key": "kvCacheTokens", "old": tokens[0], "new": tokens[1]}]
    assert services["qwen-vl"]["moved"] == {
        "from": {"host": "npu-a", "devices": [0, 1, 2, 3]},
        "to": {"host": "npu-a", "devices": [4, 5, 6, 7]},
    }
