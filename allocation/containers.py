"""container_spec: the one mapping from a planned service to the container that runs it.

The Pulumi component, the compose/docker-run exporters and `doctor` all take
their container from here, so what is deployed, exported and checked cannot
drift apart. Pure: no Pulumi, no Docker, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Sequence

from allocation.config import VISIBLE_DEVICES_ENV, Defaults, FleetConfig, Mount, image_of
from allocation.plan import PlannedService
from allocation.windows import KINDS, span_text

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
NPU_SMI = "/usr/local/bin/npu-smi"
DRIVER_MOUNTS = (
    DRIVER_DIR,
    "/usr/local/dcmi",
    NPU_SMI,
    "/etc/ascend_install.info",
)
LOG_OPTS = MappingProxyType({"max-size": "100m", "max-file": "5"})
DEFAULT_STOP_GRACE_SECONDS = 60
# Beyond the health wait: creating and starting the container, and the provider's own calls.
CREATE_MARGIN_SECONDS = 300
RESERVED_PORTS_SYSCTL = "net.ipv4.ip_local_reserved_ports"
# The host as a bridge-networked container reaches it: dockerd maps "host-gateway" to the bridge's
# gateway address. The provider stores extra hosts as "name:ip" and reads them back split on ":"
# (terraform-provider-docker v4.5.0 resource_docker_container_structures.go flattenExtraHosts).
HOST_ALIAS = "host.docker.internal"
START_AFTER_ENV = "ASCEND_FLEET_START_AFTER"
START_WAIT_ENV = "ASCEND_FLEET_START_WAIT_SECONDS"
START_GATE_NAME = "ascend-fleet-start-gate"
# The start gate of a service that shares a card: before `vllm serve`, wait until each service
# before it on its cards answers /health. `depends_on` orders containers only during `pulumi up`;
# after a reboot, a dockerd restart or `docker restart` of them all, Docker starts every container
# at once, and two instances loading on one card fail (vllm-ascend issues 5917, 5707). The gate is
# in the container, so the order holds whoever starts it. POSIX sh; wget or python3 probes, as
# in the health check. $1.. is the vllm command, run with exec so it stays PID 1.
START_GATE = (
    "trap 'exit 143' TERM INT; waited=0; "
    "for entry in $ASCEND_FLEET_START_AFTER; do "
    'name=${entry%%=*}; url=${entry#*=}; '
    'echo "ascend-fleet: start gate: waiting for $name ($url) before vllm serve: it shares a card with this '
    'service (gives up after ${ASCEND_FLEET_START_WAIT_SECONDS}s)"; '
    'until wget -q -O /dev/null "$url" 2>/dev/null || python3 -c '
    "'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' \"$url\" 2>/dev/null; do "
    'if [ "$waited" -ge "$ASCEND_FLEET_START_WAIT_SECONDS" ]; then '
    'echo "ascend-fleet: start gate: gave up after ${waited}s: $name ($url) never answered. It shares a card '
    'with this service and must be healthy first (two instances loading on one card fail). '
    'Check it: docker logs $name" >&2; exit 1; fi; '
    "sleep 5 & wait $!; waited=$((waited + 5)); "
    '[ $((waited % 60)) -ne 0 ] || echo "ascend-fleet: start gate: still waiting for $name after ${waited}s"; '
    "done; "
    'echo "ascend-fleet: start gate: $name answers after ${waited}s"; '
    'done; exec "$@"'
)


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
    image: str
    command: tuple[str, ...]
    env: Mapping[str, str]
    device_files: tuple[str, ...]
    """Host `/dev` paths, passed in at the same path."""
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
    ipc_mode: str
    stop_grace_seconds: int
    sysctls: Mapping[str, str]
    """Namespaced kernel settings: the service's windows kept out of its ephemeral ports."""
    log_opts: Mapping[str, str]
    extra_hosts: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Name -> address lines of the container's /etc/hosts."""
    log_driver: str = "json-file"
    metrics_port: int | None = None
    """A second published port, for Prometheus (a router's)."""

    @property
    def ports(self) -> tuple[int, ...]:
        """Every port published on the host, at the same number inside."""
        return (self.api_port,) if self.metrics_port is None else (self.api_port, self.metrics_port)

    @property
    def create_timeout_seconds(self) -> int:
        """The deployment's bound on creating the container: the health wait and a margin."""
        return self.start_timeout_seconds + CREATE_MARGIN_SECONDS

    @property
    def delete_timeout_seconds(self) -> int:
        return self.stop_grace_seconds + CREATE_MARGIN_SECONDS


def _first(*values: int | None) -> int:
    """The first value that is set: 0 is a setting, not an absence."""
    return next(v for v in values if v is not None)


def _command(planned: PlannedService, defaults: Defaults) -> tuple[str, ...]:
    """`vllm serve` with what the plan owns first, then defaults' and the service's `args`."""
    s = planned.service
    command = ["vllm", "serve", s.model, "--served-model-name", s.served_model_name or s.name]
    command += ["--host", "0.0.0.0", "--port", str(planned.assignment.api_port)]
    utilization = planned.gpu_memory_utilization
    command += ["--tensor-parallel-size", str(s.tensor_parallel_size), "--gpu-memory-utilization", str(utilization)]
    if s.max_model_len is not None:
        command += ["--max-model-len", str(s.max_model_len)]
    if s.max_num_seqs is not None:
        command += ["--max-num-seqs", str(s.max_num_seqs)]
    return (*command, *(defaults.args or ()), *(s.args or ()))


