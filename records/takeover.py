"""Takeover: the script that disables, for good, the containers a host `replaces`.

Prod's host already runs the original docker compose deployment (`model-emb-vl`,
`model-text`: `restart: always`, privileged, every `/dev/davinciN`, the API ports
7007, 9009 and 6006). A bare `docker stop` does not take such a container out of
service: Docker starts a hand-stopped `restart: always` container again when the
daemon restarts, i.e. after the next reboot ("If it is manually stopped, it is
restarted only when Docker daemon restarts", docs.docker.com, "Start containers
automatically"; checked here with Debian's dockerd 20.10.24, DOMAIN.md). So each
container is first given the restart policy `no` (`docker update --restart=no`),
then stopped, with its own stop timeout. It is kept, not removed: going back is
`docker update --restart=always NAME` and `docker start NAME` once the stack's own
containers are gone (docs/moving-from-compose.md).

Each name is a container's name and nothing else: the script acts on the full ID of the
container named exactly so (`records.runtime.named`), since Docker reads a name no container has
as an ID prefix, and `replaces: [cafe]` would otherwise disable whichever container's ID begins
with `cafe`.

The script runs after the host check and every pull (and router image build) of the host, and
before anything that needs the cards or ports (device-share, every container of the host): the
old services are down from then until the new containers answer /health (`downtime`). A second run changes nothing: a
container already disabled and stopped, or already removed, is left as it is. It
fails with one paragraph when Docker refuses a step. `takeover_problems` says, when the
plan is made, why a host's `replaces` cannot be run at all: it names one of the plan's
own containers there, or the script would be longer than a host can be handed. Pure:
builds text, runs nothing. `root` exists for tests only (a stand-in docker CLI under it).
"""

from __future__ import annotations

import shlex
from typing import Sequence

from allocation.config import Host
from records.containers import ContainerSpec
from records.runtime import DISABLE, RESTART_POLICY, STATUS, VAR, assign, inspect, named, no_restart, remove, rename, stop

PULLED_FIRST = "once every image of the host is present"
"""When the takeover runs (components.ascend_host): the pulls and router image builds come first."""
PAGE_BYTES = 4096
"""The smallest page of the kernels the scripts meet (x86-64, and aarch64 built with 4 KiB pages)."""
MAX_SCRIPT_BYTES = 32 * PAGE_BYTES - 1
"""The longest script a host can be handed. `pulumi up` runs each host script as one argument of
`sh -c`: pulumi-command's remote Command sends `create` as the SSH session's command
(provider/pkg/provider/remote/commandOutputs.go, `session.Run(cmd)`), which sshd runs as
`execve(shell, [shell, "-c", command])` (openssh-portable session.c `do_child`); the local one runs
`/bin/sh -c command` (local/commandOutputs.go). Linux refuses (E2BIG) an argument longer than
MAX_ARG_STRLEN, 32 pages (include/uapi/linux/binfmts.h), counting its terminating NUL (fs/exec.c
`copy_strings`: `strnlen_user`, then `valid_arg_len`)."""


def takeover_script(host: Host, names: Sequence[str], *, root: str = "") -> str:
    """A POSIX sh script: every container in `names` ends with restart policy `no` and stopped."""
    q = shlex.quote
    header = f"ascend-fleet: host {host.name} cannot take over from {', '.join(names)}:"
    advice = (
        "pulumi up changed no container on this host. Disable them by hand "
        f"({DISABLE}), or remove them ({remove()}), then run pulumi up again."
    )
    resolve = named('"$name"', VAR)
    return "\n".join([
        f"# ascend-fleet takeover for {host.name}: generated from the plan, do not edit.",
        assign(root),
        "problems=''",
        f"for name in {' '.join(q(n) for n in names)}; do",
        # Its error only when it fails: a warning on stderr must not become part of the ID.
        f"  if ! id=$({resolve} 2>/dev/null </dev/null); then",
        f'    problems="$problems\n  - $name: could not list the containers: $({resolve} 2>&1 >/dev/null </dev/null)"; continue',
        "  fi",
        f'  if [ -z "$id" ] || ! before=$({inspect(f"{STATUS}, restart {RESTART_POLICY}", VAR, "--format")} '
        '-- "$id" 2>/dev/null </dev/null); then',
        f'    echo "ascend-fleet: host {host.name}: no container is named $name (removed already): nothing to take over"',
        "    continue",
        "  fi",
        f'  if ! out=$({no_restart(VAR)} -- "$id" 2>&1 </dev/null); then',
        f'    problems="$problems\n  - $name ($before): {no_restart()} failed: $out"; continue',
        "  fi",
        f'  if ! out=$({stop(VAR)} -- "$id" 2>&1 </dev/null); then',
        f'    problems="$problems\n  - $name ($before): restart policy now no, but {stop()} failed: $out"; continue',
        "  fi",
        f'  echo "ascend-fleet: host {host.name}: took over from $name (was $before): restart policy no, stopped, kept"',
        "done",
        'if [ -n "$problems" ]; then',
        f"  printf '%s%s\\n%s\\n' {q(header)} \"$problems\" {q(advice)} >&2",
        "  exit 1",
        "fi",
    ]) + "\n"  # fmt: skip


def downtime(longest: tuple[int, tuple[str, ...]]) -> str:
    """How long the services of the containers a host takes over from are down: from the takeover
    until the new containers answer /health, i.e. their model loads, bounded by their start timeouts
    along the longest chain that starts one after another (`records.start_order.longest_start`). A
    bound, not a measurement: a model loads in what its own old container's log shows."""
    seconds, chain = longest
    if not chain:
        return "down for good: no model starts on the host"
    return (
        f"down from then until the new containers answer /health: at most {seconds} s "
        f"(startTimeoutSeconds of {', then '.join(chain)})"
    )


def takeover_problems(host: Host, script: str, containers: Sequence[tuple[str, ContainerSpec, str]]) -> list[str]:
    """Why the takeover of `host`, whose script is `script`, cannot run: a name it `replaces` is one
    the plan gives its own container there (`containers`: the host's, as `HostDeployment.containers`
    lists them; Docker names are unique per host, and the takeover would stop the plan's own), or the
    script is longer than `MAX_SCRIPT_BYTES`."""
    own = {spec.name: f"{name} {what}" for name, spec, what in containers}
    problems = [
        f"host {host.name} replaces {n}, the name of the plan's own container there ({own[n]}), which the "
        f"takeover would stop for good: rename the old container ({rename(n, n + '-old')}) and list that name "
        "under replaces"
        for n in host.replaces
        if n in own
    ]
    size = len(script.encode())
    if size > MAX_SCRIPT_BYTES:
        listed = sum(len(n.encode()) for n in host.replaces)
        problems.append(
            f"host {host.name}: its takeover script would be {size:,} bytes, more than the {MAX_SCRIPT_BYTES:,} a "
            "host script can have (pulumi up hands it to sh -c as one argument, and Linux takes at most 32 pages, "
            f"MAX_ARG_STRLEN, with its final NUL); replaces lists {len(host.replaces):,} names of {listed:,} bytes: "
            f"list fewer, run pulumi up, then list the rest in their place, or remove old containers by hand "
            f"({remove()})"
        )
    return problems
