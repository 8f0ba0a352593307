"""One data-parallel instance over two simulated hosts behaves as vLLM v0.20.2 does (sim/npu-sim/dp.sh,
host-net.sh; sim/README.md "Multi-host groups").

Each member runs as its host would run it, `docker run --network host`, built from the plan JSON's
`groups[].members[]` (tests/support/sim_groups.py). Each simulated host is its own address
(127.0.1.K): the leader binds the handshake on its `--data-parallel-address`, every rank its HCCL
host port on `HCCL_IF_IP`, so a port taken on one host clashes there only. Every wait is for a
condition, with a generous bound; a failure shows the containers' logs.
"""

from __future__ import annotations

import socket
from contextlib import ExitStack
from pathlib import Path

import pytest

from sim.fleet import SimFleet
from sim.host import SimHost
from tests.support.sim_groups import (
    SERVICE,
    Group,
    listening,
    planned_group,
    replaced,
    served_models,
    start_member,
)
from tests.support.waits import wait_for

# The simulator's own test (it checks sim/, started from the plan JSON, not the program's records):
# `make test` leaves it out (pytest.ini, marker `simulator`).
pytestmark = pytest.mark.simulator

NO_ANSWER = "RuntimeError: Did not receive response from front-end process within 0.05 minutes"
SHORT_HANDSHAKE = {"NPU_SIM_HANDSHAKE_TIMEOUT_MINS": "0.05"}
"""vLLM's HANDSHAKE_TIMEOUT_MINS (5) shortened to 3 s for a follower that is meant to get no answer."""


@pytest.fixture
def fleet(sim_host: SimHost, tmp_path: Path):
    with SimFleet(sim_host, tmp_path / "fleet") as fleet:
        fleet.add(3)
        yield fleet


@pytest.fixture
def group(sim_host: SimHost, fleet: SimFleet, tmp_path: Path) -> Group:
    return planned_group(sim_host, fleet, tmp_path, size=2)


def logs(sim: SimHost, *names: str) -> str:
    return "\n".join(f"--- {n}:\n{sim.logs(n)}" for n in names)


def wait_serving(sim: SimHost, group: Group, *names: str, joined: int = 1) -> None:
    """The leader serves the group (its API answers) after its `joined`-th complete handshake."""
    leader = group.member(0)["name"]
    wait_for(
        f"{SERVICE} served through its leader's API after handshake {joined}",
        lambda: sim.logs(leader).count("2 of 2 data parallel ranks ready") >= joined and served_models(group) == [SERVICE],
        detail=lambda: logs(sim, leader, *names),
    )


def wait_stopped(sim: SimHost, name: str, needle: str, *others: str) -> str:
    """`name` stopped with `needle` in its log; the log."""
    wait_for(f"{name} to stop", lambda: sim.state(name)["Status"] == "exited", detail=lambda: logs(sim, name, *others))
    log = sim.logs(name)
    assert needle in log, logs(sim, name, *others)
    return log


def test_two_simulated_hosts_serve_one_data_parallel_instance_through_the_leaders_api(sim_host, group):
    leader = start_member(sim_host, group, 0)
    follower = start_member(sim_host, group, 1)
    wait_serving(sim_host, group, follower)
    address = {m["name"]: group.endpoints[m["host"]].address for m in group.plan["members"]}
    assert f"with head node address tcp://{address[leader]}:{group.plan['dataParallelRpcPort']}." in sim_host.logs(follower)
    # The same planned HCCL host port, each on its own host's address: no clash.
    port = group.member(0)["hcclHostSocketPortRange"][0]
    assert group.member(1)["hcclHostSocketPortRange"][0] == port
    assert listening(address[leader], port) and listening(address[follower], port), logs(sim_host, leader, follower)
    assert sim_host.state(follower)["Health"]["Status"] in ("starting", "healthy")  # it probes the leader's /health


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--data-parallel-address", "127.0.1.3"), ("--data-parallel-rpc-port", "29549")],
    ids=["address", "rpc-port"],
)
def test_a_follower_pointed_elsewhere_gets_no_answer_and_stops_with_vllms_words(sim_host, group, flag, value):
    leader = start_member(sim_host, group, 0)
    wrong = start_member(
        sim_host, group, 1, name="wrong", args=replaced(group.member(1)["args"], flag, value), env=SHORT_HANDSHAKE
    )
    log = wait_stopped(sim_host, wrong, NO_ANSWER, leader)
    assert "EngineCore failed to start." in log and "Shutting down." in log
    assert sim_host.state(wrong)["ExitCode"] == 0  # run_headless returns after its engine died
    wait_for("the leader loaded", lambda: "Loading model weights took" in sim_host.logs(leader))
    with pytest.raises(OSError):  # loaded, and waiting for its rank 1: no API yet
        served_models(group)
    start_member(sim_host, group, 1)  # the leader still waits for its rank 1
    wait_serving(sim_host, group, wrong)


def test_a_follower_with_a_rank_the_leader_runs_itself_ends_the_leaders_startup(sim_host, group):
    leader = start_member(sim_host, group, 0)
    follower = start_member(
        sim_host, group, 1, args=replaced(group.member(1)["args"], "--data-parallel-start-rank", "0"), env=SHORT_HANDSHAKE
    )
    wait_stopped(sim_host, leader, "RuntimeError: HELLO message from remote engine 0, expected it to be local", follower)
    assert sim_host.state(leader)["ExitCode"] == 1


