"""doctor against the simulated 910B host: real sshd, real dockerd, real npu-sim containers.

The planned containers are started with the `docker run` arguments that
views/exports/render.py builds from the deployment's container specs, so what runs is what the plan says;
doctor then has to find it clean, and find each problem made by hand after. They are started by the
image's name, as the render script does, or by its ID, as the docker provider does (the program
hands it `RemoteImage.image_id`, components/model_service.py, and dockerd keeps that as `Config.Image`).
"""

from __future__ import annotations

import dataclasses
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from cli.stackfile import load_fleet
from ops import doctor
from sim.host import CLAIMS_DIR, DCMI_DIR, IMAGE, SimHost, free_port
from tests.simhost.probes import probed_often
from tests.support.sim_stacks import run_args
from tests.support.pipeline import deployment_of
from tests.support.rolling import derived_image

pytestmark = pytest.mark.simhost

# Names no other simulated-host test uses, so leftovers are easy to tell apart.
EMBED, VL, LONG, INTRUDER = "doc-embed", "doc-vl", "doc-long", "doc-intruder"
UNREACHABLE = "192.0.2.1"  # TEST-NET-1: nothing there (refused or timed out, depending on the network)
SILENT = "127.0.0.2"  # another loopback address: one address is one machine to the planner


def write_stack(tmp_path: Path, sim: SimHost, models: dict[str, Path], *, silent_port: int | None = None) -> Path:
    """The stack file; with `silent_port`, two more hosts: one at an unroutable address and one
    whose port accepts connections but never says a word (ssh waits for ConnectTimeout there)."""
    hosts: list[dict[str, Any]] = [{"name": "sim", "address": sim.address, "sshPort": sim.ssh_port}]
    if silent_port is not None:
        hosts.append({"name": "gone", "address": UNREACHABLE})
        hosts.append({"name": "silent", "address": SILENT, "sshPort": silent_port})
    api = {name: free_port() for name in (EMBED, VL, LONG)}
    values = {
        "ascend-fleet:hosts": hosts,
        "ascend-fleet:ssh": {
            "identityFile": str(sim.identity_file),
            "knownHostsFile": str(sim.known_hosts_file),
            "connectTimeoutSeconds": 2,
        },
        "ascend-fleet:defaults": {
            "image": IMAGE,
            "startTimeoutSeconds": 60,
            "shmSizeMiB": 64,
            "env": {"NPU_SIM_LOAD_SECONDS": "1"},
            "mounts": [{"source": str(CLAIMS_DIR), "target": str(CLAIMS_DIR), "readOnly": False}],
        },
        "ascend-fleet:services": [
            {"name": EMBED, "host": "sim", "model": str(models[EMBED]), "memoryFraction": 0.1,
             "devices": [0], "apiPort": api[EMBED]},
            {"name": VL, "host": "sim", "model": str(models[VL]), "tensorParallelSize": 2,
             "memoryFraction": 0.5, "devices": [0, 1], "apiPort": api[VL]},
            {"name": LONG, "host": "sim", "model": str(models[VL]), "tensorParallelSize": 2,
             "memoryFraction": 0.9, "devices": [4, 5], "apiPort": api[LONG]},
        ],
    }  # fmt: skip
    path = tmp_path / "Pulumi.doctor-e2e.yaml"
    path.write_text(json.dumps({"config": values}, indent=2))  # JSON is YAML
    return path


def probed_deployment(config: Path):
    """The deployment of the stack file, each container's health probed as `run_args` starts it: doctor
    compares the health check too, and the containers here are probed every second."""
    fleet, _ = load_fleet(config=str(config))
    deployment = deployment_of(fleet)
    hosts = tuple(
        dataclasses.replace(hd, services=tuple(dataclasses.replace(sd, spec=probed_often(sd.spec)) for sd in hd.services))
        for hd in deployment.hosts
    )
    return dataclasses.replace(deployment, hosts=hosts)


def doctor_json(config: Path) -> tuple[dict[str, Any], int, float]:
    deployment = probed_deployment(config)
    start = time.monotonic()
    text, code = doctor.run(deployment, "json")
    return json.loads(text), code, time.monotonic() - start


