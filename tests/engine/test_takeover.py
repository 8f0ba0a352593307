"""The real engine's first `pulumi up` of prod on a host that runs the original compose deployment.

The two old containers run as compose had them (tests/simhost/test_takeover.py starts them). The
engine must run the host check, then the takeover, and only then anything that needs their cards or
ports; the old containers end with restart policy `no`, stopped and kept; a second preview changes
nothing; after `pulumi destroy` the two commands of docs/moving-from-compose.md bring the old deployment back.

With an image the host does not have, served by a real registry on loopback behind a gate that holds
every blob download (tests/engine/registry.py, tests/support/forward.py), the old containers serve,
untouched, for as long as the pull takes; the takeover comes once the pull is done. Each test has a
stack and a compose deployment of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from records.card_order import BOOT_SCRIPT as ORDER_BOOT_SCRIPT, UNIT_PATH as ORDER_UNIT_PATH
from records.device_share import BOOT_SCRIPT, UNIT_PATH
from sim.host import SimHost
from tests.engine.engine import Outcome, Project, preview_steps, steps_started, urn_name, urn_type
from tests.engine.engine import inspect, sim_stack_values
from tests.engine.registry import REPOSITORY, LocalRegistry, published_image
from tests.support.forward import BlobGate
from tests.support.takeover import OLD, PLANNED, restart_policy, serving, start_the_compose_deployment
from tests.support.waits import wait_for

pytestmark = pytest.mark.engine

STACK = "takeover"
REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"
API_PORTS = (7007, 9009, 6006)
"""Where the compose deployment serves, and the plan's services after it."""
PULL_TAG = "engine-pull"


@dataclass(frozen=True)
class GatedImage:
    """An image the host does not have, in the loopback registry, reached through a gate."""

    image: str
    """The reference the stack deploys: the gate's address, the repository, the tag."""
    gate: BlobGate
    layer: str
    """The blob digest of the one layer the host lacks."""
    config: str
    """The digest of the image's config: the image's ID once pulled."""


@pytest.fixture
def project(engine_host: SimHost, engine_env, tmp_path_factory: pytest.TempPathFactory):
    values = sim_stack_values(engine_host)
    boot = [p for p in (BOOT_SCRIPT, UNIT_PATH, ORDER_BOOT_SCRIPT, ORDER_UNIT_PATH) if not Path(p).exists()]
    for service in values["services"]:
        engine_host.make_model(service["model"])
    project = Project.create(tmp_path_factory.mktemp("takeover"), STACK, values, engine_env)
    try:
        yield project
    finally:
        project.cli("destroy", "--stack", project.stack, "--yes", check=False)
        engine_host.reset()
        for path in boot:
            Path(path).unlink(missing_ok=True)


@pytest.fixture
def gated_image(registry: LocalRegistry, engine_host: SimHost) -> Iterator[GatedImage]:
    published_image(registry, PULL_TAG)
    gate = BlobGate(("127.0.0.1", 0), ("127.0.0.1", registry.port))
    manifest = registry.manifest(PULL_TAG)
    image = f"127.0.0.1:{gate.port}/{REPOSITORY}:{PULL_TAG}"
    gated = GatedImage(image, gate, layer=manifest["layers"][-1]["digest"], config=manifest["config"]["digest"])
    try:
        yield gated
    finally:
        gate.close()
        engine_host.local_docker("image", "rm", gated.image, check=False)


def assert_taken_over(up: Outcome, host: SimHost) -> None:
    """`up` ran the check and the takeover and created every planned container; the takeover started
    only once every image of the host was there (each image's step done first, components/ascend_host.py);
    the new containers are healthy, the old ones stopped with restart policy `no`."""
    created = {urn_name(u) for u in up.urns("create", type_=None)}
    assert {"npu-a-check", "npu-a-takeover", *(f"{n}-container" for n in PLANNED)} <= created, up.explain()
    started, done = up.positions("resourcePreEvent"), up.positions("resOutputsEvent")
    [takeover] = [u for u in started if urn_name(u) == "npu-a-takeover"]
    images = [u for u in done if urn_type(u) == REMOTE_IMAGE]
    assert images and all(done[i] < started[takeover] for i in images), up.explain()
    for name in PLANNED:
        host.wait_healthy(name, timeout=180)
    assert [restart_policy(host, n) for n in OLD] == [(False, "no"), (False, "no")]


def test_the_first_pulumi_up_takes_over_the_compose_deployment_and_the_way_back_works(project, engine_host):
    host = engine_host
    start_the_compose_deployment(host, "/disk2/bge-m3", "/disk2/Qwen3.6-27B-w8a8")

    assert_taken_over(project.run("up"), host)

    steps = preview_steps(project.preview_json())
    assert set(steps.values()) == {"same"}, {urn_name(u): op for u, op in steps.items() if op != "same"}

    project.run("destroy")
    assert [restart_policy(host, n) for n in OLD] == [(False, "no"), (False, "no")], "destroy re-enables nothing"
    host.local_docker("update", "--restart=always", *OLD)
    host.local_docker("start", *OLD)
    for port in API_PORTS:
        serving(host, port)


def test_an_image_the_host_lacks_is_pulled_while_the_old_containers_serve_untouched_and_the_takeover_waits(
    gated_image, project, engine_host
):
    # gated_image comes first, so it is torn down last: after `destroy` removed the containers that use the image.
    host, gate = engine_host, gated_image.gate
    start_the_compose_deployment(host, "/disk2/bge-m3", "/disk2/Qwen3.6-27B-w8a8")
    project.edit(lambda values: values["defaults"].update(image=gated_image.image))
    log = project.event_log("up")
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(project.run, "up")
        try:
            # The layer the host lacks is requested whatever else the pull waits for: dockerd fetches the
            # config and the layers side by side (moby/moby distribution/pull_v2.go, `pullSchema2`, v20.10).
            layer = gated_image.layer
            wait_for("the image's own layer held at the gate", lambda: layer in gate.held or running.done(), every=0.2)
            assert layer in gate.held, f"`pulumi up` ended without downloading the image's layer:\n{running.result().explain()}"
            # The pull is under way and cannot finish: the old deployment is as compose left it.
            during_pull = {n: restart_policy(host, n) for n in OLD}
            assert during_pull == dict.fromkeys(OLD, (True, "always")), f"(running, restart) while pulling: {during_pull}"
            for port in API_PORTS:
                serving(host, port)
            started = steps_started(log)
            assert f"npu-a-{gated_image.image}" in started and "npu-a-takeover" not in started, sorted(started)
            made = set(PLANNED) & set(host.local_docker("ps", "-a", "--format", "{{.Names}}").stdout.split())
            assert not made, f"containers created while pulling: {made}"
        finally:
            gate.open()
        up = running.result()

    assert_taken_over(up, host)
    assert {name: inspect(host, name)["Image"] for name in PLANNED} == dict.fromkeys(PLANNED, gated_image.config)
    for port in API_PORTS:
        serving(host, port)
