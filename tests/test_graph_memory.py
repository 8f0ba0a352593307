"""Room for NPU graphs on shared cards: each service's graph pool is captured after its KV cache,
outside its memoryFraction, and the plan warns, with the arithmetic and the start order, when the
services on a card would not all fit. The pool is `graphMemoryGiB` (a startup log's figure), else an
estimate from the profile (tests/test_graph_estimate.py), and a warning built on one says so first."""

from __future__ import annotations

import json

from allocation.config import Defaults, Service
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
        service("bge-m3", 1, 0.1, host="npu-a", devices=[0], **{"maxModelLen": 8192, "profile": BGE, **(bge or {})}),
        service("qwen-vl", 4, 0.85, host="npu-a", devices=[0, 1, 2, 3],
                **{"maxModelLen": 25000, "maxNumSeqs": 10, "profile": QWEN, **(qwen or {})}),
    ], **extra)  # fmt: skip


def graph_warnings(f) -> list[str]:
    return [w for w in plan_fleet(f).warnings if "NPU graph" in w]


def test_the_allowance_is_the_services_else_the_defaults_else_unmeasured():
    assert resolve(Service(name="s", model="/m"), Defaults()).graph_memory_gi_b is None
    assert resolve(Service(name="s", model="/m"), Defaults(graphMemoryGiB=1)).graph_memory_gi_b == 1
    assert resolve(Service(name="s", model="/m", graphMemoryGiB=0), Defaults(graphMemoryGiB=1)).graph_memory_gi_b == 0
    assert "Unset: estimated from `profile`" in Service.model_fields["graph_memory_gi_b"].description


def test_enforce_eager_in_args_captures_no_graphs_and_the_last_of_the_pair_wins():
    def captures(args, defaults=()):
        return resolve(Service(name="s", model="/m", args=list(args)), Defaults(args=list(defaults))).captures_graphs

    assert captures([]) and not captures(["--enforce-eager"]) and not captures([], defaults=["--enforce-eager"])
    assert captures(["--no-enforce-eager"], defaults=["--enforce-eager"])
    assert not captures(["--no-enforce-eager", "--enforce-eager"])


def test_two_fractions_that_fit_the_budget_overflow_the_card_with_their_measured_graphs_exactly():
    # 0.5 and 0.45 of 60.96 GiB: 30.48 + 27.43 = 57.91 GiB, within the 0.95 budget; 2 GiB of graphs
    # each make 61.91 GiB, 0.95 GiB more than the card. Both orders fail at the second's capture.
    f = fleet([host("npu-a")], [service("a", 1, 0.5, host="npu-a", devices=[0]),
                                service("b", 1, 0.45, host="npu-a", devices=[0])], defaults={"graphMemoryGiB": 2})  # fmt: skip
    assert graph_warnings(f) == [
        "host npu-a card 0: memoryFraction, graphMemoryGiB: in the start order (name order on the card), after a "
        "(32.48 GiB), b finds 28.48 GiB free: it starts (needs 27.43 GiB) but its graph capture runs out of memory "
        "(needs 29.43 GiB, 0.95 GiB short). The reverse order fails too: after b (29.43 GiB), a finds 31.53 GiB "
        "free: it starts (needs 30.48 GiB) but its graph capture runs out of memory (needs 32.48 GiB, 0.95 GiB "
        "short). Its services hold 61.91 GiB of the card's 60.96 GiB, NPU graphs (captured after the KV cache, "
        "outside memoryFraction) included: a 30.48 GiB (memoryFraction 0.5) + graphs 2.00 GiB (graphMemoryGiB), b "
        "27.43 GiB (memoryFraction 0.45) + graphs 2.00 GiB (graphMemoryGiB). Lower a memoryFraction there, set graphMemoryGiB to "
        "each service's startup log (\"... GiB for NPU graph memory\"), or add --enforce-eager to a service's args"
    ]


