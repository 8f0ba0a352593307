"""A simulated Huawei Ascend 910B host on this machine, for integration tests.

The project deploys to a docker daemon reached over SSH (``ssh://user@host:port``).
`SimHost` makes this machine look like one 8 x 910B3 server from the deployer's side:

- an ``sshd`` on 127.0.0.1 with its own config, host key and a client key made for
  the run (root login by key only); ``docker system dial-stdio`` runs through it, so
  ``DOCKER_HOST=ssh://root@127.0.0.1:PORT`` works;
- the local dockerd (reused when running; started, and stopped again, when not);
- the files an Ascend host has: ``/dev/davinci0..7``, ``/dev/davinci_manager``,
  ``/dev/devmm_svm``, ``/dev/hisi_hdc`` (harmless copies of /dev/null, 1:3),
  ``/usr/local/Ascend/driver`` (version.info, lib64/), ``/usr/local/dcmi``,
  ``/etc/ascend_install.info``, the fake ``/usr/local/bin/npu-smi`` (sim/npu-smi)
  and the NPU state folder ``/var/lib/npu-sim`` that the npu-sim containers share
  (HCCL port claims per card, and ``device-share/cardN`` for the cards that npu-smi
  put into device-share mode);
- the image ``ascend-fleet/npu-sim:latest`` (sim/npu-sim), a stand-in for
  ``quay.io/ascend/vllm-ascend`` that reproduces what a shared card does to it: a
  card held by another container (-8005), HBM taken by others or by an instance
  still loading, HCCL's NPU-side port clash.

`reboot` does to the NPU state what a host reboot does (device-share off, no claims);
`kill_containers`, `start_containers` and `restart_containers` do the containers' part.

It creates only what is missing and removes at `stop` only what it created. One
`SimHost` runs at a time on a machine (a lock file serialises test sessions), since
the device files, the state folder and the daemon are machine-wide.

How a client reaches the host
-----------------------------
Docker's SSH helper runs the ``ssh`` binary found on PATH, and OpenSSH reads the user
config from the passwd home directory, not ``$HOME``. `SimHost.docker_env` therefore
puts a tiny ``ssh`` wrapper first on PATH that runs ``/usr/bin/ssh -F <generated
config>``; the config names the identity file and a known_hosts file holding the
generated host key, with ``StrictHostKeyChecking yes`` and ``BatchMode yes``. Tools
that take SSH options themselves (the pulumi-docker provider's ``ssh_opts``) get the
same settings from `SimHost.ssh_opts`.

Needs root, ``docker``/``dockerd`` (Debian: docker.io), ``sshd``/``ssh``/``ssh-keygen``
(openssh-server, openssh-client) and ``/bin/busybox`` (busybox-static).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

SIM_DIR = Path(__file__).resolve().parent
IMAGE_DIR = SIM_DIR / "npu-sim"
NPU_SMI_SOURCE = SIM_DIR / "npu-smi"

IMAGE = "ascend-fleet/npu-sim:latest"
IMAGE_HASH_LABEL = "ascend-fleet.npu-sim.hash"
TEST_LABEL = "ascend-fleet.test"
SESSION_LABEL = "ascend-fleet.test.session"

CARDS = 8
CARD_DEVICES = tuple(f"/dev/davinci{i}" for i in range(CARDS))
CONTROL_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
DRIVER_DIR = Path("/usr/local/Ascend/driver")
DCMI_DIR = Path("/usr/local/dcmi")
INSTALL_INFO = Path("/etc/ascend_install.info")
NPU_SMI = Path("/usr/local/bin/npu-smi")
CLAIMS_DIR = Path("/var/lib/npu-sim")
DEVICE_SHARE_DIR = CLAIMS_DIR / "device-share"
UNHEALTHY_FILE = DRIVER_DIR / "sim" / "unhealthy"
NO_DEVICE_SHARE_FILE = DRIVER_DIR / "sim" / "no-device-share"
MODELS_DIR = Path("/srv/models")
GATE_LOCK_DIR = Path("/var/lib/ascend-fleet/locks")  # records.containers.LOCK_DIR_HOST; the host check makes it
LOCK_FILE = Path("/run/ascend-fleet-simhost.lock")
DOCKER_SOCKET = Path("/var/run/docker.sock")
BUSYBOX = Path("/bin/busybox")
# util-linux's flock, which the start gate uses (records.containers.START_GATE) and vllm-ascend's
# Ubuntu-based images carry; busybox-static has no flock applet. Copied into the image with the
# shared libraries it loads.
FLOCK = Path("/usr/bin/flock")

NPU_SMI_MARKER = "ascend-fleet npu-sim: fake npu-smi"

VERSION_INFO = """\
Version=24.1.rc2
ascendhal_version=7.35.23
aicpu_version=1.0
tdt_version=1.0
log_version=1.0
prof_version=2.0
dvppkernels_version=1.1
tsfw_version=1.0
Innerversion=V100R001C19SPC002B214
compatible_version=[V100R001C15],[V100R001C17],[V100R001C18],[V100R001C19]
compatible_version_fw=[7.0.0,7.5.99]
package_version=24.1.rc2
"""

ASCEND_INSTALL_INFO = """\
UserName=HwHiAiUser
UserGroup=HwHiAiUser
Driver_Install_Type=full
Driver_Install_Path_Param=/usr/local/Ascend
Driver_Install_For_All=no
"""


class SimHostError(RuntimeError):
    """The simulated host could not be set up or a container misbehaved."""


class SimHostUnavailable(SimHostError):
    """This machine cannot run the simulated host (not root, a tool is missing...)."""


class ContainerFailed(SimHostError):
    """A container exited or turned unhealthy; the message carries its logs."""


@dataclass(frozen=True)
class SimService:
    """A vLLM stand-in started by `SimHost.start_service`."""

    name: str
    """Container name."""
    port: int
    """API port inside the container (`--port`)."""
    host_port: int | None
    """Port published on 127.0.0.1, or None when the container has no published port."""

    @property
    def url(self) -> str:
        if self.host_port is None:
            raise SimHostError(f"{self.name} publishes no port")
        return f"http://127.0.0.1:{self.host_port}"


def unavailable_reason() -> str | None:
    """Why the simulated host cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (device nodes, /usr/local/Ascend, a second sshd)"
    tools = {
        "docker": "docker.io",
        "ssh": "openssh-client",
        "ssh-keygen": "openssh-client",
    }
    missing = [f"{tool} (apt package {pkg})" for tool, pkg in tools.items() if shutil.which(tool) is None]
    if _sshd_binary() is None:
        missing.append("sshd (apt package openssh-server)")
    if not BUSYBOX.exists():
        missing.append(f"{BUSYBOX} (apt package busybox-static)")
    if not FLOCK.exists():
        missing.append(f"{FLOCK} (apt package util-linux)")
    if missing:
        return "missing " + ", ".join(missing)
    if not _docker_daemon_up() and shutil.which("dockerd") is None:
        return "no docker daemon on /var/run/docker.sock and no dockerd to start (apt package docker.io)"
    return None


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sshd_binary() -> str | None:
    for candidate in (shutil.which("sshd"), "/usr/sbin/sshd"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


_LOCAL_DOCKER = ["docker", "-H", f"unix://{DOCKER_SOCKET}"]


def _local_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("DOCKER_HOST", "DOCKER_CONTEXT")}


