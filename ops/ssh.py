"""Running a shell script on a host: over SSH with the project's options, or locally.

One call is one round trip: the script goes to the remote shell on stdin, so
nothing is copied to the host first. Time is bounded twice: ssh's
`ConnectTimeout` (from `ascend-fleet:ssh`) for an address that does not answer,
and an overall deadline for a host that answers but hangs. An unreachable host
is a `RemoteResult` with `reachable=False`, never an exception, so callers
checking many hosts in parallel keep going.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from allocation.config import Ssh
from records.deployment import HostDeployment
from records.ssh_argv import script_argv

# ssh exits 255 when it could not connect or authenticate (or the connection broke).
SSH_FAILED = 255
DEFAULT_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class RemoteResult:
    reachable: bool
    returncode: int | None
    """Exit code of the script; None when it never ran or was cut off."""
    stdout: str
    stderr: str
    seconds: float
    error: str | None = None
    """Why the host could not be reached (or the script was cut off)."""


def known_hosts_text(ssh: Ssh) -> str:
    """The known_hosts file the system ssh reads (`ssh.knownHostsFile`, else ~/.ssh/known_hosts); "" if absent."""
    path = Path(ssh.known_hosts_file or "~/.ssh/known_hosts").expanduser()
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def run_script(hd: HostDeployment, script: str, *, timeout: float | None = None) -> RemoteResult:
    """Run a POSIX shell script on a deployment's host (locally when its Docker daemon is `unix://`)."""
    host = hd.host
    connect = hd.connect_timeout_seconds
    timeout = timeout if timeout is not None else max(DEFAULT_TIMEOUT_SECONDS, connect + 30.0)
    argv = script_argv(hd)
    if host.is_local():
        env = {**os.environ, "DOCKER_HOST": host.docker_url()}
    else:
        if shutil.which("ssh") is None:
            return RemoteResult(False, None, "", "", 0.0, "no ssh client on this machine (apt package openssh-client)")
        env = {k: v for k, v in os.environ.items() if k not in ("DOCKER_HOST", "DOCKER_CONTEXT")}
    start = time.monotonic()
    try:
        proc = subprocess.run(
            argv, input=script, capture_output=True, text=True, timeout=timeout, env=env, errors="replace"
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return RemoteResult(
            False, None, out, "", time.monotonic() - start,
            f"no answer within {timeout:.0f}s (ssh ConnectTimeout {connect}s)",
        )  # fmt: skip
    except OSError as exc:
        return RemoteResult(False, None, "", "", time.monotonic() - start, f"cannot run {argv[0]}: {exc.strerror}")
    seconds = time.monotonic() - start
    if not host.is_local() and proc.returncode == SSH_FAILED:
        reason = " ".join(proc.stderr.split()) or "ssh exited 255"
        return RemoteResult(False, None, proc.stdout, proc.stderr, seconds, reason)
    return RemoteResult(True, proc.returncode, proc.stdout, proc.stderr, seconds)
