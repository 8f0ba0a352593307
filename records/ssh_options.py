"""The options of every SSH client the project runs, from `ascend-fleet:ssh` and the host's key. Pure.

The docker provider's `ssh`, `doctor` and the host scripts run the system `ssh` with these, so the
host record (`HostDeployment.ssh_options`) carries them once, built here, and no client builds its own.
"""

from __future__ import annotations

from allocation.config import Ssh


def ssh_options(ssh: Ssh, host_key: str | None = None) -> list[str]:
    """The `ssh -o` style options shared by every SSH client the project runs; with a host key, that
    key is the only one trusted (OpenSSH 8.5+ `KnownHostsCommand`). BatchMode and ConnectTimeout make
    an unreachable host fail in seconds instead of waiting for a password."""
    opts = [
        "-o", f"StrictHostKeyChecking={ssh.strict_host_key_checking}",
        "-o", f"ConnectTimeout={ssh.connect_timeout_seconds}",
        "-o", "BatchMode=yes",
    ]  # fmt: skip
    if host_key:
        key = " ".join(host_key.split()[:2])  # without the comment: type and base64 only
        opts += ["-o", "UserKnownHostsFile=/dev/null", "-o", "GlobalKnownHostsFile=/dev/null"]
        opts += ["-o", f"KnownHostsCommand=/bin/echo %H {key}"]
    elif ssh.known_hosts_file:
        opts += ["-o", f"UserKnownHostsFile={ssh.known_hosts_file}"]
    if ssh.identity_file:
        opts += ["-i", ssh.identity_file]
    return opts
