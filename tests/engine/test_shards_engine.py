"""A fleet deployed as shards, under the real engine, onto simulated hosts (sim/fleet.py).

Each simulated host is its own SSH endpoint (its own loopback address, sshd and host key), its own
docker provider in the program and its own cards. The module lives as a sharded fleet does: two
shard stacks come up side by side, a second preview of each changes nothing, a host added to the
fleet changes no resource the shards already hold, and a host moved between shards on purpose
(`python -m allocation move-host`, then its `shard:` pin and `shards` again, docs/shards.md) re-creates no
container. The fleet is small (5 hosts, 20 containers, shards of 3) so the module stays a lane of
a few minutes; benchmarks/shard_bench.py does 10, 25 and 50 hosts per shard.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from sim.fleet import SimFleet
from sim.host import SimHost
from tests.engine.engine import CONTAINER, Project, preview_steps, urn_name, urn_type
from tests.engine.shard_fleet import FLEET, MODEL, SERVICES_PER_HOST, ShardedFleet, fleet_values

pytestmark = pytest.mark.engine

SIZE = 3
FIRST_PINS = {"sim00": 0, "sim01": 0, "sim02": 0, "sim03": 1}
MOVED = "sim02"
LABEL = f"ascend-fleet.stack={FLEET}"


@pytest.fixture(scope="module")
def sim_fleet(engine_host: SimHost, tmp_path_factory: pytest.TempPathFactory):
    engine_host.make_model(MODEL)
    fleet = SimFleet(engine_host, tmp_path_factory.mktemp("simfleet"))
    try:
        fleet.add(len(FIRST_PINS))
        yield fleet
    finally:
        fleet.stop()


@pytest.fixture(scope="module")
def sharded(sim_fleet: SimFleet, engine_host: SimHost, engine_env, tmp_path_factory: pytest.TempPathFactory):
    fleet = ShardedFleet(tmp_path_factory.mktemp("shards"), fleet_values(sim_fleet, SIZE, FIRST_PINS), engine_env)
    fleet.cut()
    try:
        yield fleet
    finally:
        for shard in fleet.shards.values():
            shard.cli("destroy", "--stack", shard.stack, "--yes", check=False)
        engine_host.reset()


def container_ids(host: SimHost) -> dict[str, str]:
    """Name -> id of every container of the fleet (its label names the fleet, whichever shard made it)."""
    out = host.local_docker("ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}} {{.ID}}").stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def changes(doc: dict[str, Any]) -> dict[str, str]:
    """URN -> op of every step of a preview that is not `same`."""
    return {urn: op for urn, op in preview_steps(doc).items() if op != "same"}


def up_side_by_side(shards: list[Project]) -> None:
    with ThreadPoolExecutor(len(shards)) as pool:
        for future in [pool.submit(s.run, "up", "--parallel", str(SERVICES_PER_HOST * SIZE + 16)) for s in shards]:
            future.result()


def test_two_shards_come_up_side_by_side_each_with_its_hosts_containers_only(sharded, engine_host):
    assert sorted(sharded.shards) == [0, 1]
    up_side_by_side(list(sharded.shards.values()))
    ids = container_ids(engine_host)
    assert len(ids) == SERVICES_PER_HOST * len(FIRST_PINS), ids
    for index, shard in sharded.shards.items():
        state = json.loads(shard.cli("stack", "export", "--stack", shard.stack).stdout)
        names = {urn_name(r["urn"]) for r in state["deployment"]["resources"] if urn_type(r["urn"]) == CONTAINER}
        hosts = {h for h, k in FIRST_PINS.items() if k == index}
        assert names == {f"{h}-m{k}-container" for h in hosts for k in range(SERVICES_PER_HOST)}


def test_every_simulated_host_answers_on_its_own_published_port(sharded, sim_fleet):
    for index, endpoint in enumerate(sim_fleet.endpoints):
        port = 20000 + SERVICES_PER_HOST * index
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as resp:
            body = resp.read()
        assert f"{endpoint.name}-m0".encode() in body, body


def test_a_second_preview_of_each_shard_changes_nothing(sharded):
    for shard in sharded.shards.values():
        assert changes(shard.preview_json()) == {}, shard.stack


def test_a_shard_file_copied_to_another_shards_stack_is_refused_by_preview_and_up_with_nothing_changed(sharded, engine_host):
    """Shard 0's file under shard 1's name would deploy shard 0's hosts from stack fleet-shard-1 and
    delete shard 1's containers; the program refuses it before registering anything (docs/shards.md)."""
    target = sharded.shards[1]
    own = target.stack_file.read_bytes()
    before, held = container_ids(engine_host), resource_urns(target)
    target.stack_file.write_bytes(sharded.shards[0].stack_file.read_bytes())
    try:
        for command in ("preview", "up"):
            refused = target.run(command, expect_success=False)
            assert any(
                f"which only stack {sharded.shards[0].stack} deploys, not stack {target.stack}" in d
                for d in refused.diagnostics()
            ), refused.explain()
            assert refused.changed() == {}, refused.explain()
    finally:
        target.stack_file.write_bytes(own)
    assert resource_urns(target) == held and container_ids(engine_host) == before
    assert changes(target.preview_json()) == {}


def test_adding_a_host_to_the_fleet_changes_no_resource_a_shard_already_holds(sharded, sim_fleet, engine_host):
    [added] = sim_fleet.add(1)
    sharded.write(fleet_values(sim_fleet, SIZE, FIRST_PINS))  # the new host unpinned: the lowest shard with room
    sharded.cut()
    assert sorted(sharded.shards) == [0, 1]
    assert changes(sharded.shards[0].preview_json()) == {}
    grown = changes(sharded.shards[1].preview_json())
    assert set(grown.values()) == {"create"}, grown
    assert {urn_name(u) for u in grown if urn_type(u) == CONTAINER} == {
        f"{added.name}-m{k}-container" for k in range(SERVICES_PER_HOST)
    }
    sharded.shards[1].run("up", "--parallel", "32")
    assert len(container_ids(engine_host)) == SERVICES_PER_HOST * len(sim_fleet.endpoints)


def resource_urns(shard: Project) -> set[str]:
    state = json.loads(shard.cli("stack", "export", "--stack", shard.stack).stdout)
    return {r["urn"] for r in state["deployment"]["resources"]}


def test_moving_a_host_between_shards_with_move_host_recreates_no_container(sharded, sim_fleet, engine_host):
    """`pulumi state move` refuses this program's hosts (ops/state_move.py says why); `move-host` moves
    the host's resources, the pin and `shards` follow, and neither shard has anything left to do."""
    before = container_ids(engine_host)
    source, dest = sharded.shards[0], sharded.shards[1]
    held = {u for u in resource_urns(source) if f"::{MOVED}" in u}
    proc = subprocess.run(
        [sys.executable, "-m", "allocation", "move-host", "--stack", FLEET, MOVED, "--to", "1"],
        cwd=sharded.root, capture_output=True, text=True, env=sharded.fleet.env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert not {u for u in resource_urns(source) if f"::{MOVED}" in u}
    assert {u.replace(source.stack, dest.stack, 1) for u in held} <= resource_urns(dest)
    pins = {e.name: 1 for e in sim_fleet.endpoints} | {h: k for h, k in FIRST_PINS.items() if h != MOVED}
    sharded.write(fleet_values(sim_fleet, SIZE, pins))
    sharded.cut()
    for shard in (source, dest):
        assert changes(shard.preview_json()) == {}, shard.stack
    dest.run("up", "--parallel", "32")
    assert container_ids(engine_host) == before
