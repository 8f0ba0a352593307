"""The simulated host's own Docker: a containerd and a dockerd of its own, which a reboot kills and
starts again, so that what comes back after a reboot is decided by dockerd's own restore.

Beside the machine's daemon, as docs.docker.com "Run multiple daemons" (engine/daemon/#run-multiple-daemons)
describes it: its own `--data-root`, `--exec-root`, `--pidfile` and socket, `--iptables=false` and
`--ip-masq=false` (a second daemon's bridge driver would flush the first one's DOCKER chains), and a
bridge of its own (`--bridge`, created here: dockerd creates only `docker0` itself). Its containerd
is started here too (`--containerd`): with none given, dockerd 20.10 uses a system containerd when
`/run/containerd/containerd.sock` exists (moby v20.10.24 `cmd/dockerd/daemon_unix.go`
`initContainerD`), which a power cut here must not kill. Containers' cgroups go under
`CGROUP_PARENT`, the cgroupfs driver, on any machine.

`power_cut` is what losing power does to Docker: SIGKILL to dockerd first (so it records nothing of
what follows), then containerd, then every process of their sessions (the shims, docker-proxy) and
every descendant of those (each container's processes: their parent is the shim); then what a reboot
does to the machine: nothing mounted under the daemon's folders any more, and `RUN_DIR` (on a real
host, /run, a tmpfs) empty. `boot` starts containerd and dockerd again; dockerd's `restore`
(moby v20.10.24 `daemon/daemon.go` 212-560) finds the containers it left running dead (containerd
knows no task: `libcontainerd/remote/client.go` 448-451, exit code 255), marks them stopped, and
starts those whose restart policy says so (`restartmanager/restartmanager.go` `ShouldRestart`
50-95: `always`; `unless-stopped` unless stopped by hand, `HasBeenManuallyStopped`, set by
`docker stop`/`kill`, `daemon/kill.go` 86-88; `on-failure` for a non-zero exit, 255 included) before
its API answers (`cmd/dockerd/daemon.go` 195 `NewDaemon` runs `restore`, 242 serves the API), so
`boot` returns with them started.

Images and containers stay in `DATA_DIR` between sessions, as in /var/lib/docker.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from sim.daemons import terminate
from sim.docker_cli import DOCKER_SOCKET, daemon_up, local_docker
from sim.errors import SimHostUnavailable

RUN_DIR = DOCKER_SOCKET.parent
"""What a reboot empties: the sockets, pid files, dockerd's exec-root and containerd's state."""
DATA_DIR = Path("/var/lib/ascend-fleet-sim")
"""What a reboot keeps: dockerd's data-root (images, containers) and containerd's root."""
BRIDGE = "afsim0"
BRIDGE_ADDRESS = "10.199.42.1/24"
"""The bridge its containers attach to (`--bridge`), outside Docker's default address pools."""
CGROUP_PARENT = "/ascend-fleet-sim"
CONTAINERD_SOCKET = RUN_DIR / "containerd" / "containerd.sock"
DAEMON_JSON = DATA_DIR / "daemon.json"
CONTAINERD_TOML = DATA_DIR / "containerd.toml"
BOOT_TIMEOUT = 120.0