def test_prods_card_0_has_room_for_its_estimated_graphs_as_the_compose_deployment_shows():
    # bge-m3 5.06 GiB (weights and allowance) + 0.17 GiB of graphs, qwen-vl 51.81 GiB + 0.05 GiB:
    # 57.09 GiB of 60.96, in either start order. The 2.5 GiB each that the plan once assumed left it
    # 0.92 GiB short, on a card the compose deployment runs today.
    assert graph_warnings(load_fleet("prod")[0]) == []


def test_a_card_that_holds_only_with_estimated_pools_is_a_note_with_the_room_left_and_how_to_measure_them():
    # The tightest start is the reverse order's last: after qwen-vl (51.81 + 0.05 GiB), bge-m3 finds 9.10 GiB
    # free and asks for its 6.10 to start: 3.00 GiB to spare.
    plan = plan_fleet(load_fleet("prod")[0])
    assert plan.warnings == ()
    assert [n for n in plan.notes if "NPU graph" in n] == [
        "host npu-a card 0: graphMemoryGiB: its services start in both orders with 3.00 GiB to spare, counting "
        "estimated NPU graph pools (bge-m3 0.17 GiB, qwen-vl 0.05 GiB); python -m allocation calibrate writes the "
        "measured ones"
    ]
    # One estimate left is still named; none left, no note; a card that fails is a warning, never both.
    one = plan_fleet(seed(bge={"graphMemoryGiB": 0.17}))
    assert [n.split("pools ")[1] for n in one.notes] == ["(qwen-vl 0.05 GiB); python -m allocation calibrate writes the measured ones"]
    assert plan_fleet(seed(bge={"graphMemoryGiB": 0.17}, qwen={"graphMemoryGiB": 0.05})).notes == ()
    short = plan_fleet(seed(qwen={"memoryFraction": 0.9}, memoryBudget=1))
    assert short.notes == () and [w.split(":")[0] for w in short.warnings] == ["estimate"]


def test_a_warning_built_on_an_estimate_says_so_in_its_first_word():
    # qwen-vl at 0.9 (a budget of 1): after it, bge-m3 finds 6.04 GiB free and vLLM wants its 6.10.
    [warning] = graph_warnings(seed(qwen={"memoryFraction": 0.9}, memoryBudget=1))
    assert warning.startswith("estimate: host npu-a card 0: memoryFraction: the start order (name order on the card) holds")
    assert (
        "bge-m3 5.06 GiB (no KV cache: 1.06 GiB weights + 4.00 GiB runtimeOverheadGiB) + graphs 0.17 GiB (estimate), "
        "qwen-vl 54.86 GiB (memoryFraction 0.9) + graphs 0.05 GiB (estimate)"
    ) in warning
    measured = {"graphMemoryGiB": 0.17}
    [warning] = graph_warnings(seed(bge=measured, qwen={"memoryFraction": 0.9, **measured}, memoryBudget=1))
    assert warning.startswith("host npu-a card 0: memoryFraction:")