def findings_of(report: dict[str, Any], host: str) -> list[dict[str, Any]]:
    return next(h for h in report["hosts"] if h["name"] == host)["findings"]


def image_id(sim: SimHost, image: str) -> str:
    return sim.docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()


@pytest.fixture
def deployed(sim_host: SimHost, tmp_path: Path):
    """The stack's three planned containers running healthy on the simulated host, created by name."""
    return deploy(sim_host, tmp_path)


def deploy(sim_host: SimHost, tmp_path: Path, image: str | None = None):
    """The stack's three planned containers running healthy on the simulated host, created from
    `image` if given, else by the plan's image name."""
    models = {EMBED: sim_host.make_model("doc-bge-m3"), VL: sim_host.make_model("doc-qwen")}
    config = write_stack(tmp_path, sim_host, models)
    fleet, _ = load_fleet(config=str(config))
    deployment = deployment_of(fleet)
    assert deployment.hosts[0].shared_cards == (0,)
    sim_host.set_device_share(0)  # what the deployment's device-share command does first
    specs = {sd.name: sd.spec for sd in deployment.services()}
    # doc-long on cards of its own beside doc-embed; doc-vl after doc-embed on the shared card.
    for started in ((LONG, EMBED), (VL,)):
        for name in started:
            sim_host.docker(*run_args(sim_host, specs[name], image=image))
        for name in started:
            sim_host.wait_healthy(name, timeout=60)
    return config, specs, models


