"""Day zero on prod's host, for real: the original compose deployment runs, the program's own steps
take over from it, a reboot brings back exactly the plan, `doctor` sees an old container re-enabled,
and the way back of docs/moving-from-compose.md works.

The original deployment's two containers run as its compose file had them (DOMAIN.md): restart
`always`, every `/dev/davinciN`, ports 7007, 9009 and 6006, `model-emb-vl` serving bge-m3 and qwen-vl,
`model-text` qwen-long, from the simulated vLLM image under the original image's tag. They are
privileged where this machine's dockerd can start privileged containers; here it often cannot (a
sandboxed daemon cannot grant every capability), and every card passed in as a device holds the
cards the same way. The host check runs over SSH; then `render --format docker-run`'s script, the
program's steps in `pulumi up`'s order (takeover, device-share, start order, containers). The reboot
is dockerd's own rules (`SimHost.reboot_with`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from allocation.planner import plan_fleet
from cli.stackfile import load_fleet
from records.deployment import deploy
from sim.ascend_files import CLAIMS_DIR, CONTROL_DEVICES, DCMI_DIR, DRIVER_DIR, INSTALL_INFO, NPU_SMI
from sim.host import IMAGE, SimHost
from tests.simhost.test_prod_layout import prod_on_the_simulated_host

REPO = Path(__file__).resolve().parents[2]
COMPOSE_IMAGE = "quay.io/ascend/vllm-ascend:v0.20.2rc1"
OLD = ("model-emb-vl", "model-text")
PLANNED = ("bge-m3", "qwen-long", "qwen-vl")
# The seed's commands (DOMAIN.md), each server on its own HCCL range as the hand fix had them.
EMB_VL = (
    "ASCEND_RT_VISIBLE_DEVICES=0 HCCL_NPU_SOCKET_PORT_RANGE=16666-16676 vllm serve {bge} --served-model-name bge-m3 "
    "--port 7007 --gpu-memory-utilization 0.1 & sleep 3; ASCEND_RT_VISIBLE_DEVICES=0,1,2,3 "
    "HCCL_NPU_SOCKET_PORT_RANGE=16677-16687 exec vllm serve {qwen} --served-model-name qwen-vl --port 9009 "
    "--tensor-parallel-size 4 --gpu-memory-utilization 0.85"
)
TEXT = (
    "ASCEND_RT_VISIBLE_DEVICES=4,5,6,7 HCCL_NPU_SOCKET_PORT_RANGE=16688-16698 exec vllm serve {qwen} "
    "--served-model-name qwen-long --port 6006 --tensor-parallel-size 4 --gpu-memory-utilization 0.9"
)


def start_the_compose_deployment(sim: SimHost, bge: str, qwen: str) -> None:
    sim.local_docker("tag", IMAGE, COMPOSE_IMAGE)
    common = ["run", "-d", "--restart", "always", "-e", "NPU_SIM_LOAD_SECONDS=1"]
    common += [f"--label={k}={v}" for k, v in sim.labels().items()]
    common += ["--privileged"] if sim.privileged_containers_run() else []
    common += [a for card in range(8) for a in ("--device", f"/dev/davinci{card}")]
    common += [a for device in CONTROL_DEVICES for a in ("--device", device)]
    for path in (DRIVER_DIR, DCMI_DIR, NPU_SMI, INSTALL_INFO, bge, qwen):
        common += ["-v", f"{path}:{path}:ro"]
    common += ["-v", f"{CLAIMS_DIR}:{CLAIMS_DIR}"]
    emb = [*common, "--name", "model-emb-vl", "-p", "7007:7007", "-p", "9009:9009"]
    sim.local_docker(*emb, COMPOSE_IMAGE, "sh", "-c", EMB_VL.format(bge=bge, qwen=qwen))
    sim.local_docker(*common, "--name", "model-text", "-p", "6006:6006", COMPOSE_IMAGE, "sh", "-c", TEXT.format(qwen=qwen))
    for port in (7007, 9009, 6006):
        serving(sim, port)


def serving(sim: SimHost, port: int, timeout: float = 90) -> None:
    """Wait until the host answers /v1/models on `port`; the host's own view on failure."""
    wait = f"for i in $(seq {int(timeout)}); do wget -q -O - http://127.0.0.1:{port}/v1/models && exit 0; sleep 1; done; exit 1"
    result = sim.run(wait, check=False, timeout=timeout + 30)
    ps = sim.local_docker("ps", "-a", "--format", "{{.Names}} {{.Status}}").stdout
    assert result.returncode == 0, f"nothing serves on {port} after {timeout}s; containers:\n{ps}"


