"""The real Pulumi engine and providers deploy the prod layout to the simulated 910B host.

One stack lives through the whole module, as a fleet does: `pulumi up`, a second preview
that must change nothing, a reboot of the host, drift made by hand and repaired, day-2 changes
of the stack file (each checked against what the plan diff says it re-creates), a model that
fails to load, and `pulumi destroy`. `doctor` finds nothing after the `up`, the reboot and each
day-2 change. The tests run in file order and each starts from the state the one
before left; each asserts on what the engine reported (its event log or `preview --json`)
and on the host itself (`docker inspect`, the simulator's NPU state, files on the host).

The stack is Pulumi.prod.yaml with what a simulated host must differ in swapped (its SSH
endpoint, the npu-sim image, the simulator's card-NIC folder) and shorter timeouts, so
that a failing start costs a minute. The health check probes every 2 s on the simulated
host's Docker 20.10 (records.health), so a start takes about its load.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from records.device_share import BOOT_SCRIPT, UNIT_PATH
from sim.host import IMAGE, SimHost
from tests.engine.engine import (
    CONTAINER,
    Outcome,
    Project,
    apply_and_preview,
    container_changes,
    preview_steps,
    urn_name,
    urn_type,
)
from tests.engine.engine import doctor_findings, get, health, inspect, plan_diff, plan_of, sim_stack_values, stack_has_resources
from tests.engine.engine import STACK
from tests.support.pulumi_harness import REMOTE_COMMAND

pytestmark = pytest.mark.engine

SERVICES = {"bge-m3": ([0], 7007), "qwen-vl": ([0, 1, 2, 3], 9009), "qwen-long": ([4, 5, 6, 7], 6006)}
FAILING_START_TIMEOUT = 60
DAY2_IMAGE = "ascend-fleet/npu-sim:engine-day2"
BROKEN_MODEL = "/srv/models/engine-half-copied"
STACK_LABEL = f"ascend-fleet.stack={STACK}"


@pytest.fixture(scope="module")
def host(engine_host: SimHost) -> SimHost:
    return engine_host


@pytest.fixture(scope="module")
def project(host: SimHost, engine_env, tmp_path_factory: pytest.TempPathFactory):
    """The stack, created empty; left destroyed (or torn down by hand if a test broke it)."""
    values = sim_stack_values(host)
    made_boot_files = [p for p in (BOOT_SCRIPT, UNIT_PATH) if not Path(p).exists()]
    for service in values["services"]:
        host.make_model(service["model"])
    project = Project.create(tmp_path_factory.mktemp("engine"), STACK, values, engine_env)
    try:
        yield project
    finally:
        if stack_has_resources(project):  # a test failed half-way: take down what the stack still holds
            project.cli("destroy", "--stack", project.stack, "--yes", check=False)
        host.reset()
        host.docker("image", "rm", "-f", DAY2_IMAGE, check=False)
        subprocess.run(["rm", "-rf", BROKEN_MODEL], check=False)
        for path in made_boot_files:
            Path(path).unlink(missing_ok=True)


def stack_containers(host: SimHost) -> set[str]:
    return set(host.docker("ps", "-a", "--filter", f"label={STACK_LABEL}", "--format", "{{.Names}}").stdout.split())


# --- 1. pulumi up -------------------------------------------------------------


def test_pulumi_up_of_the_prod_layout_starts_every_service_healthy_and_exports_the_documented_outputs(project, host):
    up = project.run("up")

    assert up.urns("create") == {u for u in up.ops if urn_type(u) == CONTAINER}
    assert {u.rsplit("::", 1)[1] for u in up.urns("create")} == {f"{s}-container" for s in SERVICES}
    for name, (cards, port) in SERVICES.items():
        assert health(host, name) == "healthy", host.logs(name)
        container = inspect(host, name)
        devices = [d["PathOnHost"] for d in container["HostConfig"]["Devices"]]
        assert sorted(d for d in devices if d.removeprefix("/dev/davinci").isdigit()) == [f"/dev/davinci{c}" for c in cards]
        status, body = get(f"http://127.0.0.1:{port}/v1/models")
        assert status == 200 and name.encode() in body
    # Card 0 is shared by bge-m3 and qwen-vl: in device-share mode, and again at every boot.
    assert host.device_shared_cards() == [0]
    assert Path(UNIT_PATH).exists() and Path(BOOT_SCRIPT).exists()

    outputs = project.outputs()
    planned = {s["name"]: s for h in plan_of(project, project.values())["hosts"] for s in h["services"]}
    assert set(outputs["services"]) == set(SERVICES)
    for name, (cards, port) in SERVICES.items():
        out = outputs["services"][name]
        assert out["endpoint"] == f"http://127.0.0.1:{port}/v1"
        assert out["host"] == "npu-a" and out["devices"] == cards
        assert out["hcclNpuSocketPortRange"] == "{}-{}".format(*planned[name]["hcclNpuSocketPortRange"])
        assert out["vllmPort"] == str(planned[name]["vllmPort"])
    assert outputs["plan"] == plan_of(project, project.values())


def test_doctor_finds_nothing_after_up(project):
    """The containers are created by image ID (components/model_service.py), which the provider keeps
    as Config.Image: doctor compares it with the ID the plan's image name has on the host."""
    assert doctor_findings(project) == []


