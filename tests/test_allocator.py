"""Exact examples of the planner: the seed in, the expected cards and ranges out; and its errors."""

from __future__ import annotations


import pytest

from allocation.errors import AllocationError, ConfigError
from allocation.planner import plan_fleet
from records.deployment import deploy
from views.report import plan_json
from tests.support.stacks import fleet, host, seed_values, service
from tests.support.pipeline import plan_of


def assignments(values: dict) -> dict[str, dict]:
    plan = plan_of(values)
    return {s["name"]: s for h in plan_json(deploy(plan))["hosts"] for s in h["services"]}


def test_seed_fleet_without_pins_is_packed_and_conflict_free():
    got = assignments(seed_values())
    assert {n: (s["devices"], s["apiPort"]) for n, s in got.items()} == {
        # Largest first: qwen-long takes the first quad, qwen-vl the second, and
        # bge-m3 (0.1) fits exactly beside qwen-vl (0.85) under the 0.95 budget.
        "qwen-long": ([0, 1, 2, 3], 6006),
        "qwen-vl": ([4, 5, 6, 7], 9009),
        "bge-m3": ([4], 7007),
    }
    # Port windows in service-name order, aligned blocks from each base.
    assert got["bge-m3"]["hcclNpuSocketPortRange"] == [16666, 16681]
    assert got["qwen-long"]["hcclNpuSocketPortRange"] == [16682, 16697]
    assert got["qwen-vl"]["hcclNpuSocketPortRange"] == [16698, 16713]
    assert [got[n]["hcclHostSocketPortRange"] for n in ("bge-m3", "qwen-long", "qwen-vl")] == [
        [60032, 60047],
        [60048, 60063],
        [60064, 60079],
    ]
    assert [got[n]["hcclIfBasePort"] for n in ("bge-m3", "qwen-long", "qwen-vl")] == [61000, 61032, 61064]
    assert [got[n]["vllmPort"] for n in ("bge-m3", "qwen-long", "qwen-vl")] == [62000, 62016, 62032]


def test_point_one_plus_point_eight_five_fits_a_point_nine_five_budget_exactly():
    values = {"hosts": [host(npus=1)], "services": [service("a", 1, 0.1), service("b", 1, 0.85)]}
    assert {s["devices"][0] for s in assignments(values).values()} == {0}


def test_the_memory_budget_is_configurable_per_stack_and_per_host():
    services = [service("a", 1, 0.5), service("b", 1, 0.5)]
    one_card = [host(npus=1)]
    with pytest.raises(AllocationError):
        plan_fleet(fleet(one_card, services))
    plan_fleet(fleet(one_card, services, memoryBudget=1.0))
    plan_fleet(fleet([host(npus=1, memoryBudget=1.0)], services))


def test_tensor_parallel_groups_are_aligned_blocks():
    values = {"hosts": [host()], "services": [service("one", 1, 0.9), service("pair", 2, 0.9), service("quad", 4, 0.9)]}
    got = assignments(values)
    assert got["quad"]["devices"] == [0, 1, 2, 3]
    assert got["pair"]["devices"] == [4, 5]
    assert got["one"]["devices"] == [6]


def test_auto_placed_services_go_to_the_first_host_with_room():
    values = {
        "hosts": [host("npu-b"), host("npu-a")],
        "services": [service("big", 8, 0.9), service("small", 1, 0.4), service("other", 8, 0.5)],
    }
    got = assignments(values)
    assert got["big"]["host"] == "npu-a"
    assert got["other"]["host"] == "npu-b"
    assert got["small"]["host"] == "npu-b"  # 0.45 left on npu-b's cards, 0.05 on npu-a's


def test_a_newcomer_takes_free_cards_before_a_running_services_card_even_where_it_would_fit_better():
    # Best fit alone would put it beside `running` on card 0 (0.15 left instead of 0.65).
    values = {"hosts": [host()], "services": [service("running", 4, 0.5, devices=[0, 1, 2, 3]), service("new", 1, 0.3)]}
    assert assignments(values)["new"]["devices"] == [4]
    values["services"][1] = service("new", 4, 0.3)
    assert assignments(values)["new"]["devices"] == [4, 5, 6, 7]