def test_doctor_finds_the_running_plan_clean_then_reports_each_hand_made_problem_by_kind_and_name(
    sim_host: SimHost, deployed, tmp_path: Path
) -> None:
    """One deployment for both halves: starting the three containers is most of the time."""
    config, specs, models = deployed

    report, code, _ = doctor_json(config)
    assert report["hosts"][0]["reachable"] is True
    assert findings_of(report, "sim") == []
    assert (code, report["ok"]) == (0, True)
    # ...and it did look: npu-smi shows the ranks that doctor matched to their containers.
    screen = sim_host.npu_smi("info")
    assert screen.count("python3") == 5  # doc-embed 1, doc-vl 2, doc-long 2

    embed_range = specs[EMBED].env["HCCL_NPU_SOCKET_PORT_RANGE"]
    first = int(embed_range.split("-")[0])

    # 1. a planned container stopped by hand
    sim_host.docker("stop", LONG)
    # 2. an unmanaged npu-sim container on planned card 0, its HCCL range overlapping doc-embed's
    intruder_range = f"{first}-{first + 4}"
    sim_host.start_service(
        INTRUDER, model=models[EMBED], cards=[0], port=7999, publish=False, gpu_memory_utilization=0.2,
        env={"HCCL_NPU_SOCKET_PORT_RANGE": intruder_range},
    )  # fmt: skip
    sim_host.wait_healthy(INTRUDER)
    # 3. a planned container recreated by hand with the same name and another HCCL range
    planned_vl = specs[VL].env["HCCL_NPU_SOCKET_PORT_RANGE"]
    vl_first = int(planned_vl.split("-")[0])
    live_vl = f"{vl_first}-{vl_first + 4}"
    # ...and its model folder mounted from another path (`docker run -v`, as an engineer would)
    model = next(m for m in specs[VL].mounts if m.target == str(models[VL]))
    other = sim_host.make_model("doc-qwen-copy")
    sim_host.docker("rm", "-f", VL)
    volume = (f"--volume={model.source}:{model.target}:ro", f"--volume={other}:{model.target}:ro")
    sim_host.docker(*run_args(sim_host, specs[VL], env={"HCCL_NPU_SOCKET_PORT_RANGE": live_vl}, volume=volume))
    sim_host.wait_healthy(VL)
    # 4. two more hosts that never answer: one refuses or drops, one accepts and stays silent
    silent = socket.socket()
    silent.bind((SILENT, 0))
    silent.listen(8)  # the kernel completes the handshake; nobody ever sends an SSH banner
    config = write_stack(tmp_path, sim_host, models, silent_port=silent.getsockname()[1])
    # keep the API ports of the deployed containers: rewrite them into the new config
    values = json.loads(config.read_text())
    for service in values["config"]["ascend-fleet:services"]:
        service["apiPort"] = specs[service["name"]].api_port
    config.write_text(json.dumps(values, indent=2))
    # 5. the dcmi folder every container bind-mounts, moved away (the running ones keep their mount)
    away = DCMI_DIR.rename(DCMI_DIR.with_name("dcmi.doctor-e2e"))

    try:
        report, code, seconds = doctor_json(config)
    finally:
        silent.close()
        away.rename(DCMI_DIR)

    assert (code, report["ok"]) == (1, False)
    found = findings_of(report, "sim")
    got = sorted((f["kind"], f["service"], f.get("container"), f.get("key")) for f in found)
    assert got == sorted(
        [
            ("stopped", LONG, LONG, None),
            ("drift", VL, VL, "env HCCL_NPU_SOCKET_PORT_RANGE"),
            ("drift", VL, VL, "mounts"),
            ("foreign-card", EMBED, INTRUDER, None),
            ("foreign-port", EMBED, INTRUDER, "hcclNpuSocketPortRange"),
            ("host", None, None, None),
        ]
    ), json.dumps(found, indent=2)
    by_kind = {f["kind"]: f for f in found}
    drifts = {f["key"]: f["message"] for f in found if f["kind"] == "drift"}
    assert drifts["env HCCL_NPU_SOCKET_PORT_RANGE"].endswith(
        f"env HCCL_NPU_SOCKET_PORT_RANGE: {planned_vl} (plan) != {live_vl} (live)"
    )
    assert f"extra {other}:{model.target}:ro" in drifts["mounts"] and f"lacking {model.source}:{model.target}:ro" in drifts["mounts"]
    assert by_kind["foreign-card"]["card"] == 0
    assert intruder_range in by_kind["foreign-port"]["message"] and embed_range in by_kind["foreign-port"]["message"]
    assert "exited" in by_kind["stopped"]["message"]
    assert by_kind["host"]["message"] == f"host sim: missing Ascend driver path {DCMI_DIR}"

    for name, where in (("gone", UNREACHABLE), ("silent", SILENT)):
        host = next(h for h in report["hosts"] if h["name"] == name)
        assert host["reachable"] is False
        assert [f["kind"] for f in host["findings"]] == ["unreachable"]
        assert where in host["findings"][0]["message"]
    assert "timed out" in findings_of(report, "silent")[0]["message"]
    # Hosts are checked in parallel and the silent one costs ConnectTimeout (2 s), not minutes: without
    # it, ssh waits out the kernel's SYN retries (about 127 s on Linux). The bound is generous for a
    # loaded machine; "timed out" above says which path was taken.
    assert 2 <= seconds < 100, f"doctor took {seconds:.1f}s with unreachable hosts"
    print(f"doctor with two unreachable hosts took {seconds:.2f}s")


def test_containers_created_by_the_planned_images_id_as_the_provider_creates_them_are_clean_and_another_id_is_drift(
    sim_host: SimHost, tmp_path: Path
) -> None:
    planned = image_id(sim_host, IMAGE)
    config, specs, _ = deploy(sim_host, tmp_path, image=planned)
    assert sim_host.docker("inspect", "--format", "{{.Config.Image}}", EMBED).stdout.strip() == planned

    report, code, _ = doctor_json(config)
    assert (findings_of(report, "sim"), code) == ([], 0)

    # doc-long re-created from another release of the image: another ID.
    other = image_id(sim_host, derived_image("ascend-fleet/npu-sim:doctor-e2e-other"))
    sim_host.docker("rm", "-f", LONG)
    sim_host.docker(*run_args(sim_host, specs[LONG], image=other))
    sim_host.wait_healthy(LONG)
    report, code, _ = doctor_json(config)
    [found] = findings_of(report, "sim")
    assert (found["kind"], found["service"], found["key"], code) == ("drift", LONG, "image", 1)
    assert found["message"] == f"container {LONG}: image: {IMAGE} = {planned} (plan) != {other} (live)"
