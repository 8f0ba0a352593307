"""Room for NPU graphs on shared cards: each service's graph pool is captured after its KV cache,
outside its memoryFraction, and the plan warns, with the arithmetic and the start order, when the
services on a card would not all fit."""

from __future__ import annotations

import json
from decimal import Decimal

from allocation.config import Defaults, Service
from allocation.defaults import DEFAULT_GRAPH_MEMORY_GIB
from allocation.planner import plan_fleet
from allocation.resolved import resolve
from cli.stackfile import load_fleet
from tests.support.stacks import fleet, host, service
from views.report import plan_json, render_plan
from tests.support.pipeline import deployment_of

# bge-m3 and qwen-vl as prod has them (Pulumi.prod.yaml), on card 0 of a 64 GB 910B (60.96 GiB).
BGE = {"weightBytes": 2275000000, "numHiddenLayers": 24, "attention": "encoder", "torchDtype": "float32"}
QWEN = {
    "weightBytes": 55565000000, "numHiddenLayers": 64, "attention": "hybrid", "modelType": "qwen3_5_text",
    "numFullAttentionLayers": 16, "numKeyValueHeads": 4, "headDim": 256, "linearNumKeyHeads": 16,
    "linearNumValueHeads": 48, "linearKeyHeadDim": 128, "linearValueHeadDim": 128, "linearConvKernelDim": 4,
    "mambaSsmDtype": "float32",
}  # fmt: skip


def seed(bge: dict | None = None, qwen: dict | None = None, **extra):
    """The seed's card 0: bge-m3 at 0.1 and rank 0 of qwen-vl at 0.85, with their profiles."""
    return fleet([host("npu-a")], [
        service("bge-m3", 1, 0.1, host="npu-a", devices=[0], maxModelLen=8192, profile=BGE, **(bge or {})),
        service("qwen-vl", 4, 0.85, host="npu-a", devices=[0, 1, 2, 3], maxModelLen=25000, maxNumSeqs=10,
                profile=QWEN, **(qwen or {})),
    ], **extra)  # fmt: skip


def graph_warnings(f) -> list[str]:
    return [w for w in plan_fleet(f).warnings if "NPU graph" in w]


def test_the_allowance_is_the_services_else_the_defaults_else_the_projects():
    assert DEFAULT_GRAPH_MEMORY_GIB == Decimal("2.5")
    assert resolve(Service(name="s", model="/m"), Defaults()).graph_memory_gi_b == Decimal("2.5")
    assert resolve(Service(name="s", model="/m"), Defaults(graphMemoryGiB=1)).graph_memory_gi_b == 1
    assert resolve(Service(name="s", model="/m", graphMemoryGiB=0), Defaults(graphMemoryGiB=1)).graph_memory_gi_b == 0
    assert f"Default {DEFAULT_GRAPH_MEMORY_GIB}" in Service.model_fields["graph_memory_gi_b"].description


def test_enforce_eager_in_args_captures_no_graphs_and_the_last_of_the_pair_wins():
    def captures(args, defaults=()):
        return resolve(Service(name="s", model="/m", args=list(args)), Defaults(args=list(defaults))).captures_graphs

    assert captures([]) and not captures(["--enforce-eager"]) and not captures([], defaults=["--enforce-eager"])
    assert captures(["--no-enforce-eager"], defaults=["--enforce-eager"])
    assert not captures(["--no-enforce-eager", "--enforce-eager"])


def test_two_fractions_that_fit_the_budget_overflow_the_card_with_their_graphs_exactly():
    # 0.5 and 0.45 of 60.96 GiB: 30.48 + 27.43 = 57.91 GiB, within the 0.95 budget; 2 GiB of graphs
    # each make 61.91 GiB, 0.95 GiB more than the card. Both orders fail at the second's capture.
    f = fleet([host("npu-a")], [service("a", 1, 0.5, host="npu-a", devices=[0]),
                                service("b", 1, 0.45, host="npu-a", devices=[0])], defaults={"graphMemoryGiB": 2})  # fmt: skip
    assert graph_warnings(f) == [
        "host npu-a card 0: its services hold 61.91 GiB of the card's 60.96 GiB once started, their NPU graphs "
        "(captured after the KV cache, outside memoryFraction) included: a 30.48 GiB (memoryFraction 0.5) + "
        "graph 2.00 GiB, b 27.43 GiB (memoryFraction 0.45) + graph 2.00 GiB. In the start order (name order on "
        "the card): after a (32.48 GiB), b finds 28.48 GiB free: it starts (needs 27.43 GiB) but its graph "
        "capture runs out of memory (needs 29.43 GiB, 0.95 GiB short). The reverse order fails too: after b "
        "(29.43 GiB), a finds 31.53 GiB free: it starts (needs 30.48 GiB) but its graph capture runs out of "
        "memory (needs 32.48 GiB, 0.95 GiB short). Lower a memoryFraction there, set graphMemoryGiB to what "
        "each service's startup log reports (\"... GiB for NPU graph memory\"), or add --enforce-eager to a "
        "service's args"
    ]


