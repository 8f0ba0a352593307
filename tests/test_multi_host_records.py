"""A multi-host service's deployment records (records.group): each member's exact container on the host
network, the follower's health through its leader, and one digest label that makes the group restart as one."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

from cli.stackfile import StackFile, stack_values
from records.containers import HOST_NETWORK, START_GATE
from records.group import DIGEST_LABEL
from views.endpoints import endpoints
from tests.support.pipeline import deployment_of
from tests.support.stacks import host, service

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "Pulumi.deepseek-r1.yaml"
DP = {"size": 4, "perHost": 2, "expertParallel": True}


def example_values() -> dict:
    return stack_values(StackFile("deepseek-r1", EXAMPLE))


def example(values: dict | None = None):
    """The deployment of the committed example, or of `values` (its values changed)."""
    return deployment_of(values or example_values(), "deepseek-r1")


def two_hosts(**dp_service):
    hosts = [host("a", address="10.0.0.1", nic={"interface": "eth1"}), host("b", address="fd00::2")]
    return {"hosts": hosts, "services": [service("ds", 4, 0.9, dataParallel=DP) | dp_service]}


def test_a_follower_runs_headless_on_the_host_network_with_its_cards_nic_and_hccl_windows_and_no_published_port():
    ds = example().groups[0]
    follower = ds.members[1].spec
    assert (follower.name, follower.network_mode, follower.ports, dict(follower.sysctls)) == (
        "deepseek-r1-node1", HOST_NETWORK, (), {})
    gate = follower.command.index(START_GATE) + 2
    assert follower.command[gate:] == (
        "vllm", "serve", "/models/DeepSeek-R1-W8A8", "--served-model-name", "deepseek_r1", "--tensor-parallel-size", "4",
        "--gpu-memory-utilization", "0.92", "--max-model-len", "16384", "--max-num-seqs", "16",
        "--headless", "--data-parallel-size", "4", "--data-parallel-size-local", "2", "--data-parallel-start-rank", "2",
        "--data-parallel-address", "10.20.0.11", "--data-parallel-rpc-port", "29550", "--enable-expert-parallel",
        "--quantization", "ascend", "--max-num-batched-tokens", "4096", "--trust-remote-code",
    )  # fmt: skip
    env = dict(follower.env)
    assert {k: env[k] for k in env if k.startswith(("HCCL_", "GLOO_", "TP_", "ASCEND_"))} == {
        "HCCL_BUFFSIZE": "512", "HCCL_IF_IP": "10.20.0.12", "HCCL_SOCKET_IFNAME": "enp189s0f0",
        "GLOO_SOCKET_IFNAME": "enp189s0f0", "TP_SOCKET_IFNAME": "enp189s0f0",
        "HCCL_NPU_SOCKET_PORT_RANGE": "16666-16681", "HCCL_HOST_SOCKET_PORT_RANGE": "61008-61023",
        "HCCL_IF_BASE_PORT": "61032", "ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
        "ASCEND_FLEET_CONTAINER": "deepseek-r1-node1", "ASCEND_FLEET_CARDS": "0,1,2,3,4,5,6,7",
        "ASCEND_FLEET_HEALTH_URL": "http://10.20.0.11:8000/health", "ASCEND_FLEET_START_WAIT_SECONDS": "1800",
    }  # fmt: skip
    assert "VLLM_PORT" not in env and follower.device_files[:8] == tuple(f"/dev/davinci{c}" for c in range(8))
    assert follower.to_json()["networkMode"] == "host" and follower.to_json()["ports"] == []


def test_the_leader_serves_the_api_on_its_port_and_probes_itself_while_a_follower_probes_the_leader():
    leader, follower = example().groups[0].members
    served = leader.spec.command.index("--served-model-name")
    assert leader.spec.command[served + 2 : served + 6] == ("--host", "0.0.0.0", "--port", "8000")
    assert leader.spec.command.count("--headless") == 0
    assert "--port" not in follower.spec.command and "--host" not in follower.spec.command
    assert (leader.health_url, follower.health_url) == ("http://127.0.0.1:8000/health", "http://10.20.0.11:8000/health")
    assert "http://10.20.0.11:8000/health" in follower.spec.healthcheck.test[1]
    assert "http://127.0.0.1:8000/health" in leader.spec.healthcheck.test[1]
    assert leader.spec.ports == () and leader.spec.api_port == follower.spec.api_port == 8000


def test_a_leader_reached_over_ipv6_is_probed_at_its_bracketed_address():
    ds = deployment_of(two_hosts(dataParallel=DP | {"memberPins": [{"host": "b"}, {"host": "a"}]})).groups[0]
    assert ds.members[1].health_url == "http://[fd00::2]:8000/health"
    assert dict(ds.members[1].spec.env)["HCCL_IF_IP"] == "10.0.0.1" and "GLOO_SOCKET_IFNAME" in ds.members[1].spec.env
    assert "GLOO_SOCKET_IFNAME" not in ds.members[0].spec.env  # b declares no nic.interface


def test_every_member_carries_the_group_and_one_digest_of_every_members_container_without_the_digest():
    ds = example().groups[0]
    without = [s.to_json() for s in (replace(md.spec, labels={k: v for k, v in md.spec.labels.items() if k != DIGEST_LABEL})
                                     for md in ds.members)]  # fmt: skip
    digest = hashlib.sha256(json.dumps(without, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert [md.spec.labels[DIGEST_LABEL] for md in ds.members] == [digest, digest] and ds.digest == digest
    assert [md.spec.labels["ascend-fleet.group"] for md in ds.members] == ["deepseek-r1", "deepseek-r1"]


def test_a_change_to_the_followers_host_alone_changes_every_members_container():
    before, values = example(), example_values()
    values["hosts"][1]["nic"]["interface"] = "eth9"  # npu-b: the follower's host
    after = example(values)
    old, new = ({md.name: md.spec for md in d.groups[0].members} for d in (before, after))
    assert old["deepseek-r1-node1"].env != new["deepseek-r1-node1"].env
    assert old["deepseek-r1-node0"].env == new["deepseek-r1-node0"].env
    assert old["deepseek-r1-node0"].labels[DIGEST_LABEL] != new["deepseek-r1-node0"].labels[DIGEST_LABEL]
    assert [md.spec for md in before.groups[1].members] == [md.spec for md in after.groups[1].members]


def test_each_host_lists_its_member_among_its_containers_and_pulls_its_image():
    d = example()
    assert {hd.name: [name for name, _, _ in hd.containers] for hd in d.hosts} == {
        "npu-a": ["deepseek-r1-node0"], "npu-b": ["deepseek-r1-node1"],
        "npu-c": ["bge-m3", "qwen3-moe-node0"], "npu-d": ["qwen-chat", "qwen3-moe-node1"],
    }  # fmt: skip
    npu_b = d.hosts[1]
    assert npu_b.in_use and npu_b.images == ("quay.io/ascend/vllm-ascend:v0.20.2rc1",) and npu_b.members[0].group is d.groups[0].plan
    assert npu_b.containers[0][2] == "on cards 0,1,2,3,4,5,6,7 as the follower of deepseek-r1 (host network)"
    assert d.groups[0].endpoint == "http://10.20.0.11:8000/v1"


def test_a_single_host_services_container_prints_no_network_mode():
    d = deployment_of({"hosts": [host("a")], "services": [service("s")]})
    sd = next(d.services())
    assert sd.spec.network_mode is None and "networkMode" not in sd.spec.to_json() and sd.spec.ports == (8000,)
    assert d.groups == ()


def test_the_endpoints_command_lists_a_group_at_its_leaders_endpoint_among_the_services():
    found = [(e.service, e.kind, e.host, e.endpoint) for e in endpoints(example())]
    assert found == [
        ("bge-m3", "service", "npu-c", "http://10.20.0.13:8000/v1"),
        ("deepseek-r1", "group", "npu-a", "http://10.20.0.11:8000/v1"),
        ("qwen-chat", "service", "npu-d", "http://10.20.0.14:8000/v1"),
        ("qwen3-moe", "group", "npu-c", "http://10.20.0.13:8001/v1"),
    ]


def test_a_shard_deploys_the_groups_whose_members_are_on_its_hosts():
    hosts = [host(n, address=f"10.0.0.{i}") for i, n in enumerate(["a", "b", "c", "d"], start=1)]
    hosts[1]["shard"] = 1  # b alone in shard 1 beside a: the group takes a and c
    d = deployment_of({"hosts": hosts, "shards": {"size": 2}, "services": [service("ds", 4, 0.9, dataParallel=DP)]})
    shard = {hd.name: hd.plan.shard for hd in d.hosts}["a"]
    assert [g.name for g in d.shard(shard).groups] == ["ds"] and d.shard(1 - shard).groups == ()
