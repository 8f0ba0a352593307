"""A simulated Huawei Ascend 910B host on this machine, for integration tests.

The project deploys to a docker daemon reached over SSH (``ssh://user@host:port``).
`SimHost` makes this machine look like one 8 x 910B3 server from the deployer's side. It is a
facade over the parts, one module each:

- sim/sshd.py: an ``sshd`` on 127.0.0.1 with its own config, host key and a client key made
  for the run (root login by key only), so ``DOCKER_HOST=ssh://root@127.0.0.1:PORT`` works,
  and the client settings that reach it (`docker_env`, `ssh_opts`);
- sim/host_docker.py: the host's own containerd and dockerd (own data-root, exec-root, socket and
  bridge), which `power_cut` kills and `boot` starts again;
- sim/daemons.py: `unavailable_reason` (what this machine lacks), and this machine's dockerd
  (reused when running; started, and stopped again, when not) for `own_docker=False`;
- sim/ascend_files.py: the files an Ascend host has (``/dev/davinci0..7`` and the control
  devices, the driver and dcmi folders, the fake ``npu-smi``, ...);
- sim/npu_state.py: the NPU state folder ``/var/lib/npu-sim`` that the npu-sim containers
  share (HCCL port claims per card, the cards in device-share mode) and the fault marks;
- sim/npu_image.py: the image ``ascend-fleet/npu-sim:latest`` (sim/npu-sim), a stand-in for
  ``quay.io/ascend/vllm-ascend`` that reproduces what a shared card does to it;
- sim/containers.py: the test containers, started, watched, killed and removed;
- sim/docker_cli.py: the docker CLI over SSH and on the local socket; sim/errors.py.

`reboot` is a power cut and a boot: Docker's own daemon killed with every container's process and
started again, so what comes back is dockerd's restore's decision (restart policies, containers
stopped by hand), between the NPU state of a new boot (device-share off, no claims, the start gate's
boot stamps stale) and the boot units before and after Docker. `kill_containers`, `npu_reboot` and
`start_containers` stand in for it where a test needs an order of its own.

It creates only what is missing and removes at `stop` only what it created (the daemon's images
and containers stay in its data-root, as /var/lib/docker does). One `SimHost` runs at a time on a
machine (a lock file serialises test sessions), since the device files, the state folder and the
daemon are machine-wide. Every name the tests import from here (the paths, the image, the errors,
`free_port`) stays importable from here.

Needs root, ``docker``/``dockerd`` (Debian: docker.io), ``containerd`` (containerd), ``ip``
(iproute2), ``sshd``/``ssh``/``ssh-keygen`` (openssh-server, openssh-client) and ``/bin/busybox``
(busybox-static).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from records.card_order import BOOT_SCRIPT as ORDER_BOOT_SCRIPT, BOOT_WAIT_SECONDS
from records.device_share import BOOT_SCRIPT as DEVICE_SHARE_BOOT_SCRIPT
from sim import docker_cli, npu_image, npu_state
from sim.ascend_files import A3_CARD_DEVICES, CLAIMS_DIR, DCMI_DIR, DEVICE_SHARE_DIR, MODELS_DIR, HostFiles, lay_out
from sim.containers import Containers, SimService, http_get
from sim.daemons import Dockerd, free_port, unavailable_reason
from sim.docker_cli import DOCKER_SOCKET
from sim.errors import ContainerFailed, SimHostError, SimHostUnavailable
from sim.host_docker import HostDocker
from sim.npu_image import IMAGE
from sim.sshd import Sshd

# What callers import from here, wherever it lives now.
__all__ = [
    "CLAIMS_DIR", "DCMI_DIR", "DEVICE_SHARE_DIR", "DOCKER_SOCKET", "IMAGE", "LOCK_FILE",
    "ContainerFailed", "SimHost", "SimHostError", "SimHostUnavailable", "SimService", "free_port", "unavailable_reason",
]  # fmt: skip

LOCK_FILE = Path("/run/ascend-fleet-simhost.lock")
LOCK_WAIT_SECONDS = 900.0
"""How long `start` waits for the lock before it gives up (`python -m sim` waits so long too)."""


@dataclass(frozen=True)
class Boot:
    """What a `SimHost.boot` did."""

    started: list[str]
    """The containers dockerd's restore started, sorted."""
    device_share: subprocess.CompletedProcess[str] | None
    """The device-share boot step (before docker.service), when `render` installed it."""
    start_order: subprocess.CompletedProcess[str] | None
    """The start-order boot step (after docker.service), when `render` installed it."""


