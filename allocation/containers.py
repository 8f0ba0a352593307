"""container_spec: the one mapping from a planned service to the container that runs it.

The Pulumi component, the compose/docker-run exporters and `doctor` all take
their container from here, so what is deployed, exported and checked cannot
drift apart. Pure: no Pulumi, no Docker, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from allocation.config import DEFAULT_IMAGE, FleetConfig, Mount
from allocation.plan import PlannedService

LABEL_PREFIX = "ascend-fleet"
DEFAULT_SHM_SIZE_MIB = 10486  # the seed's shm_size: 10.24gb
DEFAULT_START_TIMEOUT_SECONDS = 1800
# The seed's tuning; defaults' and services' env override it.
TUNING_ENV = {
    "HCCL_BUFFSIZE": "512",
    "OMP_PROC_BIND": "false",
    "OMP_NUM_THREADS": "1",
    "TASK_QUEUE_ENABLE": "1",
    "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
}
CONTROL_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
DRIVER_DIR = "/usr/local/Ascend/driver"
DRIVER_MOUNTS = (
    DRIVER_DIR,
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
    "/etc/ascend_install.info",
)
LOG_OPTS = MappingProxyType({"max-size": "100m", "max-file": "5"})


@dataclass(frozen=True)
class HealthCheck:
    test: tuple[str, ...]
    interval_seconds: int
    timeout_seconds: int
    start_period_seconds: int
    retries: int


@dataclass(frozen=True)
class ContainerSpec:
    """Everything Docker needs to run one service, in Docker's own terms."""

    name: str
    host: str
    image: str
    command: tuple[str, ...]
    env: Mapping[str, str]
    devices: tuple[str, ...]
    """Host device paths, mounted at the same path in the container."""
    mounts: tuple[Mount, ...]
    api_port: int
    """Published on the host at the same number."""
    labels: Mapping[str, str]
    healthcheck: HealthCheck
    privileged: bool
    restart: str
    shm_size_mib: int
    start_timeout_seconds: int
    """How long a deployment waits for the container to turn healthy."""
    ipc_mode: str = "host"
    log_driver: str = "json-file"
    log_opts: Mapping[str, str] = field(default_factory=lambda: LOG_OPTS)


def _span(span: tuple[int, int] | None) -> str:
    return f"{span[0]}-{span[1]}" if span else ""


def container_spec(fleet: FleetConfig, planned: PlannedService) -> ContainerSpec:
    s, a, d = planned.service, planned.assignment, fleet.defaults
    host = fleet.host(a.host)
    all_devices = bool(s.all_devices if s.all_devices is not None else d.all_devices)
    tp = s.tensor_parallel_size

    command = ["vllm", "serve", s.model, "--served-model-name", s.served_model_name or s.name]
    command += ["--host", "0.0.0.0", "--port", str(a.api_port), "--tensor-parallel-size", str(tp)]
    command += ["--gpu-memory-utilization", str(s.memory_fraction)]
    if s.max_model_len is not None:
        command += ["--max-model-len", str(s.max_model_len)]
    if s.max_num_seqs is not None:
        command += ["--max-num-seqs", str(s.max_num_seqs)]
    command += [*(d.args or ()), *(s.args or ())]

    env = dict(TUNING_ENV)
    if tp > 1:
        env["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
    env.update(d.env or {})
    env.update(s.env or {})
    # With only its own /dev/davinciN mounted, the runtime numbers a container's
    # cards from 0; in all-devices mode every card is visible under its physical index.
    visible = a.devices if all_devices else range(tp)
    env["ASCEND_RT_VISIBLE_DEVICES"] = ",".join(map(str, visible))
    if a.hccl_npu_socket_port_range:
        env["HCCL_NPU_SOCKET_PORT_RANGE"] = _span(a.hccl_npu_socket_port_range)
    if a.hccl_host_socket_port_range:
        env["HCCL_HOST_SOCKET_PORT_RANGE"] = _span(a.hccl_host_socket_port_range)
    env["HCCL_IF_BASE_PORT"] = str(a.hccl_if_base_port)
    env["VLLM_PORT"] = str(a.vllm_port)

    cards = range(host.npus) if all_devices else a.devices
    devices = tuple(f"/dev/davinci{c}" for c in cards) + CONTROL_DEVICES
    mounts = tuple(Mount(source=p, target=p) for p in DRIVER_MOUNTS)
    mounts += (Mount(source=s.model, target=s.model),)
    mounts += tuple(d.mounts or ()) + tuple(s.mounts or ())

    labels = {
        f"{LABEL_PREFIX}.stack": fleet.stack,
        f"{LABEL_PREFIX}.service": s.name,
        f"{LABEL_PREFIX}.host": a.host,
        f"{LABEL_PREFIX}.devices": ",".join(map(str, a.devices)),
        f"{LABEL_PREFIX}.api-port": str(a.api_port),
        f"{LABEL_PREFIX}.hccl-npu-socket-port-range": _span(a.hccl_npu_socket_port_range),
        f"{LABEL_PREFIX}.hccl-host-socket-port-range": _span(a.hccl_host_socket_port_range),
        f"{LABEL_PREFIX}.hccl-if-base-port": str(a.hccl_if_base_port),
        f"{LABEL_PREFIX}.vllm-port": str(a.vllm_port),
    }
    start_timeout = s.start_timeout_seconds or d.start_timeout_seconds or DEFAULT_START_TIMEOUT_SECONDS
    url = f"http://127.0.0.1:{a.api_port}/health"
    # vllm-ascend images carry python3; minimal images (the simulator) busybox wget.
    probe = (
        f"wget -q -O /dev/null {url} 2>/dev/null || "
        f"python3 -c 'import urllib.request; urllib.request.urlopen(\"{url}\", timeout=5)'"
    )
    return ContainerSpec(
        name=s.name,
        host=a.host,
        image=s.image or d.image or DEFAULT_IMAGE,
        command=tuple(command),
        env=MappingProxyType(dict(sorted(env.items()))),
        devices=devices,
        mounts=mounts,
        api_port=a.api_port,
        labels=MappingProxyType(labels),
        healthcheck=HealthCheck(
            test=("CMD-SHELL", probe),
            interval_seconds=30,
            timeout_seconds=10,
            start_period_seconds=start_timeout,
            retries=3,
        ),
        privileged=all_devices,
        restart=s.restart or d.restart or "unless-stopped",
        shm_size_mib=s.shm_size_mib or d.shm_size_mib or DEFAULT_SHM_SIZE_MIB,
        start_timeout_seconds=start_timeout,
    )