# --- 2. a second preview --------------------------------------------------------


def test_a_second_preview_changes_nothing(project):
    doc = project.preview_json()
    assert {urn: op for urn, op in preview_steps(doc).items() if op != "same"} == {}
    assert set(doc["changeSummary"]) == {"same"}
    project.run("preview", "--expect-no-changes")


# --- 3. a reboot -------------------------------------------------------------------


def test_after_a_reboot_dockerd_brings_back_every_service_and_doctor_and_preview_find_nothing(project, host):
    """A real one: the host's dockerd killed with its containers and started again (sim/README.md)."""
    boot = host.reboot()
    assert boot.started == sorted(SERVICES)
    assert boot.device_share is not None and boot.device_share.returncode == 0, boot.device_share
    for name in SERVICES:
        host.wait_healthy(name, timeout=180)
    assert doctor_findings(project) == []
    assert set(preview_steps(project.preview_json()).values()) == {"same"}


# --- 4. drift by hand ------------------------------------------------------------


def test_a_container_stopped_by_hand_shows_as_drift_on_refresh_and_up_re_creates_it(project, host):
    host.docker("stop", "bge-m3")
    refresh = project.run("refresh")
    assert {urn_name(u): ops - {"refresh"} for u, ops in refresh.changed().items()} == {"bge-m3-container": {"update"}}
    # A stopped container reads back with must_run false and no published ports (the rule in
    # tests/support/provider_readback.py, `stored_after_stop`); ports re-create a container.
    assert {urn_name(u): d for u, d in refresh.diffs().items()} == {"bge-m3-container": {"mustRun", "ports"}}

    changes = container_changes(project.preview_json())
    assert changes.replaced == {"bge-m3"} and not (changes.created | changes.deleted | changes.updated)
    up = project.run("up")
    assert {urn_name(u) for u in up.changed()} == {"bge-m3-container"}
    assert health(host, "bge-m3") == "healthy"
    assert set(preview_steps(project.preview_json()).values()) == {"same"}


def test_a_container_removed_by_hand_shows_as_drift_on_refresh_and_up_creates_it_again(project, host):
    host.docker("rm", "-f", "qwen-long")
    refresh = project.run("refresh")
    assert set(map(urn_name, refresh.changed())) == {"qwen-long-container"}, refresh.explain()

    changes = container_changes(project.preview_json())
    assert changes.created == {"qwen-long"} and not (changes.updated | changes.deleted | changes.replaced)
    project.run("up")
    assert health(host, "qwen-long") == "healthy"
    assert set(preview_steps(project.preview_json()).values()) == {"same"}


# --- 5. day-2 changes -------------------------------------------------------------


def day2(project: Project, host: SimHost, change) -> Outcome:
    """Edit the stack, and check that the engine would re-create exactly the containers the plan
    diff names, then that `pulumi up` did so and left every container of the stack healthy. The `up`."""
    old_values, changes = apply_and_preview(project, change)
    new_plan = plan_of(project, project.values())
    added, removed, recreated, in_place = plan_diff(plan_of(project, old_values), new_plan)
    engine = (changes.created, changes.deleted, changes.replaced, changes.updated)
    assert engine == (added, removed, recreated, in_place)
    up = project.run("up")
    assert {u.rsplit("::", 1)[1].removesuffix("-container") for u in up.urns("create-replacement")} == recreated
    assert {u.rsplit("::", 1)[1].removesuffix("-container") for u in up.urns("create")} == added
    names = {s["container"]["name"] for h in new_plan["hosts"] for s in h["services"]}
    assert stack_containers(host) == names
    for name in names:
        assert health(host, name) == "healthy", host.logs(name)
    assert doctor_findings(project) == []
    return up


def test_removing_a_service_deletes_exactly_its_container(project, host):
    """The host's check and device-share scripts change with it (the check counts the services). They
    have a `create` and no `update` (components.ascend_host.script): pulumi-command runs the new
    `create` as the update, and nothing is replaced, so no old `delete` runs."""
    up = day2(project, host, lambda v: v.update(services=[s for s in v["services"] if s["name"] != "qwen-long"]))
    scripts = {urn_name(u): ops for u, ops in up.changed().items() if urn_type(u) == REMOTE_COMMAND}
    assert scripts == {"npu-a-check": {"update"}, "npu-a-device-share": {"update"}}, up.explain()
    state = json.loads(project.cli("stack", "export", "--stack", project.stack).stdout)
    [check] = [r for r in state["deployment"]["resources"] if r["urn"].endswith("::npu-a-check")]
    assert "update" not in check["inputs"]
    assert "ready for 2 service(s)" in check["outputs"]["stdout"], check["outputs"]["stdout"]


