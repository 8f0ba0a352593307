"""A multi-host service under the real engine, onto two simulated hosts (sim/fleet.py), beside
single-host services on the same hosts.

`pulumi up` runs each host's check (its member's HCCL_IF_IP configured there), then creates the
leader and the follower on their hosts' networks at once (records.group: neither waits for the other;
each container's wait ends when the group serves); the group answers through the leader's API. A
second preview changes nothing, `doctor` finds nothing, and a change to the service's `args` re-creates
exactly its two members, as `plan --against` says in its one line (`Restarts as one`), leaving the
single-host services' containers as they were. After a power cut the group comes back whole.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from sim.fleet import SimFleet, card_state_env
from sim.host import SimHost
from tests.engine.engine import (
    Project, assert_doctor_clean, assert_preview_changes_no_container, container_changes, destroyed_after, health, plan_of,
)
from tests.support.sim_stacks import fleet_defaults
from views.diff import diff_plans, render_diff

pytestmark = pytest.mark.engine

STACK = "engine"
MODEL = "/srv/models/dp-sim"
GROUP = "dp"
MEMBERS = ("dp-node0", "dp-node1")
SINGLES = ("solo-a", "solo-b")
LEADER_PORT = 21100


def values(fleet: SimFleet) -> dict[str, Any]:
    """Two hosts; the group's members on card 0 of the first and card 4 of the second (the start gate's
    card locks are one folder of this machine: distinct cards keep the members from queueing on one
    lock, tests/engine/shard_fleet.py), a single-host service beside each. API ports distinct across
    the hosts: one kernel binds them all."""
    a, b = fleet.endpoints[:2]
    hosts = [{"name": e.name, "address": e.address, "sshPort": e.ssh_port, "user": "root", "npus": 8, "hbmGiB": 64}
             for e in (a, b)]  # fmt: skip
    member_pins = [{"host": a.name, "devices": [0], "apiPort": LEADER_PORT}, {"host": b.name, "devices": [4]}]
    services = [
        {"name": GROUP, "model": MODEL, "tensorParallelSize": 1, "memoryFraction": 0.5,
         "dataParallel": {"size": 2, "perHost": 1, "memberPins": member_pins}},
        {"name": SINGLES[0], "host": a.name, "model": MODEL, "memoryFraction": 0.3, "devices": [1],
         "apiPort": LEADER_PORT + 1, "env": card_state_env(a)},
        {"name": SINGLES[1], "host": b.name, "model": MODEL, "memoryFraction": 0.3, "devices": [5],
         "apiPort": LEADER_PORT + 2, "env": card_state_env(b)},
    ]  # fmt: skip
    return {
        "hosts": hosts,
        "services": services,
        "ssh": {"identityFile": str(fleet.identity_file), "knownHostsFile": str(fleet.known_hosts_file)},
        "defaults": fleet_defaults(300),
    }


@pytest.fixture(scope="module")
def fleet(engine_host: SimHost, tmp_path_factory: pytest.TempPathFactory):
    engine_host.make_model(MODEL)
    with SimFleet(engine_host, tmp_path_factory.mktemp("dpfleet")) as fleet:
        fleet.add(2)
        yield fleet


@pytest.fixture(scope="module")
def project(fleet: SimFleet, engine_host: SimHost, engine_env, tmp_path_factory: pytest.TempPathFactory):
    with destroyed_after(Project.create(tmp_path_factory.mktemp("dp"), STACK, values(fleet), engine_env), engine_host) as project:
        yield project


def containers(host: SimHost) -> dict[str, str]:
    """Name -> id of the stack's containers."""
    out = host.docker("ps", "-a", "--filter", f"label=ascend-fleet.stack={STACK}", "--format", "{{.Names}} {{.ID}}").stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def models(url: str) -> list[str]:
    with urllib.request.urlopen(f"{url}/models", timeout=10) as resp:
        return [m["id"] for m in json.load(resp)["data"]]


def test_up_starts_the_group_on_both_hosts_networks_beside_the_single_host_services(project, engine_host):
    outcome = project.run("up")
    created = outcome.urns("create")
    assert {f"{n}-container" for n in (*MEMBERS, *SINGLES)} <= {u.rsplit("::", 1)[-1] for u in created}, outcome.explain()
    for name in (*MEMBERS, *SINGLES):
        assert health(engine_host, name) == "healthy", name
    for name in MEMBERS:
        mode = engine_host.docker("inspect", "-f", "{{.HostConfig.NetworkMode}}", name).stdout.strip()
        assert mode == "host", name
    services = project.outputs()["services"]
    leader = services[GROUP]["endpoint"]
    assert leader == f"http://{project.values()['hosts'][0]['address']}:{LEADER_PORT}/v1"
    assert models(leader) == [GROUP], "the group answers through its leader's API"
    logs = engine_host.docker("logs", MEMBERS[0]).stdout + engine_host.docker("logs", MEMBERS[0]).stderr
    assert "2 of 2 data parallel ranks ready" in logs, logs[-3000:]
    print(f"up: {outcome.seconds:.1f} s")


def test_a_second_preview_changes_nothing(project):
    assert_preview_changes_no_container(project)


def test_doctor_finds_nothing(project):
    assert_doctor_clean(project)


def test_after_a_power_cut_dockerd_brings_the_group_back_whole_and_doctor_and_preview_find_nothing(project, engine_host):
    """The simulated hosts share one machine: a reboot is every host's at once (sim/README.md). Docker
    restarts each member (`unless-stopped`), the follower joins the leader's handshake again, and the group
    serves through the leader's API."""
    boot = engine_host.reboot()
    assert set(MEMBERS) | set(SINGLES) <= set(boot.started), boot.started
    for name in (*MEMBERS, *SINGLES):
        engine_host.wait_healthy(name, timeout=300)
    assert models(project.outputs()["services"][GROUP]["endpoint"]) == [GROUP]
    test_doctor_finds_nothing(project)
    test_a_second_preview_changes_nothing(project)


def test_a_change_to_the_services_args_re_creates_exactly_the_group_as_plan_against_says(project, engine_host):
    before = containers(engine_host)
    old_plan = plan_of(project, project.values())

    def change(v: dict[str, Any]) -> None:
        v["services"][0]["args"] = ["--trust-remote-code"]

    project.edit(change)
    new_plan = plan_of(project, project.values())
    text = render_diff(diff_plans(old_plan, new_plan), "table")
    assert f"a change to any member restarts every member: {', '.join(MEMBERS)}." in text, text
    changes = container_changes(project.preview_json())
    assert changes.replaced == frozenset(MEMBERS) and not (changes.created | changes.deleted | changes.updated), changes
    outcome = project.run("up")
    after = containers(engine_host)
    assert [n for n in MEMBERS if after[n] == before[n]] == [], "every member re-created"
    assert {n: after[n] for n in SINGLES} == {n: before[n] for n in SINGLES}, "the single-host services untouched"
    for name in MEMBERS:
        assert health(engine_host, name) == "healthy", name
    assert models(project.outputs()["services"][GROUP]["endpoint"]) == [GROUP]
    print(f"up of the change: {outcome.seconds:.1f} s")