def restart_policy(sim: SimHost, name: str) -> tuple[bool, str]:
    info = json.loads(sim.local_docker("inspect", "--format", "{{json .}}", name).stdout)
    return info["State"]["Running"], info["HostConfig"]["RestartPolicy"]["Name"]


def doctor(config: Path) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "allocation", "doctor", "--config", str(config)]
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_prod_takes_over_the_compose_deployment_a_reboot_brings_back_the_plan_and_the_way_back_works(
    sim_host: SimHost, tmp_path: Path, boot_files
) -> None:
    config = prod_on_the_simulated_host(sim_host, tmp_path)
    fleet, _ = load_fleet(config=str(config))
    deployment = deploy(plan_fleet(fleet))
    [hd] = [h for h in deployment.hosts if h.in_use]
    models = sorted({sd.plan.service.model for sd in hd.services})
    for model in models:
        sim_host.make_model(model)
    start_the_compose_deployment(sim_host, "/disk2/bge-m3", "/disk2/Qwen3.6-27B-w8a8")

    # Without `replaces` the host check refuses the old containers, with a way out a reboot keeps.
    assert hd.host.replaces == list(OLD)
    unnamed = deploy(plan_fleet(fleet.model_copy(update={"hosts": [hd.host.model_copy(update={"replaces": []})]})))
    refused = sim_host.run(unnamed.hosts[0].check_script, check=False, timeout=120)
    assert refused.returncode == 1
    assert "container model-text outside the plan (running, restart always) holds" in refused.stderr
    assert "docker update --restart=no model-emb-vl && docker stop model-emb-vl" in refused.stderr
    checked = sim_host.run(hd.check_script, check=False, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    script = subprocess.run(
        [sys.executable, "-m", "allocation", "render", "--config", str(config), "--format", "docker-run"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    # As rendered: probes every 2 s already (records.health), and doctor must find them as planned.
    started = subprocess.run(["sh", "-c", script], env=sim_host.docker_env(), capture_output=True, text=True)
    assert started.returncode == 0, started.stdout + started.stderr
    for name in PLANNED:
        sim_host.wait_healthy(name, timeout=120)
    assert [restart_policy(sim_host, n) for n in OLD] == [(False, "no"), (False, "no")]

    assert sim_host.reboot_with([*OLD, *PLANNED]) == sorted(PLANNED)
    for name in PLANNED:
        sim_host.wait_healthy(name, timeout=120)
    assert [restart_policy(sim_host, n)[0] for n in OLD] == [False, False]
    clean = doctor(config)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    sim_host.local_docker("update", "--restart=always", "model-text")  # re-enabled by hand
    found = doctor(config)
    assert found.returncode == 1
    assert "model-text" in found.stdout and "a reboot" in found.stdout, found.stdout

    # The way back (docs/moving-from-compose.md): the stack's containers go (pulumi destroy),
    # the old ones get their restart policy back and start.
    sim_host.local_docker("rm", "-f", *PLANNED)
    sim_host.local_docker("update", "--restart=always", *OLD)
    sim_host.local_docker("start", *OLD)
    for port in (7007, 9009, 6006):
        serving(sim_host, port)
