"""doctor's judgement of a multi-host service, from hand-made host facts: each member present on its host,
its cards and the host network, joining its leader as planned; and its ports, which on the host network are
host ports, judged as the host's listeners and the foreign containers' HCCL windows."""

from __future__ import annotations

import dataclasses

import pytest

from ops.doctor.dp_flags import joins
from ops.doctor.facts import Listener
from ops.doctor.findings import host_findings
from ops.npusmi import parse_topology
from tests.support.doctor import group_values, inspect_of, running_facts, with_container, with_link
from tests.support.pipeline import deployment_of


@pytest.fixture(scope="module")
def deployment():
    return deployment_of(group_values())


def on(deployment, host: str):
    return next(hd for hd in deployment.hosts if hd.name == host)


def member(deployment, name: str):
    return next(md for g in deployment.groups for md in g.members if md.name == name)


def kinds(found) -> list[tuple[str, str | None]]:
    return [(f.kind, f.service) for f in found]


def running(deployment, name: str, **changes):
    """The facts of the member's host with the member's container replaced: `command` (a function of the
    planned one) or any `inspect_of` override."""
    md = member(deployment, name)
    hd = on(deployment, md.plan.assignment.host_name)
    command = changes.pop("command", None)
    spec = md.spec if command is None else dataclasses.replace(md.spec, command=tuple(command(list(md.spec.command))))
    base = 1000 * (1 + [c.name for c in hd.planned].index(name))
    return hd, with_container(running_facts(hd), inspect_of(spec, cid=f"{name}-id", pid=base, **changes))


def foreign(deployment, env: dict[str, str], network: str = "bridge", **changes):
    """A container outside the plan, made from ds-node1's, with only the HCCL variables `env`."""
    inspect = inspect_of(member(deployment, "ds-node1").spec, cid=f"{changes['name']}-id", **changes)
    inspect["Config"]["Env"] = [e for e in inspect["Config"]["Env"] if not e.startswith("HCCL_")] + [f"{k}={v}" for k, v in env.items()]
    inspect["HostConfig"]["NetworkMode"] = network
    return inspect


def replaced(words: list[str], flag: str, value: str) -> list[str]:
    words[words.index(flag) + 1] = value
    return words


def test_hosts_running_every_member_and_service_as_planned_have_no_findings(deployment):
    assert {hd.name: host_findings(hd, running_facts(hd)) for hd in deployment.hosts} == {"npu-a": [], "npu-b": []}


def test_a_missing_member_is_one_group_finding_that_its_group_cannot_serve(deployment):
    hd = on(deployment, "npu-b")
    facts = running_facts(hd)
    facts = dataclasses.replace(facts, containers=(), npu=dataclasses.replace(facts.npu, processes=()), listeners=())
    [found] = host_findings(hd, facts)
    assert (found.kind, found.service, found.container) == ("group", "ds", "ds-node1")
    assert found.message == "group ds cannot serve: member ds-node1 (follower, on cards 0,1,2,3, host network) is missing on host npu-b"


def test_a_follower_pointed_at_another_leader_and_rank_is_a_group_finding_naming_both(deployment):
    def wrong(words):
        return replaced(replaced(words, "--data-parallel-address", "10.0.0.9"), "--data-parallel-start-rank", "0")

    hd, facts = running(deployment, "ds-node1", command=wrong)
    found = host_findings(hd, facts)
    assert kinds(found) == [("group", "ds"), ("drift", "ds-node1")]
    assert found[0].message == (
        "group ds cannot serve: follower ds-node1 on npu-b joins 10.0.0.9:29550 as start rank 0 of data-parallel "
        "size 2; the plan: leader ds-node0 on npu-a at 10.0.0.1:29550 as start rank 1 of data-parallel size 2 "
        "(its command's drift shows the words)"
    )


@pytest.mark.parametrize(
    "command, runs",
    [
        (lambda w: replaced(w, "--data-parallel-rpc-port", "29551"), "10.0.0.1:29551 as start rank 1 of data-parallel size 2"),
        # `--flag=value` and vLLM's `_` spelling; of two, the last counts (argparse).
        (lambda w: [*w, "--data_parallel_size=4"], "10.0.0.1:29550 as start rank 1 of data-parallel size 4"),
        # Without the flag, vLLM's own default (engine/arg_utils.py create_engine_config: `or 0`).
        (lambda w: w[: w.index("--data-parallel-start-rank")] + w[w.index("--data-parallel-start-rank") + 2 :],
         "10.0.0.1:29550 as start rank 0 of data-parallel size 2"),
    ],
)  # fmt: skip
def test_a_follower_is_read_as_vllm_reads_its_flags(deployment, command, runs):
    hd, facts = running(deployment, "ds-node1", command=command)
    [group] = [f for f in host_findings(hd, facts) if f.kind == "group"]
    assert f"joins {runs};" in group.message


def test_a_leader_waiting_for_another_size_is_a_group_finding(deployment):
    hd, facts = running(deployment, "ds-node0", command=lambda w: replaced(w, "--data-parallel-size", "4"))
    found = host_findings(hd, facts)
    assert kinds(found) == [("group", "ds"), ("drift", "ds-node0")]
    assert "leader ds-node0 on npu-a waits for its followers at 10.0.0.1:29550 as start rank 0 of data-parallel size 4;" in found[0].message


def test_the_plans_flags_are_read_as_the_members_command_is():
    ds = deployment_of(group_values()).groups[0]
    assert [joins(ds.plan.args(md.plan)).text() for md in ds.members] == [
        "10.0.0.1:29550 as start rank 0 of data-parallel size 2", "10.0.0.1:29550 as start rank 1 of data-parallel size 2",
    ]  # fmt: skip


