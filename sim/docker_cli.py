"""The docker CLI, run the two ways the simulated host needs it.

Over SSH (``DOCKER_HOST=ssh://...``, the environment `sim.sshd.Sshd.docker_env` makes), as a
deployer reaches the host (its sshd points every session at the host's daemon); and on the
daemon's local socket, which sees the same daemon for tens of milliseconds a call instead of an
SSH round trip: how the harness looks at containers (state, logs, waits), builds the image and
cleans up. A ``DOCKER_HOST`` or ``DOCKER_CONTEXT`` of the caller's never redirects the local calls.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from sim.errors import SimHostError

DOCKER_SOCKET = Path("/run/ascend-fleet-sim/docker.sock")
"""The simulated host's own dockerd (sim/host_docker.py)."""
MACHINE_SOCKET = Path("/var/run/docker.sock")
"""This machine's dockerd: the dev stack's (`python -m sim`, sim/daemons.py `Dockerd`)."""


def local_argv(socket: Path = DOCKER_SOCKET) -> list[str]:
    """``docker`` on a daemon's local socket."""
    return ["docker", "-H", f"unix://{socket}"]


LOCAL_DOCKER = local_argv()


def local_env() -> dict[str, str]:
    """This process's environment without what would point the docker CLI elsewhere."""
    return {k: v for k, v in os.environ.items() if k not in ("DOCKER_HOST", "DOCKER_CONTEXT")}


def docker(argv: list[str], env: Mapping[str, str], *, check: bool, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a docker command line (`argv` starts with ``docker``); with `check`, a non-zero exit raises."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise SimHostError(f"docker {' '.join(argv[1:])} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def local_docker(
    *args: str, check: bool = True, timeout: float = 120, socket: Path = DOCKER_SOCKET
) -> subprocess.CompletedProcess[str]:
    """``docker ARGS`` on a daemon's local socket (the simulated host's own unless told)."""
    return docker(local_argv(socket) + list(args), local_env(), check=check, timeout=timeout)


def daemon_up(socket: Path = DOCKER_SOCKET) -> bool:
    """Whether a docker daemon answers on a local socket."""
    if shutil.which("docker") is None:
        return False
    try:
        info = [*local_argv(socket), "info", "--format", "{{.ID}}"]
        proc = subprocess.run(info, capture_output=True, timeout=20, env=local_env())
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0