class HostDocker:
    """containerd and dockerd of the simulated host, started at `start`, killed by `power_cut`,
    started again by `boot`, stopped (and their run folder and bridge removed) at `stop`."""

    socket = DOCKER_SOCKET

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._containerd: subprocess.Popen[bytes] | None = None
        self._dockerd: subprocess.Popen[bytes] | None = None
        self._made_bridge = False

    @property
    def running(self) -> bool:
        return self._dockerd is not None and self._dockerd.poll() is None

    def start(self) -> None:
        """The bridge (unless it exists), the configs, and both daemons; a daemon a crashed session
        left behind is cut off first."""
        stale = _pid_files()  # a daemon left behind by a session that crashed
        for pid in stale:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _kill_sessions(stale)
        _as_after_a_reboot()
        if not Path(f"/sys/class/net/{BRIDGE}").exists():
            for args in (["link", "add", "name", BRIDGE, "type", "bridge"], ["addr", "add", BRIDGE_ADDRESS, "dev", BRIDGE],
                         ["link", "set", BRIDGE, "up"]):  # fmt: skip
                made = subprocess.run(["ip", *args], capture_output=True, text=True)
                if made.returncode != 0:
                    raise SimHostUnavailable(f"cannot make the simulated host's bridge: ip {' '.join(args)}: {made.stderr.strip()}")
            self._made_bridge = True
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        DAEMON_JSON.write_text("{}\n")  # not the machine's /etc/docker/daemon.json
        CONTAINERD_TOML.write_text(
            "version = 2\n"
            f'root = "{DATA_DIR / "containerd"}"\n'
            f'state = "{RUN_DIR / "containerd"}"\n'
            'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
            f'[grpc]\n  address = "{CONTAINERD_SOCKET}"\n'
        )
        self.boot()

    def boot(self) -> datetime.datetime:
        """Start containerd, then dockerd, and wait until dockerd's API answers, that is until its
        `restore` has started the containers it restarts; the moment before dockerd started (UTC)."""
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        self._containerd = self._launch("containerd", ["containerd", "--config", str(CONTAINERD_TOML)])
        (RUN_DIR / "containerd.pid").write_text(f"{self._containerd.pid}\n")
        self._wait("containerd", self._containerd, CONTAINERD_SOCKET.exists)
        booted = datetime.datetime.now(datetime.timezone.utc)
        self._dockerd = self._launch("dockerd", [
            "dockerd", "--config-file", str(DAEMON_JSON),
            "--host", f"unix://{self.socket}", "--pidfile", str(RUN_DIR / "docker.pid"),
            "--data-root", str(DATA_DIR / "docker"), "--exec-root", str(RUN_DIR / "docker"),
            "--containerd", str(CONTAINERD_SOCKET),
            "--bridge", BRIDGE, "--iptables=false", "--ip-masq=false",
            "--exec-opt", "native.cgroupdriver=cgroupfs", "--cgroup-parent", CGROUP_PARENT,
        ])  # fmt: skip
        self._wait("dockerd", self._dockerd, lambda: daemon_up(self.socket))
        return booted

    def power_cut(self) -> None:
        """Every process of this Docker killed at once, as when the power goes, and the machine's
        state of a reboot: nothing mounted in the daemon's folders, the run folder empty."""
        daemons = [p for p in (self._dockerd, self._containerd) if p is not None]
        for proc in daemons:
            proc.kill()
        _kill_sessions([p.pid for p in daemons])
        for proc in daemons:
            proc.wait()
        self._dockerd = self._containerd = None
        _as_after_a_reboot()

    def stop(self) -> None:
        """Stop dockerd, then containerd (as a shutdown does), then remove the run folder and the
        bridge made here."""
        daemons = [p for p in (self._dockerd, self._containerd) if p is not None]
        for proc in daemons:
            terminate(proc, timeout=60)
        _kill_sessions([p.pid for p in daemons])  # the shims of containers a test left running
        self._dockerd = self._containerd = None
        _as_after_a_reboot()
        shutil.rmtree(RUN_DIR, ignore_errors=True)
        if self._made_bridge:
            subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)
            self._made_bridge = False

    def started_since(self, moment: datetime.datetime) -> list[str]:
        """Names of the containers (re)started at or after `moment`, sorted."""
        ids = local_docker("ps", "-aq", socket=self.socket).stdout.split()
        if not ids:
            return []
        lines = local_docker("inspect", "--format", "{{.Name}} {{.State.StartedAt}}", *ids, socket=self.socket).stdout
        return sorted(name.lstrip("/") for name, at in (line.split() for line in lines.splitlines()) if _instant(at) >= moment)

    def _launch(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        """A daemon in a session of its own (its children inherit it: `power_cut` finds them by it)."""
        with (self.workdir / f"{name}.log").open("ab") as log:
            return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def _wait(self, name: str, proc: subprocess.Popen[bytes], ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + BOOT_TIMEOUT
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.workdir / f"{name}.log").read_text(errors="replace")[-3000:]
                raise SimHostUnavailable(f"{name} of the simulated host did not come up; its log ends:\n{tail}")
            time.sleep(0.1)



def _as_after_a_reboot() -> None:
    """What a reboot leaves of the daemon's folders: nothing mounted there, the run folder empty."""
    for point in sorted(_mounts_under((RUN_DIR, DATA_DIR)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)
    if RUN_DIR.exists():
        for path in RUN_DIR.iterdir():
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _kill_sessions(sessions: list[int]) -> None:
    """SIGSTOP, then SIGKILL, every process of these sessions (dockerd's: docker-proxy; containerd's: the
    shims) and every descendant of those (a container's processes descend from its shim), until none is
    left. A session id is not given to a new process while any process of the session lives."""
    deadline = time.monotonic() + 30
    while True:
        table = _processes()
        doomed = {pid for pid, (_, sid, _) in table.items() if sid in sessions}
        grown = True
        while grown:
            more = {pid for pid, (ppid, _, _) in table.items() if ppid in doomed and pid not in doomed}
            grown, doomed = bool(more), doomed | more
        alive = [pid for pid in doomed if table[pid][2] != "Z"]
        if not alive:
            return
        if time.monotonic() > deadline:
            raise SimHostUnavailable(f"processes of the simulated host's Docker survive SIGKILL: {sorted(alive)}")
        # Every one stopped before any is killed, as the power goes for all at once: killed one by one, a
        # container's shell saw its rank process die first and ran its EXIT trap, releasing the NPU claim a
        # power cut leaves behind (tests/simhost/test_host_reboot.py found one claim of two).
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        time.sleep(0.05)


def _pid_files() -> list[int]:
    """dockerd's and containerd's pids as their pid files in the run folder have them, while those
    processes are still ours (their command line names `DATA_DIR`; a pid can be reused)."""
    pids = []
    for name in ("docker.pid", "containerd.pid"):
        with contextlib.suppress(OSError, ValueError):
            pid = int((RUN_DIR / name).read_text().strip())
            if str(DATA_DIR).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                pids.append(pid)
    return pids


def _processes() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, session id, state) of every process (proc(5), /proc/PID/stat)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(entry.name)] = (int(fields[1]), int(fields[3]), fields[0])
    return out


def _mounts_under(folders: tuple[Path, ...]) -> list[str]:
    """Mount points at or under these folders (proc(5), /proc/self/mountinfo: the fifth field)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if any(point == str(f) or point.startswith(f"{f}/") for f in folders):
            points.append(point)
    return points


def _instant(text: str) -> datetime.datetime:
    """A time as `docker inspect` prints it (RFC 3339, nanoseconds), to the microsecond."""
    head, _, fraction = text.rstrip("Z").partition(".")
    moment = datetime.datetime.fromisoformat(head).replace(tzinfo=datetime.timezone.utc)
    return moment + datetime.timedelta(microseconds=int((fraction + "000000")[:6]))
