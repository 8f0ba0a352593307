"""The daemons a simulated host runs on, and whether this machine can run them at all.

`unavailable_reason` names what is missing (root, a tool, its Debian package) so the tests skip
with a reason instead of failing half-way through `SimHost.start`. `Dockerd` is this machine's
docker daemon, for the dev stack (`python -m sim`): reused when up, or started and stopped again.
The simulated host's own daemon is in sim/host_docker.py, the sshd in sim/sshd.py.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from sim.docker_cli import MACHINE_SOCKET, daemon_up
from sim.errors import SimHostUnavailable
from sim.npu_image import BUSYBOX, FLOCK


def unavailable_reason() -> str | None:
    """Why the simulated host cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (device nodes, /usr/local/Ascend, a second sshd)"
    tools = {
        "docker": "docker.io",
        "dockerd": "docker.io",
        "containerd": "containerd",
        "ip": "iproute2",
        "ssh": "openssh-client",
        "ssh-keygen": "openssh-client",
    }
    missing = [f"{tool} (apt package {pkg})" for tool, pkg in tools.items() if shutil.which(tool) is None]
    if sshd_binary() is None:
        missing.append("sshd (apt package openssh-server)")
    if not BUSYBOX.exists():
        missing.append(f"{BUSYBOX} (apt package busybox-static)")
    if not FLOCK.exists():
        missing.append(f"{FLOCK} (apt package util-linux)")
    if missing:
        return "missing " + ", ".join(missing)
    return None


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sshd_binary() -> str | None:
    """The sshd to run: on PATH, else Debian's /usr/sbin/sshd (not on a user's PATH)."""
    for candidate in (shutil.which("sshd"), "/usr/sbin/sshd"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def terminate(proc: subprocess.Popen[bytes], timeout: float = 10) -> None:
    """SIGTERM a daemon we started, SIGKILL it after `timeout` seconds."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Dockerd:
    """This machine's docker daemon: the running one, else one started here (and stopped at `stop`)."""

    socket = MACHINE_SOCKET

    def __init__(self, workdir: Path) -> None:
        self.log_file = workdir / "dockerd.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start dockerd unless a daemon answers; wait up to 60 s for it."""
        if daemon_up(self.socket):
            return
        log = self.log_file.open("wb")
        self._proc = subprocess.Popen(
            ["dockerd"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + 60
        while not daemon_up(self.socket):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log_file.read_text(errors="replace")[-3000:]
                raise SimHostUnavailable(f"dockerd did not come up; its log ends:\n{tail}")
            time.sleep(0.5)

    def stop(self) -> None:
        """Stop the dockerd started here, if any."""
        if self._proc is not None:
            terminate(self._proc, timeout=30)
            self._proc = None
