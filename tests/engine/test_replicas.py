"""The real Pulumi engine scales a replicated service and rolls its image, one replica at a time.

A second stack, of its own, on the simulated host: one service `emb` with three replicas on
three cards and its router (the real vllm-router 0.1.17 in the stand-in router image of
sim/router_image.py, made beforehand under the tag the program's build script looks for, so that
script skips its build). The tests run in file order: `pulumi up`, the replicas pinned, one replica
more and one less (each checked against what the plan diff says, and that nothing else is
re-created, the router included), the router's base image pinned and the service's image changed
while a thread samples the replicas and sends requests through the router, and `pulumi destroy`.

The router reaches its workers at the host's address, which for a container on the simulated host
is the Docker bridge's gateway (as in tests/simhost/test_rolling_upgrade.py). The stack's host
address is therefore that gateway; the simulated host's sshd listens on loopback only, so the
fixture forwards the gateway's SSH port to it and trusts the same host key under the gateway's name.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from records.rollout import workers_dir
from sim.host import CLAIMS_DIR, IMAGE, SimHost
from sim.router_image import build_router_image
from tests.engine.engine import CONTAINER, REPLACE_OPS, Project, apply_and_preview, container_changes, preview_steps, urn_name, urn_type
from tests.engine.engine import get, health, inspect, plan_diff, plan_of, stack_has_resources
from tests.support.forward import Forward
from tests.support.rolling import LOCAL_DOCKER, SERVICE, Watch, derived_image, host_address

pytestmark = pytest.mark.engine

STACK = "replicas"
REPLICAS = 3
MODEL = "/srv/models/engine-emb"
NEW_IMAGE = "ascend-fleet/npu-sim:engine-roll"
ROUTER = f"{SERVICE}-router"
START_TIMEOUT = 150


def replicated_values(host: SimHost, gateway: str, known_hosts: Path) -> dict[str, Any]:
    return {
        "hosts": [{"name": "npu-a", "address": gateway, "sshPort": host.ssh_port, "user": host.user}],
        "ssh": {"identityFile": str(host.identity_file), "knownHostsFile": str(known_hosts)},
        "defaults": {
            "image": IMAGE,
            "startTimeoutSeconds": START_TIMEOUT,
            "stopGraceSeconds": 10,
            "shmSizeMiB": 64,
            "mounts": [{"source": str(CLAIMS_DIR), "target": str(CLAIMS_DIR), "readOnly": False}],
        },
        "services": [{"name": SERVICE, "model": MODEL, "memoryFraction": 0.2, "replicas": REPLICAS,
                      "router": {"policy": "round_robin"}}],
    }  # fmt: skip


@pytest.fixture(scope="module")
def stack(engine_host: SimHost, engine_env, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Project, SimHost]]:
    host = engine_host
    work = tmp_path_factory.mktemp("replicas")
    gateway = host_address(host)
    known_hosts = work / "known_hosts"
    known_hosts.write_text(host.known_hosts_file.read_text().replace(f"[{host.address}]", f"[{gateway}]"))
    forward = Forward((gateway, host.ssh_port), (host.address, host.ssh_port))
    made_workers = not Path(workers_dir(ROUTER)).exists()
    project = None
    try:
        host.make_model(MODEL)
        build_router_image(LOCAL_DOCKER, IMAGE)
        project = Project.create(work, STACK, replicated_values(host, gateway, known_hosts), engine_env)
        yield project, host
    finally:
        if project is not None and stack_has_resources(project):
            project.cli("destroy", "--stack", project.stack, "--yes", check=False)
        host.reset()
        host.docker("image", "rm", "-f", NEW_IMAGE, check=False)
        if made_workers:
            shutil.rmtree(workers_dir(ROUTER), ignore_errors=True)
        forward.close()


def replicas(project: Project) -> list[str]:
    return [f"{SERVICE}-{i}" for i in range(1, project.values()["services"][0]["replicas"] + 1)]


def router_port(project: Project) -> int:
    (router,) = plan_of(project, project.values())["routers"]
    return router["routerPort"]


def router_workers(project: Project) -> dict[str, bool]:
    """Worker URL -> healthy, as the router's `GET /workers` lists them."""
    _, body = get(f"http://127.0.0.1:{router_port(project)}/workers")
    return {w["url"]: w["is_healthy"] for w in json.loads(body)["workers"]}


