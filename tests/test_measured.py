"""A service's `measured:` figures (what `calibrate` read from its container's startup log) in the
plan: its weights and runtime overhead replace the profile's and the stack's allowance while its
tensor-parallel size is the one measured, its graph pool is named measured, and the plan says which
figures are measured and which are estimates; a measurement of another size is named and not used."""

from __future__ import annotations

import re

from jsonschema import Draft202012Validator

from allocation.capacity import GIB
from allocation.planner import plan_fleet
from tests.support.stacks import fleet, host, service
from views.plan_schema import plan_schema
from views.report import plan_json, render_plan
from tests.support.pipeline import deployment_of

QWEN3 = {"weightBytes": 16_000_000_000, "numHiddenLayers": 36, "numKeyValueHeads": 8, "headDim": 128}


def measured(tp: int = 2, **extra) -> dict:
    return {
        "container": "model-text", "host": "npu-a", "date": "2026-12-05T10:11:12Z", "tensorParallelSize": tp,
        "line": "(Worker_TP0 pid=70) INFO 12-05 10:11:12 [worker.py:546] ...", "memoryFraction": 0.9,
        "weightsGiB": 7.25, "overheadGiB": 1.5, "graphMemoryGiB": 0.4, "kvCacheGiB": 44.1, **extra,
    }  # fmt: skip


def one(tp: int = 2, **extra):
    return fleet([host("npu-a")], [service("chat", tp, 0.9, host="npu-a", maxModelLen=32768, profile=QWEN3, **extra)])


def sized(f):
    [hp] = plan_fleet(f).hosts
    return hp.services[0].capacity


def test_measured_weights_and_overhead_replace_the_profiles_and_the_allowance_at_the_measured_size():
    profile_only = sized(one())
    assert (profile_only.weight_bytes_per_card, profile_only.overhead_bytes) == (8_000_000_000, 4 * GIB)
    cap = sized(one(measured=measured(), graphMemoryGiB=0.4))
    assert (cap.weight_bytes_per_card, cap.overhead_bytes) == (int(7.25 * GIB), int(1.5 * GIB))
    assert cap.kv_bytes_per_card == cap.budget_bytes - int(7.25 * GIB) - int(1.5 * GIB)
    own = sized(one(measured=measured(), runtimeOverheadGiB=2))
    assert own.overhead_bytes == 2 * GIB, "a service's own runtimeOverheadGiB still wins"


def test_a_measurement_of_another_tensor_parallel_size_is_named_and_not_used():
    f = one(tp=4, measured=measured(tp=2), graphMemoryGiB=0.4)
    cap = sized(f)
    assert cap.weight_bytes_per_card == 4_000_000_000 and cap.overhead_bytes == 4 * GIB
    assert [w for w in plan_fleet(f).warnings if "measured:" in w] == [
        "host npu-a cards 0,1,2,3: measured: chat's startup figures (container model-text on npu-a, "
        "2026-12-05T10:11:12Z) were taken at tensorParallelSize 2 and it now has 4, so the plan takes its weights and "
        "runtime overhead from its profile and runtimeOverheadGiB again, and its graphMemoryGiB is still that "
        "measurement's: run python -m allocation calibrate once it has started with the new size"
    ]
    service_json = plan_json(deployment_of(f))["hosts"][0]["services"][0]
    assert service_json["measured"]["used"] is False and service_json["measured"]["weightsGiB"] == 7.25


def figures(f) -> list[list[str]]:
    text = render_plan(deployment_of(f), "table")
    table = text[text.index("  figures") :].split("\n\n")[0]
    return [re.split(r" {2,}", line.strip()) for line in table.splitlines()]


