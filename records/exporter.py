"""The NPU exporter: MindCluster's NPU Exporter in a container on a host, for Prometheus. Pure.

What it needs comes from MindCluster's own deployment (Ascend/mind-cluster
`component/npu-exporter/build/npu-exporter.yaml`, its DaemonSet): privileged, the driver and
`/usr/local/dcmi` read-only (its image's LD_LIBRARY_PATH points there, `build/Dockerfile`),
`/etc/localtime` read-only, and Docker's `/var/run/docker` read-only, which the DaemonSet mounts to map
cards to containers (`-containerMode=docker`). On a plain Docker host that mapping stays empty: the
exporter lists containers through a CRI server, `/run/dockershim.sock` or else `/run/cri-dockerd.sock`,
both Kubernetes' (`collector/container/runtime_ops.go`, `initCriClient`; `cmd/npu-exporter/main.go`,
`readCntMonitoringFlags`), and Docker serves no CRI, so no socket mounted here would give it one
(docs/metrics.md). Its image's ENTRYPOINT only prints a licence and starts an interactive
bash (`build/Dockerfile`: `cat /usr/local/agreement.txt; exec /bin/bash`), so the container sets
its own, as the DaemonSet's `command: ["/bin/bash", "-c", "--"]` does. Flags from
`cmd/npu-exporter/main.go`: `-ip` (no default: it exits without one), `-port` (1025-40000,
`metrics.npuExporterPort`), `-containerMode`. Only flags that file defines: Go's flag package
exits on an unknown one. The DaemonSet's `/var/run/dockershim.sock` and `/var/run/cri-dockerd.sock`
belong to Kubernetes and are missing on a plain Docker host, where Docker refuses a bind mount of
a missing source, so they are left out.
"""

from __future__ import annotations

import shlex
from types import MappingProxyType

from allocation.config import EXPORTER_CONTAINER, FleetConfig, Host, Mount
from allocation.defaults import DEFAULT_IPC_MODE, DEFAULT_RESTART, LOG_OPTS
from records.containers import DRIVER_DIR, LABEL_PREFIX, ContainerSpec, Site, health_check
from records.runtime import EXPORTER_MODE, STATE_DIR

NAME = EXPORTER_CONTAINER
"""Its container on every host; the config refuses a service of this name while the exporter is on."""
ENTRYPOINT = ("/bin/bash", "-c", "--")
MOUNTS = (
    Mount(source=DRIVER_DIR, target=DRIVER_DIR),
    Mount(source="/usr/local/dcmi", target="/usr/local/dcmi"),
    Mount(source="/etc/localtime", target="/etc/localtime"),
    Mount(source=STATE_DIR, target=STATE_DIR),
)
STEADY = (30, 10, 3)
START_SECONDS = 120
STOP_GRACE_SECONDS = 30


def exporter_command(port: int) -> tuple[str, ...]:
    """The script bash runs: the DaemonSet's `umask 027` (its log files), then the exporter as the
    shell's process (`exec`), so `docker stop` reaches it."""
    flags = ["-port", str(port), "-ip", "0.0.0.0", "-containerMode", EXPORTER_MODE]
    return (f"umask 027; exec npu-exporter {shlex.join(flags)}",)


def probe(port: int) -> str:
    """The health check: a TCP connect through bash's /dev/tcp. The image is ubuntu:22.04 with the
    exporter: no wget, curl or python3, but bash (`build/Dockerfile`)."""
    return f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}'"


def exporter_spec(fleet: FleetConfig, host: Host) -> ContainerSpec | None:
    """The exporter's container on `host`; None when `metrics.npuExporter` is not set."""
    settings, port = fleet.metrics.npu_exporter, fleet.metrics.npu_exporter_port
    if settings is None:
        return None
    labels = {f"{LABEL_PREFIX}.stack": fleet.fleet_name, f"{LABEL_PREFIX}.service": NAME, f"{LABEL_PREFIX}.host": host.name}
    return ContainerSpec(
        name=NAME,
        image=settings.image,
        entrypoint=ENTRYPOINT,
        command=exporter_command(port),
        env=MappingProxyType({}),
        device_files=(),
        mounts=MOUNTS,
        api_port=port,
        labels=MappingProxyType(labels),
        healthcheck=health_check(Site.of(fleet, host), ("CMD-SHELL", probe(port)), STEADY, START_SECONDS),
        privileged=True,
        restart=DEFAULT_RESTART,
        shm_size_mib=64,
        start_timeout_seconds=START_SECONDS,
        ipc_mode=DEFAULT_IPC_MODE,
        stop_grace_seconds=STOP_GRACE_SECONDS,
        sysctls=MappingProxyType({}),
        log_opts=LOG_OPTS,
    )