class SimHost:
    """One simulated 8 x 910B3 host: sshd + its own dockerd + Ascend files on this machine.

    Use as a context manager (or call `start` and `stop`). Attributes for clients:
    `address`, `ssh_port`, `user`, `identity_file`, `known_hosts_file`,
    `ssh_config_file`, `docker_host`, `ssh_opts`. With `own_docker=False` (the dev stack, whose
    `dockerHost` is this machine's socket) its containers run on this machine's dockerd, and it
    cannot `power_cut`, `boot` or `reboot`.
    """

    address = "127.0.0.1"
    user = "root"

    def __init__(self, workdir: Path | str | None = None, *, lock_timeout: float = LOCK_WAIT_SECONDS, own_docker: bool = True) -> None:
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="simhost-"))
        self.session = uuid.uuid4().hex[:12]
        self.lock_timeout = lock_timeout
        self.files = HostFiles()
        self.dockerd: HostDocker | Dockerd = HostDocker(self.workdir) if own_docker else Dockerd(self.workdir)
        self.sshd = Sshd(self.workdir, self.address, self.user, self.dockerd.socket)
        self.containers = Containers(self.docker, self.local_docker, self.session)
        self.identity_file = self.sshd.identity_file
        self.known_hosts_file = self.sshd.known_hosts_file
        self.ssh_config_file = self.sshd.config_file
        self._models: list[Path] = []
        self._lock_fd: int | None = None

    # ---- lifecycle ------------------------------------------------------

    def __enter__(self) -> SimHost:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Lock the machine, lay out the Ascend files, start sshd and dockerd, build the image."""
        reason = unavailable_reason()
        if reason:
            raise SimHostUnavailable(reason)
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._lock()
            self.dockerd.start()
            lay_out(self.files)
            self.sshd.start(self.files)
            self.build_image()
            self.cleanup_containers()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Remove test containers, stop what was started, delete what was created. Without the lock
        it does nothing: the containers, claims and files belong to the host that holds it."""
        if self._lock_fd is None:
            return
        with contextlib.suppress(Exception):
            if docker_cli.daemon_up(self.dockerd.socket):
                self.cleanup_containers()
        self.sshd.stop()
        self.dockerd.stop()
        self.files.remove()
        os.close(self._lock_fd)
        self._lock_fd = None

    def reset(self) -> None:
        """Return to an idle host between tests: no test containers, claims, models, faults
        or cards in device-share mode; the host's Docker up again if a test left it cut off."""
        if isinstance(self.dockerd, HostDocker) and not self.dockerd.running:
            self.dockerd.boot()
        self.cleanup_containers()
        npu_state.clear_cards()
        for model in self._models:
            shutil.rmtree(model, ignore_errors=True)
        self._models.clear()
        npu_state.clear_fault_marks()
        self.files.forget(Path(d) for d in A3_CARD_DEVICES)  # back to the A2 board's eight cards

    def _lock(self) -> None:
        fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.lock_timeout
        waiting = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waiting:  # else a wait for a test run's host looks like a hang (`python -m sim`)
                    waiting = True
                    print(
                        f"waiting for {LOCK_FILE}: another simulated host holds it (a test run on this machine?); "
                        f"giving up after {self.lock_timeout:.0f} s",
                        file=sys.stderr,
                        flush=True,
                    )
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise SimHostError(f"another simulated host holds {LOCK_FILE} for more than {self.lock_timeout:.0f}s")
                time.sleep(0.1)  # a second between tries lost the lock to sessions that came later
        self._lock_fd = fd

    # ---- client side (sim/sshd.py, sim/docker_cli.py) -------------------

    @property
    def ssh_port(self) -> int:
        """The sshd's port on `address` (0 before `start`)."""
        return self.sshd.port

    @property
    def docker_host(self) -> str:
        """``ssh://root@127.0.0.1:PORT``, for DOCKER_HOST or the pulumi-docker provider."""
        return self.sshd.docker_host

    @property
    def ssh_opts(self) -> list[str]:
        """SSH options that reach the host with host-key checking on (pulumi-docker `ssh_opts`)."""
        return self.sshd.ssh_opts

    def docker_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment in which the docker CLI (or a provider using it) talks to this host."""
        return self.sshd.docker_env(base)

    def run(self, command: str, *, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run a shell command on the host over SSH."""
        return self.sshd.run(command, check=check, timeout=timeout)

    def docker(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run the docker CLI against the host through ``DOCKER_HOST=ssh://...``, as a deployer does."""
        return docker_cli.docker(["docker", *args], self.docker_env(), check=check, timeout=timeout)

    def local_docker(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run the docker CLI on the daemon's local socket: how the harness looks at containers
        (state, logs, waits) and cleans up. What it sees is the same daemon's; a call costs tens of
        milliseconds instead of an SSH round trip, which adds up over every poll and every reset."""
        return docker_cli.local_docker(*args, check=check, timeout=timeout, socket=self.dockerd.socket)

    # ---- host state (sim/npu_state.py) ----------------------------------

    def make_model(self, path: Path | str, config: Mapping[str, object] | None = None) -> Path:
        """A model folder with a config.json (removed at `reset`); a bare name goes under /srv/models."""
        path = Path(path)
        if not path.is_absolute():
            path = MODELS_DIR / path
        self.files.ensure_dir(path.parent)
        existed = path.exists()
        path.mkdir(exist_ok=True)
        if not existed:
            self._models.append(path)
        body = dict(config or {"architectures": ["SimModel"], "model_type": "npu-sim"})
        (path / "config.json").write_text(json.dumps(body) + "\n")
        return path

    def mark_unhealthy(self, card: int, status: str = "Warning") -> None:
        """Make `npu-smi info` report a card with this health (Warning, Alarm, Critical)."""
        npu_state.mark_unhealthy(card, status)

    def mark_no_device_share(self, card: int) -> None:
        """Make the card a board without device-share support (npu-smi says so when asked)."""
        npu_state.mark_no_device_share(card)

    def set_layout(self, board: str = "a2", hbm_mb: int | None = None) -> None:
        """Make npu-smi show an Atlas A3 board (`a3`: 16 chips, /dev/davinci8-15 laid out too) or the
        A2 one, with `hbm_mb` MB of HBM per chip (32768: a 32 GB card). `reset` goes back to A2, 64 GB."""
        if board == "a3":
            for device in A3_CARD_DEVICES:
                self.files.ensure_device(Path(device))
        npu_state.set_layout(board, hbm_mb)

    def npu_smi(self, *args: str) -> str:
        """Output of ``npu-smi ARGS`` run on the host over SSH."""
        return self.run(" ".join(["npu-smi", *args])).stdout

    def set_device_share(self, card: int, enabled: bool = True) -> None:
        """``npu-smi set -t device-share -i CARD -c 0 -d 1|0`` on the host, answering its Y/N."""
        self.run(f"printf 'Y\\n' | npu-smi set -t device-share -i {int(card)} -c 0 -d {int(enabled)}")

    def device_shared_cards(self) -> list[int]:
        """Cards in device-share mode."""
        return npu_state.device_shared_cards()

    def npu_reboot(self) -> None:
        """Do to the NPU state what a host reboot does, without restarting Docker: every card back
        out of device-share mode, no claims of dead ranks, the start gate's boot stamps gone
        (`boot` does it too). For a test that starts the containers itself in an order of its own,
        which dockerd's restore cannot be told (it starts them all at once): `kill_containers`,
        this, `start_containers`. Called while containers still run, their live claims stay."""
        npu_state.reboot()

    def docker_started(self) -> subprocess.CompletedProcess[str] | None:
        """What the boot units ordered After=docker.service do once Docker has started the
        containers it restarts: the start-order boot step (records.card_order `BOOT_SCRIPT`), when
        `render`'s start-order step installed it. None when it is not installed."""
        if not Path(ORDER_BOOT_SCRIPT).exists():
            return None
        return self.run(ORDER_BOOT_SCRIPT, check=False, timeout=BOOT_WAIT_SECONDS + 60)

    def power_cut(self) -> None:
        """The host loses power: its dockerd, containerd and every process of every container are
        SIGKILLed at once (sim/host_docker.py), so no container is marked stopped by hand and none
        releases its NPU claims. Nothing answers on the daemon until `boot`."""
        self._host_docker().power_cut()

    def boot(self, before_docker: Callable[[], object] | None = None) -> Boot:
        """The host starting again after `power_cut`, in systemd's order: the NPU state of a new
        boot (`npu_reboot`); the units ordered Before=docker.service: the device-share boot step
        (records.device_share `BOOT_SCRIPT`) when `render` installed it, then `before_docker`, a
        test's own; containerd and dockerd, whose restore starts, all at once, the containers their
        restart policies bring back; then the units After=docker.service (`docker_started`)."""
        docker = self._host_docker()
        npu_state.reboot()
        share = self.run(DEVICE_SHARE_BOOT_SCRIPT, check=False, timeout=180) if Path(DEVICE_SHARE_BOOT_SCRIPT).exists() else None
        if before_docker is not None:
            before_docker()
        booted = docker.boot()
        started = docker.started_since(booted)
        return Boot(started=started, device_share=share, start_order=self.docker_started())

    def reboot(self, before_docker: Callable[[], object] | None = None) -> Boot:
        """`power_cut`, then `boot`."""
        self.power_cut()
        return self.boot(before_docker)

    def _host_docker(self) -> HostDocker:
        if not isinstance(self.dockerd, HostDocker):
            raise SimHostError("a simulated host on this machine's dockerd (own_docker=False) cannot be rebooted")
        return self.dockerd

    def sweep_claims(self) -> None:
        """Delete NPU port claims whose container is gone (killed without a chance to release)."""
        npu_state.sweep_claims()

    # ---- image (sim/npu_image.py) ---------------------------------------

    def build_image(self) -> None:
        """Build ascend-fleet/npu-sim:latest unless an image with the same content hash exists."""
        npu_image.build_image(self.dockerd.socket)

    # ---- containers (sim/containers.py) ---------------------------------

    def labels(self) -> dict[str, str]:
        """Labels that mark a container as this test run's (so cleanup finds it)."""
        return self.containers.labels()

    def start_service(self, name: str, **options: Any) -> SimService:
        """``docker run -d`` an npu-sim container laid out like the seed's compose services;
        the options are `Containers.start_service`'s."""
        return self.containers.start_service(name, **options)

    def privileged_containers_run(self) -> bool:
        """Whether this docker daemon can start a ``--privileged`` container."""
        return self.containers.privileged_containers_run()

    def state(self, container: str) -> dict[str, object]:
        """``docker inspect`` .State of a container."""
        return self.containers.state(container)

    def logs(self, container: str, since: str | None = None) -> str:
        """stdout and stderr of a container, interleaved; only those `since` a moment if given
        (`Containers.logs`)."""
        return self.containers.logs(container, since)

    def wait_healthy(self, container: str, timeout: float = 60) -> None:
        """Wait until docker reports the container `healthy`; raise ContainerFailed with its logs otherwise."""
        self.containers.wait_healthy(container, timeout)

    def wait_exit(self, container: str, timeout: float = 60) -> int:
        """Wait for the container to stop; its exit code."""
        return self.containers.wait_exit(container, timeout)

    def http_get(self, service: SimService, path: str, timeout: float = 5) -> tuple[int, bytes]:
        """GET a path of a published service: (status, body)."""
        return http_get(service, path, timeout)

    def running_containers(self, *, label: str | None = None, prefix: str | None = None) -> list[str]:
        """Names of the running containers with this label (``KEY`` or ``KEY=VALUE``) and name prefix, sorted."""
        return self.containers.running(label=label, prefix=prefix)

    def kill_containers(self, *, label: str | None = None, prefix: str | None = None) -> list[str]:
        """SIGKILL the running containers with this label and/or name prefix at once (`Containers.kill`)."""
        return self.containers.kill(label=label, prefix=prefix)

    def start_containers(self, order: Sequence[str], *, wait_healthy: bool = False, timeout: float = 60) -> None:
        """``docker start`` the containers in this order (`Containers.start`)."""
        self.containers.start(order, wait_healthy=wait_healthy, timeout=timeout)

    def restart_containers(
        self,
        order: Sequence[str] | None = None,
        *,
        label: str | None = None,
        prefix: str | None = None,
        reboot: bool = False,
        wait_healthy: bool = False,
    ) -> list[str]:
        """Kill the running containers with this `label` and/or name `prefix` at once and start
        them again in `order` (the ones it leaves out follow by name; `wait_healthy` as
        `start_containers`). With `reboot` the kill is a `reboot` (dockerd starts again those
        whose restart policy says so, before the others are started in `order`). The names in
        start order."""
        if not reboot:
            return self.containers.restart(order, label=label, prefix=prefix, wait_healthy=wait_healthy)
        order = self.containers.order_of(order, label=label, prefix=prefix)
        self.reboot()
        self.containers.start(order, wait_healthy=wait_healthy)
        return order

    def cleanup_containers(self) -> None:
        """Remove every test container, then stale NPU claims."""
        self.containers.cleanup()