def _gated(command: tuple[str, ...], env: dict[str, str], after: Sequence[PlannedService], wait: int) -> tuple[str, ...]:
    """The command behind the start gate, and the gate's settings in `env`, when `after` is not empty."""
    if not after:
        return command
    env[START_AFTER_ENV] = " ".join(f"{p.name}=http://{HOST_ALIAS}:{p.assignment.api_port}/health" for p in after)
    env[START_WAIT_ENV] = str(wait)
    return ("sh", "-c", START_GATE, START_GATE_NAME, *command)


def _env_and_labels(stack: str, planned: PlannedService, defaults: Defaults, all_devices: bool) -> tuple[dict, dict]:
    s, a = planned.service, planned.assignment
    env = dict(TUNING_ENV)
    if (s.ipc_mode or defaults.ipc_mode) == "host":
        # One /dev/shm for every service and the host: ATB's shared-memory names must not meet.
        env["ATB_SHARE_MEMORY_NAME_SUFFIX"] = f"_{s.name}"
    if s.tensor_parallel_size > 1:
        env["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
    env.update(defaults.env or {})
    env.update(s.env or {})
    # With only its own /dev/davinciN mounted, the runtime numbers a container's
    # cards from 0; in all-devices mode every card is visible under its physical index.
    visible = a.cards if all_devices else range(s.tensor_parallel_size)
    env[VISIBLE_DEVICES_ENV] = ",".join(map(str, visible))
    labels = {
        f"{LABEL_PREFIX}.stack": stack,
        f"{LABEL_PREFIX}.service": s.name,
        f"{LABEL_PREFIX}.host": a.host_name,
        f"{LABEL_PREFIX}.devices": ",".join(map(str, a.cards)),
    }
    for kind in KINDS:
        span = a.windows.get(kind.key)
        text = kind.text(span) if span else ""
        if kind.env and span:
            env[kind.env] = text
        labels[f"{LABEL_PREFIX}.{kind.label}"] = text
    return dict(sorted(env.items())), labels


def http_probe(port: int, path: str) -> str:
    """A health check's shell command: succeeds when the container answers `path` on `port` with 2xx.
    vllm-ascend images carry python3; minimal images (the simulator) busybox wget."""
    url = f"http://127.0.0.1:{port}{path}"
    return (
        f"wget -q -O /dev/null {url} 2>/dev/null || "
        f"python3 -c 'import urllib.request; urllib.request.urlopen(\"{url}\", timeout=5)'"
    )


def container_spec(
    fleet: FleetConfig, planned: PlannedService, *, shared: bool = False, after: Sequence[PlannedService] = ()
) -> ContainerSpec:
    """The container of `planned`. `shared`: one of its cards is used by another service too;
    `after`: the services before it on its cards, which its start gate waits for."""
    s, a, d = planned.service, planned.assignment, fleet.defaults
    host = fleet.host(a.host_name)
    all_devices = bool(s.all_devices if s.all_devices is not None else d.all_devices)
    all_devices = all_devices or (shared and host.card_sharing == "privileged")
    env, labels = _env_and_labels(fleet.stack, planned, d, all_devices)
    cards = range(host.npus) if all_devices else a.cards
    device_files = tuple(f"/dev/davinci{c}" for c in cards) + CONTROL_DEVICES
    mounts = tuple(Mount(source=p, target=p) for p in DRIVER_MOUNTS)
    mounts += (Mount(source=s.model, target=s.model),)
    mounts += tuple(d.mounts or ()) + tuple(s.mounts or ())
    start_timeout = s.start_timeout_seconds or d.start_timeout_seconds or DEFAULT_START_TIMEOUT_SECONDS
    command = _gated(_command(planned, d), env, after, start_timeout)
    reserved = ",".join(span_text(a.windows[k.key]) for k in KINDS if k.netns and k.key in a.windows)
    return ContainerSpec(
        name=s.name,
        image=image_of(fleet, s),
        command=command,
        env=MappingProxyType(dict(sorted(env.items()))),
        extra_hosts=MappingProxyType({HOST_ALIAS: "host-gateway"} if after else {}),
        device_files=device_files,
        mounts=mounts,
        api_port=a.api_port,
        labels=MappingProxyType(labels),
        healthcheck=HealthCheck(
            test=("CMD-SHELL", http_probe(a.api_port, "/health")),
            interval_seconds=30,
            timeout_seconds=10,
            start_period_seconds=start_timeout,
            retries=3,
        ),
        privileged=all_devices,
        ipc_mode=s.ipc_mode or d.ipc_mode or "private",
        stop_grace_seconds=_first(s.stop_grace_seconds, d.stop_grace_seconds, DEFAULT_STOP_GRACE_SECONDS),
        sysctls=MappingProxyType({RESERVED_PORTS_SYSCTL: reserved}),
        restart=s.restart or d.restart or "unless-stopped",
        shm_size_mib=s.shm_size_mib or d.shm_size_mib or DEFAULT_SHM_SIZE_MIB,
        start_timeout_seconds=start_timeout,
        log_opts=MappingProxyType(dict(s.log_opts or d.log_opts or LOG_OPTS)),
    )
