"""A multi-host service and its neighbours on two simulated hosts, started as `render` writes them, judged by
`doctor`: clean while the group serves, one `group` finding for a follower planted with a wrong start rank,
clean again once the right follower is back and a member restarted.

Every planned container of both hosts (the group's two members and a single-host service beside each) is
started from the deployment's records (`HostDeployment.containers`) with the `docker run` arguments
views/exports/render.py builds (`tests.support.sim_stacks.run_args`): the members on the host network
(`--network host`), the leader pinned to card 0 of the first host, the follower to card 4 of the second
(the start gate's card locks are machine-wide, so distinct cards keep them from queueing on one lock),
distinct API ports (one kernel binds them all). A member takes its simulated host from its `HCCL_IF_IP`
(sim/npu-sim), a single-host service from `card_state_env`. Every wait is for a condition with a
generous bound, and a failure shows the containers' logs.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from ops import doctor
from ops.doctor.findings import Finding
from records.deployment import Deployment
from sim.fleet import SimFleet, card_state_env
from sim.host import SimHost, free_port
from tests.simhost.probes import probed_deployment
from tests.support.pipeline import deployment_of
from tests.support.sim_groups import free_port_outside_ephemeral, replaced
from tests.support.sim_stacks import fleet_defaults, run_args
from tests.support.waits import wait_for

pytestmark = pytest.mark.simhost

STACK = "group-doctor"
GROUP, LEADER, FOLLOWER = "gd", "gd-node0", "gd-node1"
SINGLES = ("gd-solo-a", "gd-solo-b")
READY = "2 of 2 data parallel ranks ready"
"""The leader's line when its handshake is complete and it serves (sim/README.md, "Multi-host groups")."""
START_RANK = "--data-parallel-start-rank"


def values(sim: SimHost, fleet: SimFleet) -> dict[str, Any]:
    """Two simulated hosts; the group's leader on card 0 of the first, its follower on card 4 of the second,
    a single-host service on its own card beside each. The API ports are free on this machine, the
    group's pinned outside the ephemeral range as a member's windows must be."""
    a, b = fleet.endpoints[:2]
    model = str(sim.make_model("gd-model"))
    taken: set[int] = set()
    leader_pin = {"host": a.name, "devices": [0], "apiPort": free_port_outside_ephemeral(18000, taken),
                  "dataParallelRpcPort": free_port_outside_ephemeral(29550, taken)}  # fmt: skip
    services = [
        {"name": GROUP, "model": model, "tensorParallelSize": 1, "memoryFraction": 0.5,
         "dataParallel": {"size": 2, "perHost": 1, "memberPins": [leader_pin, {"host": b.name, "devices": [4]}]}},
        {"name": SINGLES[0], "host": a.name, "model": model, "memoryFraction": 0.3, "devices": [1],
         "apiPort": free_port(), "env": card_state_env(a)},
        {"name": SINGLES[1], "host": b.name, "model": model, "memoryFraction": 0.3, "devices": [5],
         "apiPort": free_port(), "env": card_state_env(b)},
    ]  # fmt: skip
    return {
        "hosts": [{"name": e.name, "address": e.address, "sshPort": e.ssh_port, "npus": 8, "hbmGiB": 64} for e in (a, b)],
        "ssh": {"identityFile": str(fleet.identity_file), "knownHostsFile": str(fleet.known_hosts_file),
                "connectTimeoutSeconds": 10},  # fmt: skip
        # The health checks' start period: a leader waiting in its handshake stays `starting`, not
        # `unhealthy`, while the planted follower cannot join (a bound, not an expectation).
        "defaults": fleet_defaults(900),
        "services": services,
    }


@pytest.fixture
def fleet(sim_host: SimHost, tmp_path: Path):
    with SimFleet(sim_host, tmp_path / "fleet") as fleet:
        fleet.add(2)
        yield fleet


@pytest.fixture
def deployment(sim_host: SimHost, fleet: SimFleet) -> Deployment:
    """Every planned container of both hosts started as render's docker-run starts it, all at once (a
    member waits for no other, records.group); the `sim_host` fixture removes them after the test."""
    deployment = deployment_of(values(sim_host, fleet), STACK)
    for hd in deployment.hosts:
        for _, spec, _ in hd.containers:
            sim_host.docker(*run_args(sim_host, spec))
    return deployment


def logs(sim: SimHost, *names: str) -> str:
    return "\n".join(f"--- {n}:\n{sim.logs(n)}" for n in names)


def served_models(deployment: Deployment) -> list[str]:
    """The model ids the group's endpoint (its leader's API) lists; OSError while it does not answer."""
    (group,) = deployment.groups
    with urllib.request.urlopen(f"{group.endpoint}/models", timeout=5) as response:
        return [m["id"] for m in json.loads(response.read())["data"]]


