"""A compose deployment as it ran before ascend-fleet, on the simulated host: the containers the
takeover tests (simulated-host and engine) replace, and how to tell they serve."""

from __future__ import annotations

import json

from sim.ascend_files import CLAIMS_DIR, CONTROL_DEVICES, DCMI_DIR, DRIVER_DIR, INSTALL_INFO, NPU_SMI
from sim.host import IMAGE, SimHost

OLD = ("model-emb-vl", "model-text")
PLANNED = ("bge-m3", "qwen-long", "qwen-vl")
COMPOSE_IMAGE = "quay.io/ascend/vllm-ascend:v0.20.2rc1"
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


