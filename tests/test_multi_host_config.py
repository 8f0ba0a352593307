"""A multi-host service as the stack declares it (`dataParallel`, `hosts[].nic`), refused at the edge
with one paragraph per mistake, and the flags and variables the plan owns refused in `args` and `env`."""

from __future__ import annotations

import pytest

from allocation.config import parse_fleet
from tests.support.stacks import host, refusal, service

DP = {"size": 4, "perHost": 2, "expertParallel": True}


def values(fleet_hosts=None, fleet=None, **service_extra):
    hosts = fleet_hosts or [host("a", address="10.0.0.1"), host("b", address="10.0.0.2")]
    return {"hosts": hosts, "services": [service("ds", 4, 0.9, dataParallel=DP) | service_extra], **(fleet or {})}


def test_the_tutorials_two_host_recipe_is_a_service_with_data_parallel_and_its_members_names():
    fleet = parse_fleet("test", values())
    s = fleet.services[0]
    assert (s.data_parallel.size, s.data_parallel.per_host, s.data_parallel.expert_parallel, s.data_parallel.hosts) == (4, 2, True, 2)
    assert s.names() == ["ds", "ds-node0", "ds-node1"]


@pytest.mark.parametrize(
    ("service_extra", "words"),
    [
        ({"dataParallel": {"size": 5, "perHost": 2}}, "dataParallel.size 5 is not a multiple of perHost 2"),
        ({"dataParallel": {"size": 6, "perHost": 3}}, "perHost 3 x tensorParallelSize 4 = 12 cards per host, not an aligned block"),
        ({"dataParallel": {"size": 1, "perHost": 1}}, "size"),
        ({"replicas": 2}, "it takes no replicas"),
        ({"host": "a"}, "it takes no host"),
        ({"apiPort": 9000}, "it takes no apiPort"),
        ({"memoryFraction": "auto", "maxModelLen": 1024, "profile": {"weightBytes": 1 << 30, "numHiddenLayers": 2,
          "numKeyValueHeads": 1, "headDim": 64}}, "memoryFraction auto is not chosen for a service with dataParallel"),
        ({"hosts": ["a"]}, "hosts lists 1 host(s), fewer than the 2 its dataParallel needs"),
        ({"env": {"HCCL_IF_IP": "10.0.0.9"}}, "HCCL_IF_IP is set by the plan from each host's nic (nic.address)"),
        ({"env": {"GLOO_SOCKET_IFNAME": "eth0"}}, "GLOO_SOCKET_IFNAME is set by the plan from each host's nic (nic.interface)"),
        ({"dataParallel": DP | {"memberPins": [{"host": "a"}, {"host": "b", "apiPort": 8000}]}},
         "memberPins entry 2 pins apiPort, which only the leader (entry 1) binds"),
        ({"dataParallel": DP | {"memberPins": [{"host": "a"}, {"dataParallelRpcPort": 13389}]}},
         "memberPins entry 2 pins dataParallelRpcPort"),
        ({"dataParallel": DP | {"memberPins": [{"devices": [0, 1]}]}}, "devices [0, 1] pins 2 cards, but a member holds"),
        ({"dataParallel": DP | {"memberPins": [{"devices": [0, 0, 1, 2, 3, 4, 5, 6]}]}}, "lists a card twice"),
        ({"dataParallel": DP | {"memberPins": [{}, {}, {}]}}, "memberPins has 3 entries for 2 hosts"),
        ({"dataParallel": DP | {"memberPins": [{"vllmPort": 62000}]}}, "unknown key 'vllmPort'"),
        ({"dataParallel": DP | {"memberPins": [{"host": "zz"}]}}, "dataParallel.memberPins entry 1: unknown host 'zz'"),
        ({"dataParallel": {"size": 8, "perHost": 4}}, "perHost 4 x tensorParallelSize 4 is more cards than host a's 8 NPUs"),
    ],
)
def test_a_mistake_in_a_multi_host_service_is_one_paragraph_naming_it(service_extra, words):
    vals = values(**service_extra)
    if "perHost 4 x" in words:
        vals["services"][0]["hosts"] = ["a", "b"]
    assert words in refusal(vals)


@pytest.mark.parametrize(
    "arg",
    ["--data-parallel-size=4", "-dp", "--data-parallel-size-local", "--data_parallel_start_rank", "--data-parallel-address",
     "--data-parallel-rpc-port", "--headless", "--enable-expert-parallel", "-ep", "--nnodes", "-n", "--node-rank",
     "--master-addr", "--master-port=29501", "--data-parallel-rank"],
)
def test_the_flags_of_a_multi_host_launch_are_the_plans_and_refused_in_args(arg):
    vals = {"hosts": [host("a")], "services": [service("s", args=[arg])]}
    assert "which the plan owns: set dataParallel" in refusal(vals)


def test_the_defaults_env_may_not_set_a_nic_variable_when_a_service_spans_hosts():
    vals = values(fleet={"defaults": {"env": {"TP_SOCKET_IFNAME": "eth0"}}})
    assert "defaults: TP_SOCKET_IFNAME is set by the plan" in refusal(vals)
    # Without a multi-host service the variable is the operator's, as before.
    parse_fleet("test", {"hosts": [host("a")], "services": [service("s")], "defaults": {"env": {"TP_SOCKET_IFNAME": "eth0"}}})


@pytest.mark.parametrize(
    ("nic", "words"),
    [
        ({"address": "npu-a.example"}, "is not an IP address"),
        ({"interface": "a-very-long-interface"}, "is not a network interface name"),
        ({"interface": "eth0:1"}, "is not a network interface name"),
        ({"interface": "eth 0"}, "is not a network interface name"),
        ({"name": "eth0"}, "unknown key 'name'"),
    ],
)
def test_a_bad_nic_is_one_paragraph_naming_the_key(nic, words):
    assert words in refusal(values(fleet_hosts=[host("a", nic=nic), host("b")]))


def test_a_host_nic_address_defaults_to_its_address_when_that_is_an_ip_and_else_to_none():
    fleet = parse_fleet("test", values(fleet_hosts=[host("a", address="10.0.0.1"), host("b"), host("c", nic={"address": "10.1.0.3"})]))
    assert [h.nic_address for h in fleet.hosts] == ["10.0.0.1", None, "10.1.0.3"]


def test_a_fleet_without_the_new_keys_keeps_its_hash_and_one_that_names_them_does_not():
    plain = {"hosts": [host("a")], "services": [service("s")]}
    before = parse_fleet("test", plain).fleet_hash()
    assert parse_fleet("test", plain | {"ports": {"dataParallelRpcBase": 29550}}).fleet_hash() == before
    assert parse_fleet("test", plain | {"ports": {"dataParallelRpcBase": 29600}}).fleet_hash() != before
    assert parse_fleet("test", plain | {"ports": {"ephemeral": [32768, 65000]}}).fleet_hash() != before
    assert parse_fleet("test", {**plain, "hosts": [host("a", nic={"interface": "eth0"})]}).fleet_hash() != before


def test_expert_weight_bytes_beyond_the_weights_is_one_paragraph():
    profile = {"weightBytes": 100, "expertWeightBytes": 101, "numHiddenLayers": 2, "attention": "mla", "kvLoraRank": 512,
               "qkRopeHeadDim": 64}  # fmt: skip
    assert "expertWeightBytes 101 is more than weightBytes 100" in refusal(values(profile=profile))