def test_a_follower_whose_ranks_pass_the_leaders_size_ends_the_leaders_startup(sim_host, group):
    # DP size 3 with two ranks from 1 on the follower: rank 2 is none of the leader's 2.
    args = replaced(replaced(group.member(1)["args"], "--data-parallel-size", "3"), "--data-parallel-size-local", "2")
    leader = start_member(sim_host, group, 0)
    follower = start_member(sim_host, group, 1, args=args, devices=[0, 1], env=SHORT_HANDSHAKE)
    wait_stopped(sim_host, leader, "RuntimeError: Message from engine with unexpected data parallel rank: 2", follower)


def test_a_start_rank_outside_its_own_size_stops_the_follower_before_it_connects(sim_host, group):
    args = replaced(group.member(1)["args"], "--data-parallel-start-rank", "2")
    follower = start_member(sim_host, group, 1, args=args)
    wait_stopped(sim_host, follower, "ValueError: data_parallel_rank (2) must be in the range [0, 2)")


def test_a_second_follower_with_the_same_rank_is_refused_like_a_duplicate_zmq_identity(sim_host, fleet, tmp_path):
    group = planned_group(sim_host, fleet, tmp_path, size=3)
    leader = start_member(sim_host, group, 0)
    first = start_member(sim_host, group, 1)
    wait_for("rank 1 to join", lambda: "ranks 1..1 ready" in sim_host.logs(first), detail=lambda: logs(sim_host, leader, first))
    twin = start_member(sim_host, group, 1, name="twin", host=group.member(2)["host"], env=SHORT_HANDSHAKE)
    wait_stopped(sim_host, twin, NO_ANSWER, leader, first)
    start_member(sim_host, group, 2)
    wait_for(
        "the group of three to serve",
        lambda: "3 of 3 data parallel ranks ready" in sim_host.logs(leader) and served_models(group) == [SERVICE],
        detail=lambda: logs(sim_host, leader, first),
    )


def hold(stack: ExitStack, address: str, ports: range) -> None:
    """Listen on every port of `ports` at `address` until `stack` closes."""
    for port in ports:
        s = stack.enter_context(socket.socket())
        s.bind((address, port))
        s.listen()


def test_an_hccl_port_taken_on_the_followers_address_fails_with_ei0019_and_on_another_host_does_not(sim_host, group, fleet):
    first, last = group.member(1)["hcclHostSocketPortRange"]
    follower_address = group.endpoints[group.member(1)["host"]].address
    leader = start_member(sim_host, group, 0, restart=True)
    with ExitStack() as stack:
        hold(stack, follower_address, range(first, last + 1))
        blocked = start_member(sim_host, group, 1, name="blocked")
        log = wait_stopped(sim_host, blocked, "Communication_Error_Bind_IP_Port(EI0019)", leader)
    assert f"The IP address {follower_address} and port {last} have already been bound." in log
    assert "All ports in socket port range are bound already." in log
    with ExitStack() as stack:
        hold(stack, fleet.endpoints[2].address, range(first, last + 1))  # the same ports on a third host
        follower = start_member(sim_host, group, 1)
        # The leader took the blocked rank's HELLO, so the new one ends its startup ("Unexpected HELLO
        # ... in CONNECTED state"); Docker restarts it, and the group meets.
        wait_serving(sim_host, group, follower, blocked)
    assert "Unexpected HELLO message for remote engine 1 in CONNECTED state." in sim_host.logs(leader)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("localhost", 'Value localhost for environment variable HCCL_IF_IP is invalid. Expected value: "ip[%ifname]".'),
        ("127.0.1.1", "HCCL_IF_IP=127.0.1.1 is not an address of this host (its addresses: 127.0.1.2)"),
    ],
    ids=["not-an-ip", "another-hosts-address"],
)
def test_an_hccl_if_ip_that_is_not_the_hosts_own_address_fails_the_follower(sim_host, group, value, needle):
    leader = start_member(sim_host, group, 0)
    follower = start_member(sim_host, group, 1, env={"HCCL_IF_IP": value})
    log = wait_stopped(sim_host, follower, needle, leader)
    assert "RuntimeError: HCCL init failed" in log


def test_killing_and_restarting_the_follower_brings_the_group_back_to_serving(sim_host, group):
    leader = start_member(sim_host, group, 0, restart=True)
    follower = start_member(sim_host, group, 1, restart=True)
    wait_serving(sim_host, group, follower)
    sim_host.docker("kill", follower)
    wait_for(
        "the leader to end on its follower's dropped connection",
        lambda: "remote data parallel rank 1 closed its connection" in sim_host.logs(leader),
        detail=lambda: logs(sim_host, leader, follower),
    )
    sim_host.docker("start", follower)
    wait_serving(sim_host, group, follower, joined=2)


def test_a_restarted_leader_brings_its_follower_back(sim_host, group):
    leader = start_member(sim_host, group, 0, restart=True)
    follower = start_member(sim_host, group, 1, restart=True)
    wait_serving(sim_host, group, follower)
    sim_host.docker("restart", leader)
    wait_serving(sim_host, group, follower, joined=2)
    assert "the leader's end of the data parallel connection closed" in sim_host.logs(follower)