def test_a_newcomer_shares_a_card_only_when_no_host_in_use_has_free_cards_for_it():
    pinned = service("running", 8, 0.5, host="npu-a", devices=list(range(8)))
    values = {"hosts": [host("npu-a"), host("npu-b"), host("npu-c")], "services": [pinned, service("new", 2, 0.3)]}
    # npu-a is the only host in use and has no free pair: as before, the first host by name with room.
    assert (assignments(values)["new"]["host"], assignments(values)["new"]["devices"]) == ("npu-a", [0, 1])
    # Once npu-c is in use and has a free pair, the newcomer goes there rather than share npu-a's cards.
    values["services"].append(service("other", 1, 0.3, host="npu-c", devices=[0]))
    got = assignments(values)
    assert (got["new"]["host"], got["new"]["devices"]) == ("npu-c", [2, 3])


def test_a_newcomer_pinned_to_a_host_keeps_off_a_running_services_cards_but_packs_beside_other_newcomers():
    running = service("running", 4, 0.5, host="npu-a", devices=[4, 5, 6, 7])
    values = {"hosts": [host("npu-a", npus=8)], "services": [running, service("new", 4, 0.4, host="npu-a")]}
    assert assignments(values)["new"]["devices"] == [0, 1, 2, 3]
    # `new` is not pinned, so not running yet: the next newcomer packs beside it (best fit) as before.
    values["services"].append(service("third", 4, 0.4, host="npu-a"))
    got = assignments(values)
    assert (got["new"]["devices"], got["third"]["devices"]) == ([0, 1, 2, 3], [0, 1, 2, 3])
    # Pinned, `new` runs too; a quad left for `third` only on running cards: it shares the fuller one.
    values["services"][1] = service("new", 4, 0.4, host="npu-a", devices=[0, 1, 2, 3])
    assert assignments(values)["third"]["devices"] == [4, 5, 6, 7]


def test_services_planned_together_still_pack_so_a_later_large_one_fits():
    # Pinned hosts are placed before auto-placed services, whatever their size: had `small` kept off
    # `big`'s card (which is not pinned, so not running yet), `later` would find no free quad.
    values = {
        "hosts": [host()],
        "services": [service("big", 4, 0.85, host="npu-a"), service("small", 1, 0.1, host="npu-a"), service("later", 4, 0.9)],
    }
    got = assignments(values)
    assert (got["big"]["devices"], got["small"]["devices"], got["later"]["devices"]) == ([0, 1, 2, 3], [0], [4, 5, 6, 7])


def test_a_service_without_hccl_port_ranges_gets_its_cards_to_itself():
    values = {
        "hosts": [host(npus=2)],
        "services": [service("mc2", 1, 0.3, hcclPortRanges=False), service("x", 1, 0.3), service("y", 1, 0.3)],
    }
    got = assignments(values)
    assert got["mc2"]["hcclNpuSocketPortRange"] is None
    assert got["mc2"]["hcclHostSocketPortRange"] is None
    assert got["mc2"]["devices"] != got["x"]["devices"] == got["y"]["devices"]
    # HCCL's default NPU port stays free for it: nobody else's range includes 16666.
    assert all(s["hcclNpuSocketPortRange"][0] > 16666 for n, s in got.items() if n != "mc2")


def test_reserved_ports_are_never_handed_out():
    values = {"hosts": [host(reservedPorts=["8000-8001"])], "services": [service("a"), service("b")]}
    values["ports"] = {"reserved": [8002, [16666, 16700]]}
    got = assignments(values)
    assert sorted(s["apiPort"] for s in got.values()) == [8003, 8004]
    assert got["a"]["hcclNpuSocketPortRange"] == [16714, 16729]  # next block past 16700


def windows_of(got: dict[str, dict]) -> list[tuple[int, int]]:
    """Every planned port window, as (first, last)."""
    out = []
    for s in got.values():
        for key in ("apiPort", "hcclNpuSocketPortRange", "hcclHostSocketPortRange", "hcclIfBasePort", "vllmPort"):
            value = s[key]
            out.append((value[0], value[1]) if isinstance(value, list) else (value, value))
    return out