def planned_workers(project: Project) -> set[str]:
    (router,) = plan_of(project, project.values())["routers"]
    plan = plan_of(project, project.values())
    ports = {s["name"]: s["apiPort"] for h in plan["hosts"] for s in h["services"]}
    address = project.values()["hosts"][0]["address"]
    return {f"http://{address}:{ports[name]}" for name in router["replicas"]}


def ids(host: SimHost, names: list[str]) -> dict[str, str]:
    return {n: inspect(host, n)["Id"] for n in names}


def replaced_anything(doc: dict[str, Any]) -> dict[str, str]:
    """Every resource (not only containers) the preview would replace."""
    return {urn: op for urn, op in preview_steps(doc).items() if op in REPLACE_OPS}


def say(capsys, line: str) -> None:
    with capsys.disabled():
        print(f"\n{line}")


# --- up ----------------------------------------------------------------------------


def test_pulumi_up_starts_every_replica_and_the_router_healthy_and_the_router_serves_through_all(stack, capsys):
    project, host = stack
    up = project.run("up")

    names = replicas(project)
    assert {u.rsplit("::", 1)[1] for u in up.urns("create")} == {f"{n}-container" for n in [*names, ROUTER]}
    for name in [*names, ROUTER]:
        assert health(host, name) == "healthy", host.logs(name)
    cards = [tuple(d["PathOnHost"] for d in inspect(host, n)["HostConfig"]["Devices"] if d["PathOnHost"][-1].isdigit()) for n in names]
    assert len(set(cards)) == REPLICAS and all(len(c) == 1 for c in cards), cards
    assert router_workers(project) == dict.fromkeys(planned_workers(project), True)
    status, body = get(f"http://127.0.0.1:{router_port(project)}/v1/models")
    assert status == 200 and SERVICE.encode() in body
    say(capsys, f"replicas: pulumi up of {REPLICAS} replicas and the router {up.seconds:.0f}s")


# --- replicas +1 and -1 ----------------------------------------------------------------


