"""The argv of a command run on a host: ssh with the host's options, or a local shell. Pure.

`ops.ssh` runs these; the docker-run export (`views.exports.render`) writes them into its
script, so the script reaches a host exactly as `doctor` and the host scripts do. Building
the words is text, so it lives here, beside the options (`records.ssh_options`), and the
exports need nothing from the code that reaches hosts.
"""

from __future__ import annotations

from typing import Sequence

from allocation.config import Host
from records.deployment import HostDeployment


def ssh_command(options: Sequence[str], host: Host, remote: str) -> list[str]:
    """The ssh argv that runs `remote` on `host` with the host's ssh options; `--` ends
    the options, so the destination is never read as one."""
    return [
        "ssh", *options,
        "-o", "LogLevel=ERROR",
        "-p", str(host.ssh_port),
        "--", f"{host.user}@{host.address}",
        remote,
    ]  # fmt: skip


def script_argv(hd: HostDeployment) -> list[str]:
    """The argv that runs a POSIX shell script read from stdin on a deployment's host: over ssh
    with the host's options, or a local shell when its Docker daemon is `unix://`."""
    return ["sh", "-s"] if hd.host.is_local() else ssh_command(hd.ssh_options or (), hd.host, "sh -s")
