"""Card order: the deploy-time rank of the services on each shared card, kept on the host so that a
reboot loads them in that order too (issue 28).

`pulumi up` creates the services on a shared card one after another, in name order
(records.start_order): prod's bge-m3 (0.1 of card 0) loads before qwen-vl (0.85). After a reboot
Docker starts every container with a restart policy at once, and the start gate's card locks
(records.containers `START_GATE`) let in whichever takes the lock first. If the larger one loads
first, the smaller one can find less free HBM than its fraction: vLLM refuses to start then ("Free
memory on device ... on startup is less than desired GPU memory utilization", vLLM
`vllm/v1/worker/gpu_worker.py` and vllm-ascend `vllm_ascend/worker/worker.py` `_init_device`), since
the driver's own use and the neighbour's non-torch memory are not in the fractions.

The rank cannot be an input of the containers: a newcomer would re-create its neighbours (STYLE.md,
"Container inputs are a public API"). So it is registered on the host, in the lock folder every
container already mounts (`LOCK_DIR_HOST`, `/run/ascend-fleet/locks` inside):

- `order-card-N`: the container names on shared card N in rank order, one a line. Written by
  `order_script`, a host step that `pulumi up` runs after the host check and before the containers
  (a dependency of theirs, not an input: a new order re-creates nothing), and that `render`'s
  docker-run script runs too. Files of cards no longer shared are removed.
- `settled`: the host's boot id (`/proc/sys/kernel/random/boot_id`, the host kernel's, the same in
  every container) of a boot in which every container Docker restarts has started. The deploy-time
  step writes it for the boot it runs in (Docker finished restoring long ago); at boot, `BOOT_SCRIPT`
  (unit `UNIT`, ordered After=docker.service) writes it once every container in the order files that
  is running has stamped `started-NAME` with this boot's id, or after `BOOT_WAIT_SECONDS`.
  dockerd reports ready to systemd only after it has started the restart-policy containers: moby
  `daemon/daemon.go` `restore()` starts each of `restartContainers` (`containerStart`) and waits for
  all of them (`group.Wait()`) before it returns, and `cmd/dockerd/daemon.go` calls `notifyReady()`
  only after `daemon.NewDaemon` (which runs `restore`) has returned. The step still checks each
  running container's own stamp, since Docker's start comes before the gate's first line.
- Per container, from its own gate: the lifetime lock `alive-NAME`, `started-NAME` and
  `served-NAME` (boot id). A gate waits for each predecessor on each of its cards until it has served
  this boot, or is not alive while this boot is settled, or for its start timeout at most.

So after a reboot the instances on a card load in rank order; a neighbour stopped by hand (Docker
does not restart it), removed from the plan (not in the order file) or whose container is gone
(never alive) blocks no one once the boot is settled. Limits: a host without systemd has no boot
step (the step warns); there, after a reboot, a successor whose predecessor does not come back waits
its start timeout, then goes on to the card locks. A stamp of another boot counts as none, so
nothing from before a reboot is trusted. The rank is name order, one order on every card, so no two
gates wait for each other. Pure: builds text, runs nothing. `root` exists for tests only (a
temporary directory standing in for `/`).
"""

from __future__ import annotations

import re
import shlex
from typing import Mapping, Sequence

from allocation.config import Host
from allocation.errors import FleetError
from allocation.plan import HostPlan
from records.containers import BOOT_ID_FILE, LOCK_DIR_HOST, ORDER_PREFIX, SETTLED, STARTED_PREFIX
from records.runtime import DAEMON_UNIT, RUNNING, SH, info, inspect, named
from records.start_order import card_ranks

UNIT = "ascend-fleet-start-order.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT}"
BOOT_SCRIPT = "/usr/local/sbin/ascend-fleet-start-order"
BOOT_WAIT_SECONDS = 120
"""How long the boot step waits, in all, for running containers to stamp `started`."""
DOCKER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*\Z")
"""The characters Docker allows in a container name (moby `daemon/names/names.go` `RestrictedNameChars`):
such a name splits and quotes safely in the scripts and the gate."""
_END = "ASCEND_FLEET_EOF"


def card_orders(host_plan: HostPlan) -> dict[int, tuple[str, ...]]:
    """Shared card -> the names of the containers on it, in deploy-time rank. A container keeps the
    name it was created with (a renamed service's `previousNames`); the rank follows service names."""
    orders = {
        card: tuple(ps.instance.original_name for ps in ranked) for card, ranked in card_ranks(host_plan).items()
    }
    bad = sorted({n for names in orders.values() for n in names if not DOCKER_NAME.fullmatch(n)})
    if bad:
        raise FleetError(
            f"host {host_plan.host.name}: container names {', '.join(map(repr, bad))} are not Docker names "
            "([a-zA-Z0-9][a-zA-Z0-9_.-]*), so the start order of the shared cards cannot name them; rename the services."
        )
    return orders