def _docker(
    argv: list[str], env: Mapping[str, str], *, check: bool, timeout: float
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise SimHostError(f"docker {' '.join(argv[1:])} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def _docker_daemon_up() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        info = [*_LOCAL_DOCKER, "info", "--format", "{{.ID}}"]
        proc = subprocess.run(info, capture_output=True, timeout=20, env=_local_env())
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def image_hash() -> str:
    """Content hash of the image sources and the busybox binary they copy."""
    digest = hashlib.sha256()
    for path in sorted(IMAGE_DIR.iterdir()):
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(BUSYBOX.read_bytes())
    for path in _flock_files():
        digest.update(str(path).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _flock_files() -> list[Path]:
    """flock and the shared libraries it loads (ldd), by their real paths."""
    out = subprocess.run(["ldd", str(FLOCK)], capture_output=True, text=True, check=True).stdout
    libs = [Path(word) for line in out.splitlines() for word in line.split() if word.startswith("/")]
    return [FLOCK, *dict.fromkeys(libs)]


def live_claims() -> dict[Path, int]:
    """Claims in /var/lib/npu-sim whose rank process is alive: claim folder -> host PID."""
    alive: dict[Path, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"npu-sim-rank" in argv and len(argv) >= 2:
            last = argv[-2] if argv[-1] == b"" else argv[-1]
            fifo = Path(last.decode(errors="replace"))
            if fifo.name == "alive" and fifo.parent.parent.parent == CLAIMS_DIR:
                alive[fifo.parent] = int(proc.name)
    return alive


class SimHost:
    """One simulated 8 x 910B3 host: sshd + dockerd + Ascend files on this machine.

    Use as a context manager (or call `start` and `stop`). Attributes for clients:
    `address`, `ssh_port`, `user`, `identity_file`, `known_hosts_file`,
    `ssh_config_file`, `docker_host`, `ssh_opts`.
    """

    address = "127.0.0.1"
    user = "root"

    def __init__(self, workdir: Path | str | None = None, *, lock_timeout: float = 900.0) -> None:
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="simhost-"))
        self.session = uuid.uuid4().hex[:12]
        self.lock_timeout = lock_timeout
        self.ssh_port = 0
        self.identity_file = self.workdir / "id_ed25519"
        self.known_hosts_file = self.workdir / "known_hosts"
        self.ssh_config_file = self.workdir / "ssh_config"
        self._bin_dir = self.workdir / "bin"
        self._control_path = self.workdir / "ssh-master"
        self._created: list[Path] = []
        self._models: list[Path] = []
        self._sshd: subprocess.Popen[bytes] | None = None
        self._dockerd: subprocess.Popen[bytes] | None = None
        self._lock_fd: int | None = None
        self._privileged_ok: bool | None = None

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
            self._ensure_dockerd()
            self._lay_out_host_files()
            self._start_sshd()
            self.build_image()
            self.cleanup_containers()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Remove test containers, stop what was started, delete what was created."""
        with contextlib.suppress(Exception):
            if self._docker_reachable():
                self.cleanup_containers()
        if self._control_path.exists():
            subprocess.run(
                ["ssh", "-F", str(self.ssh_config_file), "-O", "exit", self.address],
                stdin=subprocess.DEVNULL, capture_output=True, timeout=10,
            )  # fmt: skip
        if self._sshd is not None:
            _terminate(self._sshd)
            self._sshd = None
        if self._dockerd is not None:
            _terminate(self._dockerd, timeout=30)
            self._dockerd = None
        for path in reversed(self._created):
            with contextlib.suppress(FileNotFoundError):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
        self._created.clear()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def reset(self) -> None:
        """Return to an idle host between tests: no test containers, claims, models, faults
        or cards in device-share mode."""
        self.cleanup_containers()
        self._clear_npu_state()
        for model in self._models:
            shutil.rmtree(model, ignore_errors=True)
        self._models.clear()
        for path in (UNHEALTHY_FILE, NO_DEVICE_SHARE_FILE):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    # ---- client side ----------------------------------------------------

    @property
    def docker_host(self) -> str:
        """``ssh://root@127.0.0.1:PORT``, for DOCKER_HOST or the pulumi-docker provider."""
        return f"ssh://{self.user}@{self.address}:{self.ssh_port}"

    @property
    def ssh_opts(self) -> list[str]:
        """SSH options that reach the host with host-key checking on (pulumi-docker `ssh_opts`)."""
        return [
            "-o", "StrictHostKeyChecking=yes",
            "-o", "ConnectTimeout=10",
            "-o", "BatchMode=yes",
            "-o", "IdentitiesOnly=yes",
            "-i", str(self.identity_file),
            "-o", f"UserKnownHostsFile={self.known_hosts_file}",
        ]  # fmt: skip

    def docker_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment in which the docker CLI (or a provider using it) talks to this host."""
        env = dict(os.environ if base is None else base)
        env.pop("DOCKER_CONTEXT", None)
        env["DOCKER_HOST"] = self.docker_host
        env["PATH"] = f"{self._bin_dir}{os.pathsep}{env.get('PATH', os.defpath)}"
        return env

    def run(self, command: str, *, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run a shell command on the host over SSH."""
        proc = subprocess.run(
            ["ssh", "-F", str(self.ssh_config_file), self.address, command],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check and proc.returncode != 0:
            raise SimHostError(f"ssh {command!r} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def docker(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run the docker CLI against the host through ``DOCKER_HOST=ssh://...``, as a deployer does."""
        return _docker(["docker", *args], self.docker_env(), check=check, timeout=timeout)

    def local_docker(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run the docker CLI on the daemon's local socket: how the harness looks at containers
        (state, logs, waits) and cleans up. What it sees is the same daemon's; a call costs tens of
        milliseconds instead of an SSH round trip, which adds up over every poll and every reset."""
        return _docker(_LOCAL_DOCKER + list(args), _local_env(), check=check, timeout=timeout)

    # ---- host state -----------------------------------------------------

    def make_model(self, path: Path | str, config: Mapping[str, object] | None = None) -> Path:
        """A model folder with a config.json (removed at `reset`); a bare name goes under /srv/models."""
        path = Path(path)
        if not path.is_absolute():
            path = MODELS_DIR / path
        self._ensure_dir(path.parent)
        existed = path.exists()
        path.mkdir(exist_ok=True)
        if not existed:
            self._models.append(path)
        body = dict(config or {"architectures": ["SimModel"], "model_type": "npu-sim"})
        (path / "config.json").write_text(json.dumps(body) + "\n")
        return path

    def mark_unhealthy(self, card: int, status: str = "Warning") -> None:
        """Make `npu-smi info` report a card with this health (Warning, Alarm, Critical)."""
        UNHEALTHY_FILE.parent.mkdir(parents=True, exist_ok=True)
        with UNHEALTHY_FILE.open("a") as f:
            f.write(f"{card} {status}\n")

    def mark_no_device_share(self, card: int) -> None:
        """Make the card a board without device-share support (npu-smi says so when asked)."""
        NO_DEVICE_SHARE_FILE.parent.mkdir(parents=True, exist_ok=True)
        with NO_DEVICE_SHARE_FILE.open("a") as f:
            f.write(f"{card}\n")

    def npu_smi(self, *args: str) -> str:
        """Output of ``npu-smi ARGS`` run on the host over SSH."""
        return self.run(" ".join(["npu-smi", *args])).stdout

    def set_device_share(self, card: int, enabled: bool = True) -> None:
        """``npu-smi set -t device-share -i CARD -c 0 -d 1|0`` on the host, answering its Y/N."""
        self.run(f"printf 'Y\\n' | npu-smi set -t device-share -i {int(card)} -c 0 -d {int(enabled)}")

    def device_shared_cards(self) -> list[int]:
        """Cards in device-share mode."""
        cards = []
        for path in DEVICE_SHARE_DIR.glob("card*"):
            if path.name[4:].isdigit() and path.read_text().strip() == "1":
                cards.append(int(path.name[4:]))
        return sorted(cards)

    def reboot(self) -> None:
        """Do to the NPU state what a host reboot does: every card back out of device-share
        mode (the mode is off after a reboot unless set again) and no claims left.

        Containers are not touched: a reboot stops them all first (`kill_containers`) and
        dockerd starts the ones with a restart policy again afterwards (`start_containers`),
        or do both with `restart_containers(..., reboot=True)`. Called while containers still
        run, their live claims stay.
        """
        _device_share_off()
        self.sweep_claims()

    def sweep_claims(self) -> None:
        """Delete NPU port claims whose container is gone (killed without a chance to release)."""
        alive = live_claims()
        for claim in CLAIMS_DIR.glob("card*/port*"):
            if claim not in alive:
                shutil.rmtree(claim, ignore_errors=True)

    # ---- image ----------------------------------------------------------

    def build_image(self) -> None:
        """Build ascend-fleet/npu-sim:latest unless an image with the same content hash exists."""
        want = image_hash()
        label = f'{{{{ index .Config.Labels "{IMAGE_HASH_LABEL}" }}}}'
        have = self.local_docker("image", "inspect", "-f", label, IMAGE, check=False)
        if have.returncode == 0 and have.stdout.strip() == want:
            return
        with tempfile.TemporaryDirectory(prefix="npu-sim-build-") as context:
            for path in IMAGE_DIR.iterdir():
                if path.is_file():
                    shutil.copy2(path, context)
            shutil.copy2(BUSYBOX, Path(context) / "busybox")
            for path in _flock_files():
                target = Path(context) / "rootfs" / path.relative_to("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path.resolve(), target)
            proc = subprocess.run(
                [*_LOCAL_DOCKER, "build", "-q", "-t", IMAGE, "--label", f"{IMAGE_HASH_LABEL}={want}", context],
                capture_output=True, text=True, env={**_local_env(), "DOCKER_BUILDKIT": "0"}, timeout=600,
            )  # fmt: skip
        if proc.returncode != 0:
            raise SimHostError(f"building {IMAGE} failed:\n{proc.stdout}\n{proc.stderr}")

    # ---- containers -----------------------------------------------------

    def labels(self) -> dict[str, str]:
        """Labels that mark a container as this test run's (so cleanup finds it)."""
        return {TEST_LABEL: "1", SESSION_LABEL: self.session}

    def start_service(
        self,
        name: str,
        *,
        model: Path | str,
        cards: Sequence[int],
        port: int,
        tp: int | None = None,
        gpu_memory_utilization: float = 0.9,
        env: Mapping[str, str] | None = None,
        served_model_name: str | None = None,
        publish: bool = True,
        extra_args: Iterable[str] = (),
        load_seconds: float = 1,
        privileged: bool = False,
        mount_model: bool = True,
        health_interval: str = "500ms",
    ) -> SimService:
        """``docker run -d`` an npu-sim container laid out like the seed's compose services.

        Mounts /dev/davinciN for each card in `cards` (plus the control devices, the
        driver, dcmi, npu-smi and the NPU state folder) and, with `mount_model`, the
        model read-only at the same path. `tp` defaults to ``len(cards)``. `env` goes in verbatim: pass
        ``HCCL_NPU_SOCKET_PORT_RANGE`` / ``ASCEND_RT_VISIBLE_DEVICES`` to test a layout.
        With `publish`, `port` is published on a free 127.0.0.1 port (`SimService.url`).
        """
        model = Path(model)
        tp = len(cards) if tp is None else tp
        args = ["run", "-d", "--name", name]
        for key, value in self.labels().items():
            args += ["--label", f"{key}={value}"]
        if privileged:
            args.append("--privileged")
        for card in cards:
            args += ["--device", f"/dev/davinci{card}:/dev/davinci{card}"]
        for device in CONTROL_DEVICES:
            args += ["--device", f"{device}:{device}"]
        args += [
            "-v", f"{DRIVER_DIR}:{DRIVER_DIR}:ro",
            "-v", f"{DCMI_DIR}:{DCMI_DIR}:ro",
            "-v", f"{NPU_SMI}:{NPU_SMI}:ro",
            "-v", f"{INSTALL_INFO}:{INSTALL_INFO}:ro",
            "-v", f"{CLAIMS_DIR}:{CLAIMS_DIR}",
            *(["-v", f"{model}:{model}:ro"] if mount_model else []),
            "-e", f"NPU_SIM_LOAD_SECONDS={load_seconds}",
            "--health-cmd", f"wget -q -O /dev/null http://127.0.0.1:{port}/health",
            "--health-interval", health_interval,
            "--health-timeout", "5s",
            "--health-retries", "3",
            "--health-start-period", "120s",
        ]  # fmt: skip
        for key, value in (env or {}).items():
            args += ["-e", f"{key}={value}"]
        host_port = free_port() if publish else None
        if publish:
            args += ["-p", f"127.0.0.1:{host_port}:{port}"]
        args += [
            IMAGE, "vllm", "serve", str(model),
            "--served-model-name", served_model_name or name,
            "--host", "0.0.0.0",
            "--port", str(port),
            "--tensor-parallel-size", str(tp),
            "--gpu-memory-utilization", str(gpu_memory_utilization),
            *extra_args,
        ]  # fmt: skip
        self.docker(*args)
        return SimService(name=name, port=port, host_port=host_port)

    def privileged_containers_run(self) -> bool:
        """Whether this docker daemon can start a ``--privileged`` container. Not everywhere: a
        daemon that itself lacks a capability (e.g. inside a sandbox) cannot grant them all."""
        if self._privileged_ok is None:
            labels = [f"--label={k}={v}" for k, v in self.labels().items()]
            proc = self.docker("run", "--rm", "--privileged", *labels, "--entrypoint", "/bin/true", IMAGE, check=False)
            self._privileged_ok = proc.returncode == 0
        return self._privileged_ok

    def state(self, container: str) -> dict[str, object]:
        """``docker inspect`` .State of a container."""
        return json.loads(self.local_docker("inspect", "-f", "{{json .State}}", container).stdout)

    def logs(self, container: str) -> str:
        """stdout and stderr of a container, interleaved."""
        proc = self.local_docker("logs", container, check=False)
        return proc.stdout + proc.stderr

    def wait_healthy(self, container: str, timeout: float = 60) -> None:
        """Wait until docker reports the container `healthy`; raise ContainerFailed with its logs otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.state(container)
            health = (state.get("Health") or {}).get("Status")  # type: ignore[union-attr]
            if health == "healthy":
                return
            if state.get("Status") in ("exited", "dead") or health == "unhealthy":
                raise ContainerFailed(
                    f"{container} is {state.get('Status')} (health {health}, exit code "
                    f"{state.get('ExitCode')}); logs:\n{self.logs(container)}"
                )
            if time.monotonic() > deadline:
                raise ContainerFailed(f"{container} not healthy after {timeout:.0f}s (health {health}); logs:\n{self.logs(container)}")
            time.sleep(0.2)

    def wait_exit(self, container: str, timeout: float = 60) -> int:
        """Wait for the container to stop; its exit code."""
        proc = self.local_docker("wait", container, timeout=timeout)
        return int(proc.stdout.strip().splitlines()[-1])

    def http_get(self, service: SimService, path: str, timeout: float = 5) -> tuple[int, bytes]:
        """GET a path of a published service: (status, body)."""
        try:
            with urllib.request.urlopen(service.url + path, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def running_containers(self, *, label: str | None = None, prefix: str | None = None) -> list[str]:
        """Names of the running containers with this label (``KEY`` or ``KEY=VALUE``) and name prefix, sorted."""
        args = ["ps", "--format", "{{.Names}}"]
        if label is not None:
            args += ["--filter", f"label={label}"]
        names = self.local_docker(*args).stdout.split()
        return sorted(n for n in names if prefix is None or n.startswith(prefix))

    def kill_containers(self, *, label: str | None = None, prefix: str | None = None) -> list[str]:
        """SIGKILL every running container with this label and/or name prefix in one ``docker kill``,
        as a power cut does, and wait until they are down; their names, sorted. None running
        is an error.

        Their NPU claims stay behind (the ranks had no chance to release them): the next
        claimant reaps them, or `reboot` / `sweep_claims` does.
        """
        if label is None and prefix is None:
            raise SimHostError("kill_containers needs a label or a name prefix")
        names = self.running_containers(label=label, prefix=prefix)
        if not names:
            # Almost always a wrong selector (a label value that is not the stack's, say).
            raise SimHostError(f"kill_containers: no running container with label {label!r} and prefix {prefix!r}")
        self.local_docker("kill", *names)
        self.local_docker("wait", *names)
        return names

    def start_containers(self, order: Sequence[str], *, wait_healthy: bool = False, timeout: float = 60) -> None:
        """``docker start`` the containers one after another in this order; with `wait_healthy`,
        each one must be healthy before the next starts (otherwise they load at the same time,
        as when dockerd starts them at boot)."""
        for name in order:
            self.docker("start", name)
            if wait_healthy:
                self.wait_healthy(name, timeout=timeout)

    def restart_containers(
        self,
        order: Sequence[str] | None = None,
        *,
        label: str | None = None,
        prefix: str | None = None,
        reboot: bool = False,
        wait_healthy: bool = False,
    ) -> list[str]:
        """Kill every running container with this label and/or name prefix at once, then start
        them again in `order` (the ones it leaves out follow by name); with `reboot`, the NPU
        state is reset in between as a host reboot resets it (`reboot`). The names in start order.

        The same with the docker CLI, e.g. from a test that drives the host like an operator::

            env = sim_host.docker_env()
            ps = ["docker", "ps", "--filter", "label=KEY", "--format", "{{.Names}}"]
            names = subprocess.run(ps, env=env, capture_output=True, text=True).stdout.split()
            subprocess.run(["docker", "kill", *names], env=env)  # all at once
            sim_host.reboot()  # the NPU state of a rebooted host
            for name in order:
                subprocess.run(["docker", "start", name], env=env)
        """
        if label is None and prefix is None:
            raise SimHostError("restart_containers needs a label or a name prefix")
        names = self.running_containers(label=label, prefix=prefix)
        order = list(order or [])
        unknown = [n for n in order if n not in names]
        if unknown:
            raise SimHostError(
                f"restart_containers: {', '.join(unknown)} not among the running containers with label "
                f"{label!r} and prefix {prefix!r}: {', '.join(names) or 'none'}"
            )
        order += [n for n in names if n not in order]
        self.kill_containers(label=label, prefix=prefix)
        if reboot:
            self.reboot()
        self.start_containers(order, wait_healthy=wait_healthy)
        return order

    def cleanup_containers(self) -> None:
        """Remove every test container, then stale NPU claims.

        Test containers: those labelled ``ascend-fleet.test=1`` and any container of
        the npu-sim image (e.g. made by a Pulumi stack under test, without our labels).
        """
        ids = set(self.local_docker("ps", "-aq", "--filter", f"label={TEST_LABEL}").stdout.split())
        ids |= set(self.local_docker("ps", "-aq", "--filter", f"ancestor={IMAGE}").stdout.split())
        if ids:
            self.local_docker("rm", "-f", *ids, check=False)
        self.sweep_claims()

    # ---- setup steps ----------------------------------------------------

    def _lock(self) -> None:
        fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise SimHostError(f"another simulated host holds {LOCK_FILE} for more than {self.lock_timeout:.0f}s")
                time.sleep(0.1)  # a second between tries lost the lock to sessions that came later
        self._lock_fd = fd

    def _clear_npu_state(self) -> None:
        """With no sim container left: no card in device-share mode and no card lock."""
        _device_share_off()
        for path in CLAIMS_DIR.glob("card*/.lock"):
            shutil.rmtree(path, ignore_errors=True)

    def _docker_reachable(self) -> bool:
        return _docker_daemon_up()

    def _ensure_dockerd(self) -> None:
        if _docker_daemon_up():
            return
        log = (self.workdir / "dockerd.log").open("wb")
        self._dockerd = subprocess.Popen(
            ["dockerd"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + 60
        while not _docker_daemon_up():
            if self._dockerd.poll() is not None or time.monotonic() > deadline:
                tail = (self.workdir / "dockerd.log").read_text(errors="replace")[-3000:]
                raise SimHostUnavailable(f"dockerd did not come up; its log ends:\n{tail}")
            time.sleep(0.5)

    def _ensure_dir(self, path: Path) -> None:
        missing = []
        for parent in [path, *path.parents]:
            if parent.exists():
                break
            missing.append(parent)
        for directory in reversed(missing):
            directory.mkdir()
            self._created.append(directory)

    def _ensure_file(self, path: Path, content: str, mode: int = 0o644, *, replace_if: str | None = None) -> None:
        if path.exists():
            if not (replace_if and replace_if in path.read_text(errors="replace")):
                return
            # Left behind by an earlier run that could not clean up: ours to refresh and remove.
            self._created.append(path)
        else:
            self._ensure_dir(path.parent)
            self._created.append(path)
        path.write_text(content)
        path.chmod(mode)

    def _lay_out_host_files(self) -> None:
        for device in (*CARD_DEVICES, *CONTROL_DEVICES):
            path = Path(device)
            if not path.exists():
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
                path.chmod(0o666)
                self._created.append(path)
        self._ensure_file(DRIVER_DIR / "version.info", VERSION_INFO)
        self._ensure_file(DRIVER_DIR / "lib64" / "README.npu-sim", "placeholder for the Ascend driver libraries\n")
        self._ensure_dir(UNHEALTHY_FILE.parent)
        self._ensure_file(DCMI_DIR / "README.npu-sim", "placeholder for dcmi\n")
        self._ensure_file(INSTALL_INFO, ASCEND_INSTALL_INFO)
        self._ensure_file(NPU_SMI, NPU_SMI_SOURCE.read_text(), 0o755, replace_if=NPU_SMI_MARKER)
        self._ensure_dir(CLAIMS_DIR)
        self._ensure_dir(DEVICE_SHARE_DIR)
        self._ensure_dir(MODELS_DIR)
        self._ensure_dir(GATE_LOCK_DIR)

    def _start_sshd(self) -> None:
        sshd = _sshd_binary()
        assert sshd is not None
        host_key = self.workdir / "ssh_host_ed25519_key"
        for key in (host_key, self.identity_file):
            if not key.exists():
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "simhost", "-f", str(key)], check=True)
        authorized = self.workdir / "authorized_keys"
        authorized.write_text(Path(f"{self.identity_file}.pub").read_text())
        # Debian's sshd needs its privilege separation directory.
        self._ensure_dir(Path("/run/sshd"))
        self.ssh_port = free_port()
        config = self.workdir / "sshd_config"
        config.write_text(
            f"Port {self.ssh_port}\n"
            f"ListenAddress {self.address}\n"
            f"HostKey {host_key}\n"
            f"PidFile {self.workdir / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {authorized}\n"
            "PermitRootLogin prohibit-password\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "UsePAM no\n"
            "StrictModes no\n"
            "MaxStartups 100:30:200\n"
            "MaxSessions 50\n"
            "LogLevel VERBOSE\n"
        )
        host_pub = Path(f"{host_key}.pub").read_text().split()
        self.known_hosts_file.write_text(f"[{self.address}]:{self.ssh_port} {host_pub[0]} {host_pub[1]}\n")
        self.ssh_config_file.write_text(
            f"Host {self.address}\n"
            f"  HostName {self.address}\n"
            f"  Port {self.ssh_port}\n"
            f"  User {self.user}\n"
            f"  IdentityFile {self.identity_file}\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.known_hosts_file}\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking yes\n"
            "  BatchMode yes\n"
            "  ConnectTimeout 10\n"
            "  LogLevel ERROR\n"
            # Reuse the master connection opened in _start_sshd when it is up (a fresh
            # handshake costs ~0.4 s per docker call); connect directly otherwise.
            f"  ControlPath {self._control_path}\n"
            "  ControlMaster no\n"
        )
        self._bin_dir.mkdir(exist_ok=True)
        wrapper = self._bin_dir / "ssh"
        real_ssh = shutil.which("ssh") or "/usr/bin/ssh"
        wrapper.write_text(f'#!/bin/sh\nexec {real_ssh} -F {self.ssh_config_file} "$@"\n')
        wrapper.chmod(0o755)
        log = (self.workdir / "sshd.log").open("wb")
        self._sshd = subprocess.Popen(
            [sshd, "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 20
        while True:
            if self._sshd.poll() is not None:
                raise SimHostError(f"sshd exited {self._sshd.returncode}: {(self.workdir / 'sshd.log').read_text()}")
            with contextlib.suppress(OSError), socket.create_connection((self.address, self.ssh_port), timeout=1):
                break
            if time.monotonic() > deadline:
                raise SimHostError(f"sshd not listening on {self.ssh_port}: {(self.workdir / 'sshd.log').read_text()}")
            time.sleep(0.1)
        subprocess.run(
            ["ssh", "-F", str(self.ssh_config_file), "-o", "ControlMaster=yes", "-o", "ControlPersist=300",
             "-f", "-N", self.address],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30,
        )  # fmt: skip
        probe = self.run("docker version --format '{{.Server.Version}}'", check=False, timeout=30)
        if probe.returncode != 0:
            raise SimHostError(
                f"ssh to {self.docker_host} works but docker does not answer there: {probe.stderr.strip()}\n"
                f"sshd log:\n{(self.workdir / 'sshd.log').read_text()[-3000:]}"
            )


def _device_share_off() -> None:
    for path in DEVICE_SHARE_DIR.glob("card*"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _terminate(proc: subprocess.Popen[bytes], timeout: float = 10) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