def wait_serving(sim: SimHost, deployment: Deployment, handshakes: int) -> None:
    """The group serves through its leader's API after its `handshakes`-th complete handshake, and every
    planned container of both hosts is healthy."""
    everything = [name for hd in deployment.hosts for name, _, _ in hd.containers]
    wait_for(
        f"{GROUP} served through its leader's API after handshake {handshakes}, every container healthy",
        lambda: sim.logs(LEADER).count(READY) >= handshakes
        and served_models(deployment) == [GROUP]
        and all(sim.state(n).get("Health", {}).get("Status") == "healthy" for n in everything),
        detail=lambda: logs(sim, *everything),
    )


def restarted(sim: SimHost, name: str) -> bool:
    """Whether Docker's restart policy started the container again and it runs."""
    count, status = sim.docker("inspect", "-f", "{{.RestartCount}} {{.State.Status}}", name).stdout.split()
    return int(count) >= 1 and status == "running"


def findings(deployment: Deployment) -> dict[str, list[Finding]]:
    """`doctor`'s findings on each host, both hosts reachable."""
    reports = doctor.audit(probed_deployment(deployment))
    assert all(r.reachable for r in reports), [f.message for r in reports for f in r.findings]
    return {r.name: list(r.findings) for r in reports}


def shown(found: dict[str, list[Finding]]) -> str:
    return json.dumps({host: [f.to_json() for f in fs] for host, fs in found.items()}, indent=2)


def test_doctor_is_clean_while_the_group_serves_reports_a_planted_wrong_rank_and_is_clean_after_a_restart(
    sim_host: SimHost, fleet: SimFleet, deployment: Deployment
) -> None:
    a, b = (e.name for e in fleet.endpoints[:2])
    (group,) = deployment.groups
    follower = next(md for md in group.members if md.name == FOLLOWER)
    for md in group.members:  # as render's docker-run starts a member
        assert sim_host.docker("inspect", "-f", "{{.HostConfig.NetworkMode}}", md.name).stdout.strip() == "host", md.name

    # 1. The group serves through its leader on the first host; doctor finds nothing on either host.
    wait_serving(sim_host, deployment, handshakes=1)
    found = findings(deployment)
    assert found == {a: [], b: []}, shown(found)

    # 2. The follower removed and started again by hand with start rank 2, which the plan gives no one.
    # Its connection closing ends the leader, whose restart policy starts it waiting in a new handshake.
    sim_host.docker("rm", "-f", FOLLOWER)
    wait_for(
        "the leader restarted after its follower's connection closed",
        lambda: restarted(sim_host, LEADER) and "remote data parallel rank 1 closed its connection" in sim_host.logs(LEADER),
        detail=lambda: logs(sim_host, LEADER),
    )
    planted = dataclasses.replace(follower.spec, command=tuple(replaced(list(follower.spec.command), START_RANK, "2")))
    sim_host.docker(*run_args(sim_host, planted))
    wait_for(
        "the planted follower to refuse its start rank",
        lambda: "ValueError: data_parallel_rank (2) must be in the range [0, 2)" in sim_host.logs(FOLLOWER),
        detail=lambda: logs(sim_host, FOLLOWER, LEADER),
    )

    found = findings(deployment)
    assert found[a] == [], shown(found)  # the leader waits in its handshake: running, its health starting
    [wrong] = [f for f in found[b] if f.kind == "group"]
    assert (wrong.service, wrong.container, wrong.key) == (GROUP, FOLLOWER, "data-parallel flags")
    address, port = group.plan.address, group.plan.rpc_port
    assert wrong.message == (
        f"group {GROUP} cannot serve: follower {FOLLOWER} on {b} joins {address}:{port} as start rank 2 of "
        f"data-parallel size 2; the plan: leader {LEADER} on {a} at {address}:{port} as start rank 1 of "
        "data-parallel size 2 (its command's drift shows the words)"
    ), shown(found)
    others = sorted((f.kind, f.container, f.key) for f in found[b] if f is not wrong)
    drift = [(k, c, key) for k, c, key in others if k == "drift"]
    assert [(k, c) for k, c, _ in drift] == [("drift", FOLLOWER)] and drift[0][2].startswith("command"), shown(found)
    # The follower exits at once and its restart policy starts it again: Docker shows it restarting or,
    # for the moment it runs, running; which one doctor reads depends on that moment.
    assert [o for o in others if o not in drift] in ([], [("restarting", FOLLOWER, None)]), shown(found)

    # 3. The planned follower back: the waiting leader takes it, and the group serves again. Then the
    # leader restarted by hand: its follower ends on the closed connection, Docker restarts it, and the
    # group meets again (sim/README.md, "A member that vanishes after the group serves").
    sim_host.docker("rm", "-f", FOLLOWER)
    sim_host.docker(*run_args(sim_host, follower.spec))
    wait_serving(sim_host, deployment, handshakes=2)
    sim_host.docker("restart", LEADER)
    wait_serving(sim_host, deployment, handshakes=3)
    assert "the leader's end of the data parallel connection closed" in sim_host.logs(FOLLOWER)
    found = findings(deployment)
    assert found == {a: [], b: []}, shown(found)