def boot_script(*, root: str = "") -> str:
    """What the unit runs once Docker is up: mark this boot settled when every container in the
    order files that runs has started its gate. Reads only the lock folder, so it never changes."""
    d = root + LOCK_DIR_HOST
    resolve = named('"$name"', SH)
    return "\n".join([
        "#!/bin/sh",
        "# ascend-fleet: after Docker has restarted its containers at boot, mark the boot settled for the",
        "# start gates (records.card_order). Generated by ascend-fleet; do not edit.",
        f"dir={shlex.quote(d)}",
        f"boot=$(cat {BOOT_ID_FILE})",
        "tries=0",
        f"until {info()} >/dev/null 2>&1 </dev/null; do",
        f'  tries=$((tries + 1)); [ "$tries" -lt {BOOT_WAIT_SECONDS} ] || break; sleep 1',
        "done",
        f'for name in $(cat "$dir"/{ORDER_PREFIX}* 2>/dev/null | sort -u); do',
        "  case $name in '' | *[!A-Za-z0-9_.-]*) continue ;; esac",
        # By the ID of the container of that exact name: a name no container has is no other's ID prefix.
        f'  id=$({resolve} 2>/dev/null </dev/null) && [ -n "$id" ] || continue',
        f'  until [ "$({inspect(RUNNING, SH)} "$id" 2>/dev/null </dev/null)" != true ] ||',
        f'    [ "$(cat "$dir/{STARTED_PREFIX}$name" 2>/dev/null)" = "$boot" ]; do',
        f'    tries=$((tries + 1)); [ "$tries" -lt {BOOT_WAIT_SECONDS} ] || break',
        "    sleep 1",
        "  done",
        "done",
        f'[ "$tries" -lt {BOOT_WAIT_SECONDS} ] || echo "ascend-fleet: start order: gave up waiting for the containers '
        f'to start after {BOOT_WAIT_SECONDS}s; marking the boot settled" >&2',
        f'printf \'%s\\n\' "$boot" > "$dir/{SETTLED}.tmp" && mv "$dir/{SETTLED}.tmp" "$dir/{SETTLED}"',
        'echo "ascend-fleet: start order: boot $boot settled"',
    ]) + "\n"  # fmt: skip


def boot_unit() -> str:
    """A oneshot unit run once Docker is up (and has restarted its containers)."""
    return "\n".join([
        "[Unit]",
        "Description=ascend-fleet: tell the start gates that Docker has restarted its containers",
        f"Wants={DAEMON_UNIT}",
        f"After={DAEMON_UNIT}",
        "",
        "[Service]",
        "Type=oneshot",
        f"ExecStart={BOOT_SCRIPT}",
        "RemainAfterExit=yes",
        f"TimeoutStartSec={BOOT_WAIT_SECONDS * 2 + 60}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]) + "\n"  # fmt: skip


def _write(path: str, text: str, mode: str | None = None) -> list[str]:
    """Lines that write `text` to `path` through a temporary file (a reader never sees half of it)."""
    q = shlex.quote
    chmod = [f"chmod {mode} {q(path + '.tmp')}"] if mode else []
    return [f"cat > {q(path + '.tmp')} <<'{_END}'", text.rstrip("\n"), _END, *chmod, f"mv {q(path + '.tmp')} {q(path)}"]


def order_script(host: Host, orders: Mapping[int, Sequence[str]], *, root: str = "") -> str:
    """A POSIX sh script run as root on the host before its containers: writes the order files
    (and removes those of cards no longer shared), marks the running boot settled, installs the
    boot step."""
    q = shlex.quote
    d, script, unit = root + LOCK_DIR_HOST, root + BOOT_SCRIPT, root + UNIT_PATH
    keep = " | ".join(f"{ORDER_PREFIX}{int(card)}" for card in sorted(orders)) or "-"
    lines = [
        f"# ascend-fleet start order for {host.name}: generated from the plan, do not edit.",
        "set -e",
        f"dir={q(d)}",
        f"mkdir -p {q(d)} {q(script.rsplit('/', 1)[0])} {q(unit.rsplit('/', 1)[0])}",
    ]
    for card, names in sorted(orders.items()):
        path = f"{d}/{ORDER_PREFIX}{int(card)}"
        lines += [f"printf '%s\\n' {' '.join(map(q, names))} > {q(path + '.tmp')}", f"mv {q(path + '.tmp')} {q(path)}"]
    lines += [
        f'for f in "$dir"/{ORDER_PREFIX}*; do',
        f'  case ${{f##*/}} in {keep}) ;; *) rm -f "$f" ;; esac',
        "done",
        f'printf \'%s\\n\' "$(cat {BOOT_ID_FILE})" > "$dir/{SETTLED}.tmp" && mv "$dir/{SETTLED}.tmp" "$dir/{SETTLED}"',
        *_write(script, boot_script(root=root), "755"),
        *_write(unit, boot_unit()),
        "if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then",
        f"  systemctl daemon-reload </dev/null && systemctl enable {UNIT} </dev/null >/dev/null 2>&1 || "
        f"echo {q(f'ascend-fleet: warning: could not enable {UNIT}; after a reboot a service waits its start timeout for a stopped neighbour before it')} >&2",
        "else",
        f"  echo {q(f'ascend-fleet: warning: no systemd here: {UNIT} is installed but not enabled; run {BOOT_SCRIPT} at boot once Docker is up')} >&2",
        "fi",
        f"echo {q(f'ascend-fleet: host {host.name}: start order of cards {sorted(orders)} written, restored at boot by {UNIT}')}",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def removal_script(*, root: str = "") -> str:
    """Run when the host no longer shares cards: the order files, the stamp and the boot step go."""
    q = shlex.quote
    d = root + LOCK_DIR_HOST
    return "\n".join([
        "if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then",
        f"  systemctl disable {UNIT} </dev/null >/dev/null 2>&1 || true",
        "fi",
        f"rm -f {q(root + UNIT_PATH)} {q(root + BOOT_SCRIPT)} {q(d)}/{ORDER_PREFIX}* {q(d + '/' + SETTLED)}",
    ]) + "\n"  # fmt: skip