def test_adding_a_service_creates_exactly_its_container(project, host):
    qwen_long = next(s for s in sim_stack_values(host)["services"] if s["name"] == "qwen-long")
    day2(project, host, lambda v: v["services"].append(qwen_long))


def test_a_new_image_for_one_service_re_creates_exactly_that_container(project, host):
    # A different image id (a tag of the same id would restart nothing): one label more.
    build = subprocess.run(
        ["docker", "build", "-q", "-t", DAY2_IMAGE, "-"], input=f"FROM {IMAGE}\nLABEL ascend-fleet.engine-test=day2\n",
        capture_output=True, text=True, env=host.docker_env(), timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr

    def bge_on_the_new_image(values):
        next(s for s in values["services"] if s["name"] == "bge-m3")["image"] = DAY2_IMAGE

    day2(project, host, bge_on_the_new_image)
    assert inspect(host, "bge-m3")["Config"]["Image"].startswith("sha256:")
    assert inspect(host, "bge-m3")["Config"]["Labels"]["ascend-fleet.engine-test"] == "day2"


def test_a_defaults_change_re_creates_every_container_it_reaches(project, host):
    day2(project, host, lambda v: v["defaults"].setdefault("env", {}).update(VLLM_LOGGING_LEVEL="DEBUG"))


def test_renaming_a_service_with_previous_names_re_creates_nothing_and_keeps_its_container(project, host):
    """The example of docs/promotion.md: qwen-vl becomes qwen-vision; its container keeps the name qwen-vl."""

    def renamed(values):
        svc = next(s for s in values["services"] if s["name"] == "qwen-vl")
        svc.update(name="qwen-vision", previousNames=["qwen-vl"])

    before = inspect(host, "qwen-vl")["Id"]
    day2(project, host, renamed)
    assert inspect(host, "qwen-vl")["Id"] == before


# --- 6. a model that fails to load --------------------------------------------------


def test_a_model_that_fails_to_load_fails_up_within_its_start_timeout_and_leaves_the_others_running(project, host):
    Path(BROKEN_MODEL).mkdir(parents=True, exist_ok=True)  # a half-copied model: no config.json

    def qwen_long_broken(values):
        svc = next(s for s in values["services"] if s["name"] == "qwen-long")
        svc.update(model=BROKEN_MODEL, startTimeoutSeconds=FAILING_START_TIMEOUT)

    project.edit(qwen_long_broken)
    up = project.run("up", expect_success=False)

    errors = "\n".join(up.diagnostics("error"))
    # The provider's whole message (terraform-provider-docker resource_docker_container_funcs.go:614-621).
    assert "container failed to be in healthy state" in errors, up.explain()
    assert "qwen-long-container" in errors
    # vLLM's own error, from the container's log (the error hook, components/model_service.py).
    assert "container qwen-long failed" in errors and "its last 20 log lines" in errors
    assert "OSError: /srv/models/engine-half-copied does not appear to have a file named config.json" in errors
    # Bounded by the start timeout plus the provider's create margin, not by the default 1800 s.
    assert up.seconds < FAILING_START_TIMEOUT + 300
    for name in ("bge-m3", "qwen-vl"):
        assert health(host, name) == "healthy"


def test_up_with_the_model_repaired_replaces_the_failed_container(project, host):
    def qwen_long_repaired(values):
        svc = next(s for s in values["services"] if s["name"] == "qwen-long")
        svc["model"] = next(s for s in sim_stack_values(host)["services"] if s["name"] == "qwen-long")["model"]
        del svc["startTimeoutSeconds"]

    project.edit(qwen_long_repaired)
    project.run("up")
    assert health(host, "qwen-long") == "healthy"
    assert set(preview_steps(project.preview_json()).values()) == {"same"}


# --- 7. pulumi destroy -----------------------------------------------------------------


def test_destroy_leaves_no_container_and_no_device_share_boot_unit(project, host):
    services = {s["name"] for s in project.values()["services"]}
    destroy = project.run("destroy")
    assert {urn_name(u) for u in destroy.urns("delete")} == {f"{s}-container" for s in services}
    assert stack_containers(host) == set()
    assert not Path(UNIT_PATH).exists() and not Path(BOOT_SCRIPT).exists()
    # The card keeps its mode until the next reboot (records.device_share.removal_script).
    assert host.device_shared_cards() == [0]