def test_a_member_off_the_host_network_or_with_another_nic_address_is_drift(deployment):
    hd = on(deployment, "npu-b")
    bridged = inspect_of(member(deployment, "ds-node1").spec, cid="ds-node1-id", pid=1000, env={"HCCL_IF_IP": "10.0.0.7"})
    bridged["HostConfig"]["NetworkMode"] = "bridge"
    facts = with_container(running_facts(hd), bridged)
    found = host_findings(hd, facts)
    assert [(f.kind, f.key) for f in found] == [("drift", "env HCCL_IF_IP"), ("drift", "network mode")]
    assert found[1].message == "container ds-node1: network mode: host (plan) != bridge (live)"


def test_a_foreign_container_on_a_members_card_is_foreign_and_its_default_hccl_port_clashes(deployment):
    hd, facts = running(deployment, "ds-node1")
    intruder = foreign(deployment, {}, name="old-r1", pid=9000, devices=["/dev/davinci2"])
    found = host_findings(hd, with_container(facts, intruder))
    assert [(f.kind, f.service, f.card) for f in found] == [("foreign-card", "ds-node1", 2), ("foreign-port", "ds-node1", 2)]
    assert "unset, so HCCL's default 16666" in found[1].message


def test_a_foreign_process_on_the_leaders_rpc_port_is_foreign_and_a_followers_host_has_no_api_port(deployment):
    hd = on(deployment, "npu-a")
    facts = running_facts(hd)
    taken = dataclasses.replace(facts, listeners=(*facts.listeners, Listener("0.0.0.0", 29550, (("torchrun", 4242),))))
    [found] = host_findings(hd, taken)
    assert (found.kind, found.service, found.port, found.key) == ("foreign-port", "ds-node0", 29550, "dataParallelRpcPort")
    follower = on(deployment, "npu-b")
    facts = running_facts(follower)
    other = dataclasses.replace(facts, listeners=(*facts.listeners, Listener("0.0.0.0", 8000, (("nginx", 4343),))))
    assert host_findings(follower, other) == []


@pytest.mark.parametrize(("address", "held"), [("10.0.0.1", True), ("0.0.0.0", True), ("*", True), ("[::]", True),
                                               ("10.0.0.2", False), ("127.0.0.1", False)])
def test_a_listener_holds_a_members_address_bound_port_only_on_its_address_or_every_address(deployment, address, held):
    """The leader binds its DP RPC port and HCCL host ports on its host's address; a process listening on the
    same port of another address of the host leaves them free (on the simulated hosts, one kernel, the other
    host's member does just that), while the API port is bound on every address."""
    hd = on(deployment, "npu-a")
    (md,) = hd.members
    assert md.plan.host.nic_address == "10.0.0.1"
    facts = running_facts(hd)
    rpc = Listener(address, 29550, (("python3", 4242),))
    found = host_findings(hd, dataclasses.replace(facts, listeners=(*facts.listeners, rpc)))
    assert [(f.kind, f.port) for f in found] == ([("foreign-port", 29550)] if held else [])
    api = Listener(address, md.plan.assignment.api_port, (("nginx", 4343),))
    found = host_findings(hd, dataclasses.replace(facts, listeners=(*facts.listeners, api)))
    assert [(f.kind, f.port) for f in found] == [("foreign-port", md.plan.assignment.api_port)]


@pytest.mark.parametrize(
    "network, env, found",
    [
        ("host", {"HCCL_IF_BASE_PORT": "61040"}, [("foreign-port", "ds-node1", 61040, "hcclIfBasePort")]),
        ("bridge", {"HCCL_IF_BASE_PORT": "61040"}, []),  # bound in its own network namespace
        # HCCL binds on HCCL_IF_IP: the member's own address (npu-b's 10.0.0.2) clashes, another does not.
        ("host", {"HCCL_IF_BASE_PORT": "61040", "HCCL_IF_IP": "10.0.0.2"}, [("foreign-port", "ds-node1", 61040, "hcclIfBasePort")]),
        ("host", {"HCCL_IF_BASE_PORT": "61040", "HCCL_IF_IP": "10.0.0.9"}, []),
        # The member's NPU-side range is on the NPU's own network, not a host port.
        ("host", {"HCCL_HOST_SOCKET_PORT_RANGE": "16666-16681"}, []),
    ],
)  # fmt: skip
def test_a_foreign_container_on_the_host_network_whose_hccl_windows_overlap_a_members_is_foreign(deployment, network, env, found):
    """Stopped, but Docker starts it again after a reboot: its ports are not bound yet, its env says where they will be."""
    hd, facts = running(deployment, "ds-node1")
    other = foreign(deployment, env, network, name="bench", pid=9100, devices=[], status="exited", restart="always", health=None)
    judged = host_findings(hd, with_container(facts, other))
    assert [(f.kind, f.service, f.port, f.key) for f in judged] == found
    assert all("runs on the host network and its HCCL_IF_BASE_PORT (61040) overlaps ds-node1's hcclIfBasePort 61032-61063" in f.message for f in judged)


def test_a_members_cards_not_linked_by_hccs_is_a_topology_finding_naming_the_member(deployment):
    hd = on(deployment, "npu-b")
    facts = dataclasses.replace(running_facts(hd), topology=parse_topology(with_link(1, 2, "PIX")))
    [found] = host_findings(hd, facts)
    assert (found.kind, found.service) == ("topology", "ds-node1")
    assert found.message.startswith("the tensor-parallel group of member ds-node1 of ds (cards 0,1,2,3)")
