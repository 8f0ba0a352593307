"""The docker CLI, run the two ways the simulated host needs it.

Over SSH (``DOCKER_HOST=ssh://...``, the environment `sim.sshd.Sshd.docker_env` makes), as a
deployer reaches the host; and on the daemon's local socket, which sees the same daemon for
tens of milliseconds a call instead of an SSH round trip: how the harness looks at containers
(state, logs, waits), builds the image and cleans up. A ``DOCKER_HOST`` or ``DOCKER_CONTEXT``
of the caller's never redirects the local calls.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from sim.errors import SimHostError

DOCKER_SOCKET = Path("/var/run/docker.sock")
LOCAL_DOCKER = ["docker", "-H", f"unix://{DOCKER_SOCKET}"]


def local_env() -> dict[str, str]:
    """This process's environment without what would point the docker CLI elsewhere."""
    return {k: v for k, v in os.environ.items() if k not in ("DOCKER_HOST", "DOCKER_CONTEXT")}


def docker(argv: list[str], env: Mapping[str, str], *, check: bool, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a docker command line (`argv` starts with ``docker``); with `check`, a non-zero exit raises."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise SimHostError(f"docker {' '.join(argv[1:])} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def local_docker(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``docker ARGS`` on the daemon's local socket."""
    return docker(LOCAL_DOCKER + list(args), local_env(), check=check, timeout=timeout)


def daemon_up() -> bool:
    """Whether a docker daemon answers on the local socket."""
    if shutil.which("docker") is None:
        return False
    try:
        info = [*LOCAL_DOCKER, "info", "--format", "{{.ID}}"]
        proc = subprocess.run(info, capture_output=True, timeout=20, env=local_env())
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0