def test_the_plan_names_each_figure_measured_set_estimated_or_not_counted_where_a_service_is_measured():
    f = fleet([host("npu-a")], [
        service("chat", 2, 0.5, host="npu-a", devices=[0, 1], maxModelLen=32768, profile=QWEN3, measured=measured(),
                graphMemoryGiB=0.4),
        service("edited", 2, 0.4, host="npu-a", devices=[0, 1], maxModelLen=32768, profile=QWEN3,
                measured=measured(), graphMemoryGiB=0.6),
        service("estimated", 1, 0.5, host="npu-a", devices=[2], maxModelLen=32768, profile=QWEN3),
        service("eager", 1, 0.5, host="npu-a", devices=[3], maxModelLen=32768, profile=QWEN3, args=["--enforce-eager"]),
        service("bare", 1, 0.5, host="npu-a", devices=[4]),
    ])  # fmt: skip
    rows = figures(f)
    assert rows[0] == ["figures", "weights/card", "runtime overhead", "NPU graphs", "measured"]
    by_name = {row[0]: row[1:] for row in rows[1:]}
    taken = "model-text, 2026-12-05T10:11:12Z: KV cache 44.1 GiB/card at memoryFraction 0.9"
    assert by_name["chat"] == ["7.25 GiB measured", "1.50 GiB measured", "0.40 GiB measured", taken]
    assert by_name["edited"] == ["7.25 GiB measured", "1.50 GiB measured", "0.60 GiB graphMemoryGiB", taken]
    assert by_name["estimated"][:2] == ["14.90 GiB profile", "4.00 GiB runtimeOverheadGiB"]
    assert by_name["estimated"][2].endswith(" GiB estimate") and by_name["estimated"][3] == "-"
    assert by_name["eager"][2] == "none (--enforce-eager)"
    assert by_name["bare"] == ["-", "-", "not counted (no profile)", "-"]



def test_every_host_where_the_plan_counts_a_figure_names_its_sources_and_one_without_any_has_a_note_instead():
    f = fleet([host("npu-a"), host("npu-b"), host("npu-c")], [
        service("chat", 2, 0.9, host="npu-a", maxModelLen=32768, profile={**QWEN3, "unverified": "weights guessed"}),
        service("bare", 1, 0.5, host="npu-b"),
        service("eager", 1, 0.5, host="npu-c", args=["--enforce-eager"]),
    ])  # fmt: skip
    text = render_plan(deployment_of(f), "table")
    assert text.count("  figures") == 1 and text.index("  figures") < text.index("npu-b (")
    assert figures(f)[1][:3] == ["chat", "7.45 GiB unverified profile", "4.00 GiB runtimeOverheadGiB"]
    assert figures(f)[1][3].endswith(" GiB estimate") and figures(f)[1][4] == "-"
    assert [n.split(": ")[:2] for n in plan_fleet(f).notes] == [
        ["host npu-a cards 0,1", "profile"], ["host npu-b", "profile"], ["host npu-c", "profile"]
    ]


def test_a_shortfall_of_measured_graph_pools_is_no_estimate_and_names_them_measured():
    f = fleet([host("npu-a")], [
        service("a", 1, 0.5, host="npu-a", devices=[0], graphMemoryGiB=2,
                measured=measured(tp=1, graphMemoryGiB=2, container="a")),
        service("b", 1, 0.45, host="npu-a", devices=[0], graphMemoryGiB=2,
                measured=measured(tp=1, graphMemoryGiB=2, container="b")),
    ])  # fmt: skip
    [warning] = [w for w in plan_fleet(f).warnings if "NPU graph" in w]
    assert warning.startswith("host npu-a card 0: memoryFraction, graphMemoryGiB: ")
    assert "a 30.48 GiB (memoryFraction 0.5) + graphs 2.00 GiB (measured)" in warning


def test_a_plan_with_measurements_fits_the_plan_schema():
    f = one(measured=measured(kvCacheTokens=1_841_250), graphMemoryGiB=0.4)
    document = plan_json(deployment_of(f))
    assert list(Draft202012Validator(plan_schema()).iter_errors(document)) == []
    assert document["hosts"][0]["services"][0]["measured"] == measured(kvCacheTokens=1_841_250) | {"used": True}