def test_pinning_the_replicas_changes_nothing(stack):
    project, _ = stack
    proc = subprocess.run(
        [".venv/bin/python", "-m", "allocation", "pin", "--config", str(project.stack_file)],
        cwd=project.root, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert len(project.values()["services"][0]["replicaPins"]) == REPLICAS
    assert set(preview_steps(project.preview_json()).values()) == {"same"}


def test_one_replica_more_creates_exactly_its_container_and_it_serves_through_the_router(stack, capsys):
    project, host = stack
    before = ids(host, [*replicas(project), ROUTER])
    old, changes = apply_and_preview(project, lambda v: v["services"][0].update(replicas=REPLICAS + 1))
    new = f"{SERVICE}-{REPLICAS + 1}"
    assert (changes.created, changes.deleted, changes.replaced, changes.updated) == ({new}, set(), set(), set())
    assert plan_diff(plan_of(project, old), plan_of(project, project.values()))[:3] == ({new}, set(), set())
    assert replaced_anything(project.preview_json()) == {}

    up = project.run("up")
    assert {u.rsplit("::", 1)[1] for u in up.urns("create")} == {f"{new}-container"}
    assert up.urns("create-replacement", "delete-replaced", "delete") == set()
    assert health(host, new) == "healthy", host.logs(new)
    assert ids(host, list(before)) == before, "a container other than the new replica's was re-created"
    assert router_workers(project) == dict.fromkeys(planned_workers(project), True)
    assert len(router_workers(project)) == REPLICAS + 1
    assert set(preview_steps(project.preview_json()).values()) == {"same"}
    say(capsys, f"replicas: +1 up {up.seconds:.0f}s")


def test_one_replica_less_deletes_exactly_its_container_and_the_router_forgets_it(stack, capsys):
    project, host = stack
    gone = f"{SERVICE}-{REPLICAS + 1}"
    before = ids(host, [f"{SERVICE}-{i}" for i in range(1, REPLICAS + 1)] + [ROUTER])

    def one_less(values):
        service = values["services"][0]
        service["replicas"] -= 1
        service["replicaPins"] = service["replicaPins"][: service["replicas"]]

    old, changes = apply_and_preview(project, one_less)
    assert (changes.created, changes.deleted, changes.replaced, changes.updated) == (set(), {gone}, set(), set())
    assert plan_diff(plan_of(project, old), plan_of(project, project.values()))[:3] == (set(), {gone}, set())
    assert replaced_anything(project.preview_json()) == {}

    up = project.run("up")
    assert {u.rsplit("::", 1)[1] for u in up.urns("delete")} == {f"{gone}-container"}
    assert up.urns("create", "create-replacement", "delete-replaced") == set()
    assert health(host, gone) is None
    assert ids(host, list(before)) == before
    assert router_workers(project) == dict.fromkeys(planned_workers(project), True)
    assert len(router_workers(project)) == REPLICAS
    say(capsys, f"replicas: -1 up {up.seconds:.0f}s")


# --- a new image, the router's base pinned ----------------------------------------------


def test_pinning_the_router_base_image_re_creates_nothing(stack):
    project, _ = stack
    _, changes = apply_and_preview(project, lambda v: v["services"][0].update(router={"policy": "round_robin", "baseImage": IMAGE}))
    assert changes == container_changes({"steps": []})
    assert replaced_anything(project.preview_json()) == {}
    project.run("up")


def test_a_new_image_rolls_the_replicas_one_at_a_time_and_the_router_keeps_serving(stack, capsys):
    project, host = stack
    derived_image(NEW_IMAGE)
    router_before = inspect(host, ROUTER)["Id"]
    old, changes = apply_and_preview(project, lambda v: v["services"][0].update(image=NEW_IMAGE))
    _, _, recreated, _ = plan_diff(plan_of(project, old), plan_of(project, project.values()))
    names = replicas(project)
    assert recreated == set(names)
    assert (changes.created, changes.deleted, changes.replaced, changes.updated) == (set(), set(), recreated, set())
    # Besides the containers, only the replicas' serves steps are replaced (they run again).
    assert {urn_name(u) for u in replaced_anything(project.preview_json()) if urn_type(u) != CONTAINER} == {f"{n}-serves" for n in names}

    with Watch(router_port(project), names) as watch:
        time.sleep(2)
        start = time.monotonic()
        up = project.run("up")
        end = time.monotonic()
        time.sleep(2)

    down = watch.down()
    worst = max(len(d) for _, d in down)
    failed = [(round(s - start, 1), result) for s, _, result in watch.requests if result != 200]
    say(
        capsys,
        f"replicas: image roll (router base pinned) up {up.seconds:.0f}s ({end - start:.0f}s); "
        f"{len(watch.samples)} samples, at most {worst} replica down; {len(watch.requests)} requests "
        f"through the router, {len(failed)} failed {failed[:10]}",
    )
    assert {urn_name(u) for u in up.urns("create-replacement")} == {f"{n}-container" for n in names}
    assert inspect(host, ROUTER)["Id"] == router_before, "the router was re-created though its base image is pinned"
    # The provider stores the image id it resolved the tag to (as in test_engine's one-image case).
    new_id = host.docker("image", "inspect", "-f", "{{.Id}}", NEW_IMAGE).stdout.strip()
    for name in names:
        assert health(host, name) == "healthy", host.logs(name)
        assert inspect(host, name)["Image"] == new_id
    assert router_workers(project) == dict.fromkeys(planned_workers(project), True)

    assert [(round(t - start, 1), d) for t, d in down if len(d) > 1] == []
    assert {r for _, d in down for r in d} == set(names), "the sampling saw every replica go down once"
    # docs/replicas.md: with router.baseImage pinned, only the replicas roll and the
    # endpoint stays up throughout; each replica is drained before it goes.
    assert failed == []
    assert len(watch.requests) > 50


# --- destroy ---------------------------------------------------------------------------


def test_destroy_leaves_no_replica_and_no_router(stack):
    project, host = stack
    names = replicas(project)
    project.run("destroy")
    for name in [*names, ROUTER]:
        assert health(host, name) is None