def test_prod_warns_that_card_0_overflows_with_the_default_allowance():
    warnings = graph_warnings(load_fleet("prod")[0])
    assert warnings == [
        "host npu-a card 0: its services hold 61.87 GiB of the card's 60.96 GiB once started, their NPU graphs "
        "(captured after the KV cache, outside memoryFraction) included: bge-m3 5.06 GiB (no KV cache: 1.06 "
        "GiB weights + 4.00 GiB runtime overhead) + graph 2.50 GiB, qwen-vl 51.81 GiB (memoryFraction 0.85) + "
        "graph 2.50 GiB. In the start order (name order on the card): after bge-m3 (7.56 GiB), qwen-vl finds "
        "53.40 GiB free: it starts (needs 51.81 GiB) but its graph capture runs out of memory (needs 54.31 "
        "GiB, 0.92 GiB short). The reverse order fails too: after qwen-vl (54.31 GiB), bge-m3 finds 6.64 GiB "
        "free: it starts (needs 6.10 GiB) but its graph capture runs out of memory (needs 7.56 GiB, 0.92 GiB "
        "short). Lower a memoryFraction there, set graphMemoryGiB to what each service's startup log reports "
        "(\"... GiB for NPU graph memory\"), or add --enforce-eager to a service's args"
    ]


def test_the_start_order_can_hold_where_the_reverse_fails_at_vllms_free_memory_check():
    # An encoder holds less than its fraction (no KV cache) but vLLM still wants the whole fraction
    # free at start: first it leaves room, last it may not find it.
    warnings = graph_warnings(seed(bge={"graphMemoryGiB": 0.5}, qwen={"graphMemoryGiB": 3.5}))
    assert warnings == [
        "host npu-a card 0: the start order (name order on the card) holds: after bge-m3 (5.56 GiB), qwen-vl "
        "finds 55.40 GiB free and needs 51.81 GiB to start, 55.31 GiB with its NPU graphs. The reverse order fails: "
        "after qwen-vl (55.31 GiB), bge-m3 finds 5.64 GiB free and needs 6.10 GiB (memoryFraction 0.1): vLLM "
        "refuses to start (\"Free memory on device ... is less than desired GPU memory utilization\"). Its "
        "services: bge-m3 5.06 GiB (no KV cache: 1.06 GiB weights + 4.00 GiB runtime overhead) + graph 0.50 "
        "GiB, qwen-vl 51.81 GiB (memoryFraction 0.85) + graph 3.50 GiB, of the card's 60.96 GiB. A restart of "
        "a service while the others run starts it last: keep the start gate's order, or lower a memoryFraction "
        "there"
    ]


def test_a_start_order_that_fails_says_the_reverse_would_hold():
    # The same card with the encoder named to start last: name order fails, its reverse holds.
    f = fleet([host("npu-a")], [
        service("z-bge", 1, 0.1, host="npu-a", devices=[0], profile=BGE, graphMemoryGiB=0.5),
        service("qwen-vl", 4, 0.85, host="npu-a", devices=[0, 1, 2, 3], maxModelLen=25000, profile=QWEN,
                graphMemoryGiB=3.5),
    ])  # fmt: skip
    [warning] = graph_warnings(f)
    assert (
        "In the start order (name order on the card): after qwen-vl (55.31 GiB), z-bge finds 5.64 GiB free and "
        "needs 6.10 GiB (memoryFraction 0.1): vLLM refuses to start (\"Free memory on device ... is less than "
        "desired GPU memory utilization\"). The reverse order holds: after z-bge (5.56 GiB), qwen-vl finds 55.40 "
        "GiB free and needs 51.81 GiB to start, 55.31 GiB with its NPU graphs. Lower a memoryFraction"
    ) in warning


def test_a_card_with_room_for_every_graph_gets_no_warning():
    assert graph_warnings(seed(defaults={"graphMemoryGiB": 1})) == []


def test_an_enforce_eager_service_counts_no_graphs():
    # Without --enforce-eager prod's card 0 overflows (above); with it qwen-vl takes 51.81 GiB and no graphs.
    assert graph_warnings(seed(qwen={"args": ["--enforce-eager"]})) == []
    [warning] = graph_warnings(seed(qwen={"args": ["--enforce-eager"], "graphMemoryGiB": 9}, bge={"graphMemoryGiB": 5}))
    assert "qwen-vl 51.81 GiB (memoryFraction 0.85), no graphs (--enforce-eager)." in warning
    assert "hold 61.87 GiB" in warning


def test_a_card_shared_with_a_version_before_0_18_is_left_to_the_running_totals():
    f = fleet([host("npu-a")], [service("a", 1, 0.5, host="npu-a", devices=[0]),
                                service("b", 1, 0.45, host="npu-a", devices=[0], vllmAscendVersion="0.17.0")],
              defaults={"graphMemoryGiB": 2})  # fmt: skip
    assert graph_warnings(f) == []


def test_cards_with_the_same_services_share_one_warning():
    f = fleet([host("npu-a")], [service("a", 2, 0.5, host="npu-a", devices=[0, 1]),
                                service("b", 2, 0.45, host="npu-a", devices=[0, 1])], defaults={"graphMemoryGiB": 2})  # fmt: skip
    [warning] = graph_warnings(f)
    assert warning.startswith("host npu-a cards 0,1: its services hold 61.91 GiB")


def test_the_table_markdown_and_json_carry_the_plans_warnings():
    deployment = deployment_of(load_fleet("prod")[0])
    [graph] = [w for w in deployment.plan.warnings if "NPU graph" in w]
    assert plan_json(deployment)["warnings"] == list(deployment.plan.warnings)
    assert f"  warning: {graph}" in render_plan(deployment, "table", wide=True).splitlines()
    assert " ".join(f"warning: {graph}".split()) in " ".join(render_plan(deployment, "table").split())
    assert "### Warnings" in render_plan(deployment, "markdown")
    assert json.loads(render_plan(deployment, "json"))["warnings"] == list(deployment.plan.warnings)


def test_the_allowance_changes_no_container_input():
    plain, roomy = (deployment_of(seed(defaults={"graphMemoryGiB": g})) for g in (0, 9))
    assert [h["services"] for h in plan_json(plain)["hosts"]] == [h["services"] for h in plan_json(roomy)["hosts"]]
