"""A multi-host service planned as one group: the committed example's exact members, cards and windows
(vllm-ascend's DeepSeek-R1 two-A2 recipe), all-or-nothing placement, the windows each member binds,
and `pulumi up` and `render` refusing it until the deployment side lands."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import jsonschema
import pytest

from allocation.config import parse_fleet
from allocation.errors import AllocationError
from allocation.group import groups_of
from allocation.instance import instances
from allocation.placement import Placer
from cli.stackfile import load_fleet
from views.report import WIDTH, plan_json, render_plan
from tests.support.pipeline import deployment_of, plan_of
from tests.support.stacks import host, service

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = str(ROOT / "examples" / "Pulumi.deepseek-r1.yaml")
DP = {"size": 4, "perHost": 2, "expertParallel": True}


def example():
    return deployment_of(load_fleet(None, EXAMPLE)[0])


def members(plan) -> dict[str, tuple]:
    return {
        mp.name: (mp.host.name, mp.assignment.cards, mp.member.ranks.start, {k: v for k, v in mp.assignment.windows.items()})
        for g in plan.groups for mp in g.members
    }  # fmt: skip


def test_the_example_puts_deepseek_r1_over_two_a2_hosts_as_the_tutorial_does_beside_another_group_and_single_services():
    plan = example().plan
    hccl = {"hcclNpuSocketPortRange": (16666, 16681), "hcclHostSocketPortRange": (61008, 61023), "hcclIfBasePort": (61032, 61063)}
    later = {"hcclNpuSocketPortRange": (16682, 16697), "hcclHostSocketPortRange": (61040, 61055), "hcclIfBasePort": (61064, 61095)}
    assert members(plan) == {
        "deepseek-r1-node0": ("npu-a", tuple(range(8)), 0, {"apiPort": (8000, 8000), "dataParallelRpcPort": (29550, 29550)} | hccl),
        "deepseek-r1-node1": ("npu-b", tuple(range(8)), 2, hccl),
        "qwen3-moe-node0": ("npu-c", (4, 5, 6, 7), 0, {"apiPort": (8001, 8001), "dataParallelRpcPort": (29550, 29550)} | later),
        "qwen3-moe-node1": ("npu-d", (4, 5, 6, 7), 2, later),
    }  # fmt: skip
    singles = {ps.name: (hp.host.name, ps.assignment.cards, ps.assignment.api_port) for hp, ps in plan.services()}
    assert singles == {"bge-m3": ("npu-c", (0,), 8000), "qwen-chat": ("npu-d", (0, 1), 8000)}
    ds = plan.groups[0]
    assert [ds.args(mp) for mp in ds.members] == [
        ("--data-parallel-size", "4", "--data-parallel-size-local", "2", "--data-parallel-address", "10.20.0.11",
         "--data-parallel-rpc-port", "29550", "--enable-expert-parallel"),
        ("--headless", "--data-parallel-size", "4", "--data-parallel-size-local", "2", "--data-parallel-start-rank", "2",
         "--data-parallel-address", "10.20.0.11", "--data-parallel-rpc-port", "29550", "--enable-expert-parallel"),
    ]  # fmt: skip
    assert ds.members[1].host.nic_env() == {"HCCL_IF_IP": "10.20.0.12", "GLOO_SOCKET_IFNAME": "enp189s0f0",
                                       "TP_SOCKET_IFNAME": "enp189s0f0", "HCCL_SOCKET_IFNAME": "enp189s0f0"}  # fmt: skip
    assert plan.groups[1].address == "10.30.0.13"  # npu-c's nic.address, not its SSH address


def test_the_examples_table_prints_every_members_cards_windows_and_capacity_within_120_columns():
    text = render_plan(example(), "table")
    assert [line for line in text.splitlines() if len(line) > WIDTH] == []
    lines = [" ".join(line.split()) for line in text.splitlines()]
    assert "deepseek-r1-node0 0-7 2x4 0.92 (56.08 GiB) 8000 16666-16681 61008-61023 61032-61063 - 29550" in lines
    assert "deepseek-r1-node1 0-7 2x4 0.92 (56.08 GiB) - 16666-16681 61008-61023 61032-61063 - -" in lines
    # Experts over the 16 cards of the expert-parallel group, the rest over TP 4; MLA's latent cache per rank.
    assert "deepseek-r1-node0 44.18 GiB 7.90 GiB 128 943 120704 7.37 1.07 GiB" in lines
    assert "deepseek-r1 DP 4 x TP 4, EP deepseek-r1-node0 leader npu-a 0-1 10.20.0.11:29550" in lines
    assert "deepseek-r1-node1 follower npu-b 2-3 joins 10.20.0.11:29550" in lines
    assert lines[0] == "stack deepseek-r1: 4 host(s), 2 service(s), 2 multi-host service(s)"


def test_the_plan_json_carries_the_group_once_with_its_members_and_validates_against_the_schema():
    doc = json.loads(render_plan(example(), "json"))
    jsonschema.validate(doc, json.loads((ROOT / "schema" / "plan.schema.json").read_text()))
    ds = doc["groups"][0]
    assert (ds["kind"], ds["leader"], ds["dataParallelRpcPort"], ds["endpoint"]) == (
        "group", "deepseek-r1-node0", 29550, "http://10.20.0.11:8000/v1")
    assert [(m["kind"], m["role"], m["host"], m["startRank"], m["apiPort"]) for m in ds["members"]] == [
        ("member", "leader", "npu-a", 0, 8000), ("member", "follower", "npu-b", 2, None)]
    assert {h["name"]: h.get("members") for h in doc["hosts"]} == {
        "npu-a": ["deepseek-r1-node0"], "npu-b": ["deepseek-r1-node1"], "npu-c": ["qwen3-moe-node0"], "npu-d": ["qwen3-moe-node1"]}


def test_plan_keys_stay_without_a_multi_host_service():
    plain = deployment_of({"hosts": [host("a")], "services": [service("s")]})
    assert "groups" not in plan_json(plain) and "members" not in plan_json(plain)["hosts"][0]


def two_hosts(*extra_hosts, **dp_service):
    hosts = [host("a", address="10.0.0.1"), host("b", address="10.0.0.2"), *extra_hosts]
    return {"hosts": hosts, "services": [service("ds", 4, 0.9, dataParallel=DP) | dp_service]}


def test_a_group_that_fits_one_host_but_not_two_places_no_member_and_leaves_every_card_free():
    fleet = parse_fleet("test", {"hosts": [host("a", address="10.0.0.1"), host("b", address="10.0.0.2")],
                                 "services": [service("busy", 1, 0.5, host="b"), service("ds", 4, 0.9, dataParallel=DP)]})  # fmt: skip
    placer = Placer(fleet)
    outcome = placer.run(instances(fleet.services[0], fleet.defaults), groups_of(fleet.services, fleet.defaults))
    assert placer.members == [] and placer.cards["a"].free == [placer.cards["a"].budget] * 8
    assert outcome.problems and "no room for service ds over 2 hosts" in outcome.problems[0]
    with pytest.raises(AllocationError, match="2 more member.s. need each a host of their own"):
        plan_of(fleet)


def test_hosts_in_use_are_preferred_and_a_host_without_an_ip_for_hccl_if_ip_takes_no_member():
    vals = two_hosts(host("c", address="10.0.0.3"), host("d"))
    vals["services"].append(service("small", 1, 0.2, host="c", devices=[0]))
    vals["services"][0]["tensorParallelSize"] = 2  # 4 cards a member: c (in use) has room beside small
    plan = plan_of(vals)
    assert [mp.host.name for mp in plan.groups[0].members] == ["c", "a"]
    with pytest.raises(AllocationError, match="hosts without an IP address for HCCL_IF_IP .nic.address.: d"):
        plan_of({"hosts": [host("a", address="10.0.0.1"), host("d")], "services": [service("ds", 4, 0.9, dataParallel=DP)]})


def test_members_go_to_hosts_of_one_board_and_hbm_size():
    vals = two_hosts(host("c", address="10.0.0.3", hbmGiB=32, hbmBytes=31662800896))
    vals["hosts"][1] = host("b", address="10.0.0.2", hbmGiB=32, hbmBytes=31662800896)
    assert [mp.host.name for mp in plan_of(vals).groups[0].members] == ["b", "c"]


def test_a_member_pinned_into_the_ephemeral_ports_is_refused_with_the_range():
    pins = [{"host": "a", "hcclHostSocketPortRange": [60100, 60115]}, {"host": "b"}]
    with pytest.raises(AllocationError, match=r"hcclHostSocketPortRange of ds-node0 60100-60115 lies in the ephemeral ports 32768-60999"):
        plan_of(two_hosts(dataParallel=DP | {"memberPins": pins}))


def test_pinned_members_keep_their_hosts_cards_and_windows_and_the_leader_is_the_first_entry():
    pins = [{"host": "b", "devices": list(range(8)), "apiPort": 9000, "dataParallelRpcPort": 13389}, {"host": "a"}]
    g = plan_of(two_hosts(dataParallel=DP | {"memberPins": pins})).groups[0]
    assert [(mp.host.name, mp.role) for mp in g.members] == [("b", "leader"), ("a", "follower")]
    assert (g.leader.assignment.api_port, g.rpc_port, g.address) == (9000, 13389, "10.0.0.2")


def test_one_host_of_ranks_binds_no_rpc_port_since_vllms_handshake_stays_local():
    g = plan_of({"hosts": [host("a", address="10.0.0.1")],
                 "services": [service("ds", 4, 0.9, dataParallel={"size": 2, "perHost": 2})]}).groups[0]  # fmt: skip
    assert g.rpc_port is None and "dataParallelRpcPort" not in g.leader.assignment.windows
    assert "--data-parallel-rpc-port" not in g.args(g.leader)


def test_expert_weights_split_over_the_expert_parallel_group_and_the_rest_over_the_ranks_cards():
    profile = {"weightBytes": 160 << 30, "expertWeightBytes": 128 << 30, "numHiddenLayers": 4, "attention": "mla",
               "kvLoraRank": 512, "qkRopeHeadDim": 64}  # fmt: skip
    ep = plan_of(two_hosts(profile=profile, maxModelLen=4096)).groups[0].leader.capacity
    plain = plan_of(two_hosts(profile=profile, maxModelLen=4096, dataParallel={"size": 4, "perHost": 2})).groups[0].leader.capacity
    assert ep.weight_bytes_per_card == (32 << 30) // 4 + (128 << 30) // 16
    assert plain.weight_bytes_per_card == (160 << 30) // 4
    assert Decimal(ep.kv_bytes_per_card - plain.kv_bytes_per_card) == (160 << 30) // 4 - ep.weight_bytes_per_card


def test_each_member_sized_with_an_unverified_profile_is_a_note_on_its_host_and_no_warning():
    profile = {"weightBytes": 160 << 30, "numHiddenLayers": 4, "attention": "mla", "kvLoraRank": 512,
               "qkRopeHeadDim": 64, "unverified": "weights guessed"}  # fmt: skip
    plan = plan_of(two_hosts(profile=profile, maxModelLen=4096))
    assert plan.warnings == ()
    assert [n.split(": ")[:2] for n in plan.notes] == [["host a cards 0,1,2,3,4,5,6,7", "profile"],
                                                       ["host b cards 0,1,2,3,4,5,6,7", "profile"]]  # fmt: skip


def test_plan_against_treats_a_group_as_one_unit_in_one_line_and_says_nothing_when_it_is_unchanged():
    from cli.stackfile import locate, stack_values
    from views.diff import diff_plans, render_diff
    from tests.support.pipeline import plan_json_of

    values = stack_values(locate(None, EXAMPLE))
    old = plan_json_of(values)
    values["hosts"][1]["nic"] = {"interface": "eth9"}  # npu-b: only the follower's NIC variables change
    diff = diff_plans(old, plan_json_of(values), against="main")
    assert diff.groups == (
        "multi-host service deepseek-r1: deepseek-r1-node1: env, container env; a change to any member restarts every member: "
        "deepseek-r1-node0, deepseek-r1-node1",
    )
    table = render_diff(diff, "table")
    assert table.count("Restarts as one: multi-host service deepseek-r1") == 1
    assert json.loads(render_diff(diff, "json"))["groups"] == list(diff.groups)
    assert "Restarts as one" in render_diff(diff, "markdown")
    same = diff_plans(old, old)
    assert same.groups == () and not same.has_changes and "groups" not in json.loads(render_diff(same, "json"))
    gone = diff_plans(old, plan_json_of({**values, "services": values["services"][2:]}))
    assert gone.groups[0].startswith("multi-host service deepseek-r1 removed: deepseek-r1-node0 on npu-a")


def test_pin_freezes_every_member_and_the_pinned_file_plans_the_same_groups(tmp_path, cli):
    pinned = tmp_path / "Pulumi.deepseek-r1.yaml"
    pinned.write_bytes(Path(EXAMPLE).read_bytes())
    result = cli("pin", "--config", str(pinned))
    assert result.returncode == 0, result.stderr
    fleet = load_fleet(None, str(pinned))[0]
    pins = fleet.services[0].data_parallel.member_pins
    assert [(p.host, p.devices, p.apiPort, p.dataParallelRpcPort) for p in pins] == [
        ("npu-a", list(range(8)), 8000, 29550), ("npu-b", list(range(8)), None, None)]
    assert members(plan_of(fleet)) == members(example().plan)


def test_a_sharded_fleet_keeps_a_groups_hosts_in_one_shard():
    hosts = [host(n, address=f"10.0.0.{i}") for i, n in enumerate(["a", "b", "c", "d"], start=1)]
    hosts[1]["shard"] = 1  # b alone in shard 1 beside a: the group cannot take a and b
    vals = {"hosts": hosts, "shards": {"size": 2}, "services": [service("ds", 4, 0.9, dataParallel=DP)]}
    plan = plan_of(vals)
    shards = {hp.host.name: hp.shard for hp in plan.hosts}
    assert len({shards[mp.host.name] for mp in plan.groups[0].members}) == 1
    assert [mp.host.name for mp in plan.groups[0].members] == ["a", "c"]


def test_a_service_pinned_onto_a_members_card_is_told_the_member_holds_it_alone():
    pins = [{"host": "a", "devices": list(range(8))}, {"host": "b", "devices": list(range(8))}]
    vals = two_hosts(dataParallel=DP | {"memberPins": pins})
    vals["services"].append(service("late", 1, 0.02, host="a", devices=[3]))
    with pytest.raises(AllocationError, match="a card 3 is held by ds-node0, a member of a multi-host service, which holds its cards alone"):
        plan_of(vals)


def test_a_member_pinned_to_a_host_without_an_ip_is_refused_naming_nic_address():
    vals = two_hosts(host("d"), dataParallel=DP | {"memberPins": [{"host": "d"}]})
    with pytest.raises(AllocationError, match="member ds-node0 is pinned to host d, which has no IP address for HCCL_IF_IP .set its nic.address."):
        plan_of(vals)