def test_hccls_default_host_window_60000_to_60031_is_reserved_by_default():
    # The default plan hands out nothing in it...
    assert all(last < 60000 or first > 60031 for first, last in windows_of(assignments(seed_values())))
    # ...even when a window base points into it: one-port windows from 59999 skip exactly 60000-60031.
    values = {
        "hosts": [host()],
        "services": [service("a", 1, 0.1), service("b", 1, 0.1), service("c", 1, 0.1)],
        "ports": {"hcclHostSocketBase": 59999, "hcclHostSocketCount": 1},
    }
    got = assignments(values)
    assert [got[n]["hcclHostSocketPortRange"] for n in ("a", "b", "c")] == [
        [59999, 59999], [60032, 60032], [60033, 60033],
    ]  # fmt: skip
    # Blocks of 16 from 60000 start past the window.
    values["ports"] = {"hcclHostSocketBase": 60000}
    assert assignments(values)["a"]["hcclHostSocketPortRange"] == [60032, 60047]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (
            {"hosts": [host()], "services": [service("a", apiPort=9000), service("b", apiPort=9000)]},
            "host npu-a: apiPort of b 9000 overlaps apiPort of a 9000",
        ),
        (
            {"hosts": [host(npus=4)], "services": [service("big", 8, 0.5, host="npu-a")]},
            "service big: tensorParallelSize 8 is larger than host npu-a's 4 NPUs",
        ),
        (
            {"hosts": [host()], "services": [service("a", 1, 0.9, devices=[3]), service("b", 1, 0.2, devices=[3])]},
            "npu-a card 3: 0.9 (a) + 0.2 (b) = 1.1 is over the per-card budget 0.95",
        ),
        (
            {"hosts": [host()], "services": [service("a", host="npu-x")]},
            "service a: unknown host 'npu-x' (did you mean 'npu-a'?)",
        ),
        (
            {"hosts": [host()], "services": [service("f", 8, 0.9, host="npu-a"), service("g", 8, 0.9)]},
            "no host has room for service g, which needs 8 cards with 0.9 free each on one host (aligned); "
            "free per card: npu-a: 0:0.05 1:0.05",
        ),
        (
            {"hosts": [host()], "services": [{**service("a"), "tensorParalelSize": 2}]},
            "ascend-fleet:services[0] (a): unknown key 'tensorParalelSize' (did you mean 'tensorParallelSize'?)",
        ),
        (
            {"hosts": [host()], "services": [service("a", 3)]},
            "ascend-fleet:services[0] (a).tensorParallelSize: 3 is not a power of two",
        ),
        (
            {"hosts": [host()], "services": [service("a", 1, 1.2)]},
            "ascend-fleet:services[0] (a).memoryFraction: Input should be less than or equal to 1",
        ),
        (
            {"hosts": [host()], "services": [service("a", env={"VLLM_PORT": "1"})]},
            "VLLM_PORT is set by the plan: set the service's vllmPort instead",
        ),
        (
            {"hosts": [host()], "services": [service("a", devices=[0, 1])]},
            "devices [0, 1] pins 2 cards but tensorParallelSize is 1",
        ),
        (
            {"hosts": [host()], "service": []},
            "unknown config key 'ascend-fleet:service' (did you mean 'services'?)",
        ),
        (
            {"hosts": [host()], "services": [service("a", 1, 0.3, devices=[0]), service("m", 1, 0.3, devices=[0], hcclPortRanges=False)]},
            "npu-a card 0 is held by a; a service without HCCL port ranges keeps port 16666 and cannot share a card",
        ),
        (
            {"hosts": [host()], "services": [service("a"), service("b")], "ports": {"vllmBase": 65520}},
            "host npu-a: no free block of 16 port(s) from 65520 up to 65535 for vllmPort of b; "
            "lower ascend-fleet:ports.vllmBase or free reserved ports",
        ),
        (
            {"hosts": [host()], "services": [service("a", hcclNpuSocketPortRange=80)]},
            "hcclNpuSocketPortRange 80 starts below 1024",
        ),
        (
            {"hosts": [host()], "services": [service("a", hcclNpuSocketPortRange=[1000, 1015])]},
            "hcclNpuSocketPortRange 1000-1015 starts below 1024",
        ),
    ],
)
def test_bad_fleets_are_rejected_with_a_message_naming_what_and_where(values, expected):
    with pytest.raises((AllocationError, ConfigError)) as caught:
        plan_of(values)
    message = str(caught.value)
    assert expected in message
    assert "\n" not in message


def test_every_problem_is_reported_at_once():
    values = {
        "hosts": [host()],
        "services": [service("a", apiPort=9000), service("b", apiPort=9000), service("c", 8, 0.9, devices=[0] * 8)],
    }
    with pytest.raises(ConfigError) as caught:
        plan_of(values)
    assert "lists a card twice" in str(caught.value)
    values["services"][2] = service("c", 16, 0.9)
    with pytest.raises(AllocationError) as caught:
        plan_of(values)
    assert "overlaps apiPort of a 9000" in str(caught.value) and "no host has room for service c" in str(caught.value)