def test_the_start_order_can_hold_where_the_reverse_fails_at_vllms_free_memory_check():
    # An encoder holds less than its fraction (no KV cache) but vLLM still wants the whole fraction
    # free at start: first it leaves room, last it may not find it.
    warnings = graph_warnings(seed(bge={"graphMemoryGiB": 0.5}, qwen={"graphMemoryGiB": 3.5}))
    assert warnings == [
        "host npu-a card 0: memoryFraction: the start order (name order on the card) holds: after bge-m3 (5.56 "
        "GiB), qwen-vl finds 55.40 GiB free and needs 51.81 GiB to start, 55.31 GiB with its NPU graphs. The "
        "reverse order fails: after qwen-vl (55.31 GiB), bge-m3 finds 5.64 GiB free and needs 6.10 GiB "
        "(memoryFraction 0.1): vLLM refuses to start (\"Free memory on device ... is less than desired GPU memory "
        "utilization\"). A service restarted while the others run starts last: keep the start gate's order, or "
        "lower a memoryFraction there. Its services: bge-m3 5.06 GiB (no KV cache: 1.06 GiB weights + 4.00 GiB "
        "runtimeOverheadGiB) + graphs 0.50 GiB (graphMemoryGiB), qwen-vl 51.81 GiB (memoryFraction 0.85) + graphs "
        "3.50 GiB (graphMemoryGiB), of the card's 60.96 GiB"
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
        "in the start order (name order on the card), after qwen-vl (55.31 GiB), z-bge finds 5.64 GiB free and "
        "needs 6.10 GiB (memoryFraction 0.1): vLLM refuses to start (\"Free memory on device ... is less than "
        "desired GPU memory utilization\"). The reverse order holds: after z-bge (5.56 GiB), qwen-vl finds 55.40 "
        "GiB free and needs 51.81 GiB to start, 55.31 GiB with its NPU graphs. Its services hold 60.87 GiB"
    ) in warning


def test_a_card_with_room_for_every_graph_gets_no_warning():
    assert graph_warnings(seed(defaults={"graphMemoryGiB": 1})) == []


def test_an_enforce_eager_service_counts_no_graphs():
    # With 5 GiB of bge-m3's graphs card 0 overflows; with --enforce-eager qwen-vl takes 51.81 GiB and no graphs.
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
    assert warning.startswith("host npu-a cards 0,1: memoryFraction, graphMemoryGiB: in the start order")


def test_the_table_markdown_and_json_carry_the_plans_warnings():
    deployment = deployment_of(seed(defaults={"graphMemoryGiB": 2.5}))
    [graph] = [w for w in deployment.plan.warnings if "NPU graph" in w]
    assert plan_json(deployment)["warnings"] == list(deployment.plan.warnings)
    assert f"  warning: {graph}" in render_plan(deployment, "table", wide=True).splitlines()
    assert " ".join(f"warning: {graph}".split()) in " ".join(render_plan(deployment, "table").split())
    assert "### Warnings" in render_plan(deployment, "markdown")
    assert json.loads(render_plan(deployment, "json"))["warnings"] == list(deployment.plan.warnings)


def test_a_card_with_a_service_of_neither_figure_nor_profile_is_not_checked_and_the_plan_says_so():
    # bge-m3 without its profile: its graphs could be anything, so card 0 is named, not judged.
    f = seed(bge={"profile": None}, qwen={"memoryFraction": 0.9}, memoryBudget=1)
    assert plan_fleet(f).warnings == ()
    assert plan_fleet(f).notes == (
        "host npu-a: profile: bge-m3 not sized (no profile): its KV cache and card 0's room for NPU graphs are not "
        "checked; python -m allocation profile writes the profile",
    )
    # Its startup log's figure is enough for the card: it is checked again, and fails in both orders.
    measured = seed(bge={"profile": None, "graphMemoryGiB": 0.2}, qwen={"memoryFraction": 0.9}, memoryBudget=1)
    [card] = plan_fleet(measured).warnings
    assert card.startswith("estimate: host npu-a card 0: memoryFraction, graphMemoryGiB: in the start order")
    assert "bge-m3 6.10 GiB (memoryFraction 0.1) + graphs 0.20 GiB (graphMemoryGiB)" in card
    assert plan_fleet(measured).notes == (
        "host npu-a: profile: bge-m3 not sized (no profile): its KV cache is not checked; python -m allocation profile writes the profile",
    )


def test_the_allowance_changes_no_container_input():
    plain, roomy, estimated = (deployment_of(seed(defaults=d)) for d in ({"graphMemoryGiB": 0}, {"graphMemoryGiB": 9}, {}))
    services = [[h["services"] for h in plan_json(d)["hosts"]] for d in (plain, roomy, estimated)]
    assert services[0] == services[1] == services[2]
