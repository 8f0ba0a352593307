"""The real engine's first `pulumi up` of prod on a host that runs the original compose deployment.

The two old containers run as compose had them (tests/simhost/test_takeover.py starts them). The
engine must run the host check, then the takeover, and only then anything that needs their cards or
ports; the old containers end with restart policy `no`, stopped and kept; a second preview changes
nothing; after `pulumi destroy` the two commands of docs/moving-from-compose.md bring the old deployment back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from records.card_order import BOOT_SCRIPT as ORDER_BOOT_SCRIPT, UNIT_PATH as ORDER_UNIT_PATH
from records.device_share import BOOT_SCRIPT, UNIT_PATH
from sim.host import SimHost
from tests.engine.engine import Project, preview_steps, urn_name, urn_type
from tests.engine.engine import sim_stack_values
from tests.support.takeover import OLD, PLANNED, restart_policy, serving, start_the_compose_deployment

pytestmark = pytest.mark.engine

STACK = "takeover"
REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"


@pytest.fixture(scope="module")
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


def test_the_first_pulumi_up_takes_over_the_compose_deployment_and_the_way_back_works(project, engine_host):
    host = engine_host
    start_the_compose_deployment(host, "/disk2/bge-m3", "/disk2/Qwen3.6-27B-w8a8")

    up = project.run("up")
    created = {urn_name(u) for u in up.urns("create", type_=None)}
    assert {"npu-a-check", "npu-a-takeover", *(f"{n}-container" for n in PLANNED)} <= created, up.explain()
    # The old containers are stopped only once every image of the host is there: the engine finished
    # each image's step before it started the takeover's (components/ascend_host.py).
    started, done = up.positions("resourcePreEvent"), up.positions("resOutputsEvent")
    [takeover] = [u for u in started if urn_name(u) == "npu-a-takeover"]
    images = [u for u in done if urn_type(u) == REMOTE_IMAGE]
    assert images and all(done[i] < started[takeover] for i in images), up.explain()
    for name in PLANNED:
        host.wait_healthy(name, timeout=180)
    assert [restart_policy(host, n) for n in OLD] == [(False, "no"), (False, "no")]

    steps = preview_steps(project.preview_json())
    assert set(steps.values()) == {"same"}, {urn_name(u): op for u, op in steps.items() if op != "same"}

    project.run("destroy")
    assert [restart_policy(host, n) for n in OLD] == [(False, "no"), (False, "no")], "destroy re-enables nothing"
    host.local_docker("update", "--restart=always", *OLD)
    host.local_docker("start", *OLD)
    for port in (7007, 9009, 6006):
        serving(host, port)
