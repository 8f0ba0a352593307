"""Device-share: the script that lets several non-privileged containers open one card.

A card opened by one container cannot be opened by a second one ("dcmi module
initialize failed. ret is -8005", vllm-ascend issues 632, 248, 2698) unless the
card is in Huawei's container-sharing mode, set with `npu-smi set -t
device-share -i CARD -c CHIP -d 1` (npu-smi command reference, Atlas A2 HDK). The
mode is off by default, off again after a reboot, can only change while no
container uses the card, and only root may set it. Enabling it asks "continue
setting?(Y/N)" on stdin (HAMi ascend-device-plugin internal/server/device_share.go
feeds "Y"); `npu-smi info -t device-share` answers `Device-share Status : True`.

On Atlas A3 (`board: a3`) npu-smi addresses chips as NPU ID and chip ID: card k (`/dev/davincik`)
is NPU k//2, chip k%2 (`npu-smi info -m` prints the mapping, and the host check compares it with
the plan's), and the mode is set for all chips of an NPU at once (`npu-smi set -t device-share -i
NPU -d 1`, "the container sharing mode for all chips on a specified device", npu-smi command
reference; with `-c` A3 answers "Setting device sharing for single chip is not allowed for this
product"). So on A3 the script switches an NPU without `-c`, reads each chip's state with it, and
counts the containers holding either chip as the NPU's holders.

The script puts exactly the host's shared cards into the mode, reading each
card's state first so a second run changes nothing, and installs a boot-time
systemd unit, ordered before docker.service, that does the same after every
reboot before Docker starts a container. When a card cannot be switched it stops
with one paragraph naming the host, the card, the containers holding it and what
to do, or, on a host with `heldCards: stopHolders`, stops the holders, switches the
card and starts them again. Pure: builds text, runs nothing.
"""

from __future__ import annotations

import shlex
from typing import Sequence

from allocation.config import Host, npu_chip
from records.containers import NPU_SMI
from records.runtime import (
    DAEMON_UNIT, DEVICES, DISABLE, NAME, NODE_UNITS, PRIVILEGED, SH, inspect_containers, named, start, stand_in,
    stop,
)  # fmt: skip

CHIP = 0  # one chip per 910B card
UNIT = "ascend-fleet-device-share.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT}"
BOOT_SCRIPT = "/usr/local/sbin/ascend-fleet-device-share"
DRIVER_WAIT_SECONDS = 600
"""How long the boot step waits for the driver to answer `npu-smi info -t device-share` before it gives
up and Docker starts the containers with the cards unshared. Which systemd unit (or init script) of
the Ascend driver loads it at boot is not published in anything read here, so the step cannot be
ordered after it; it polls every 2 s instead. Ten minutes covers a driver that loads its firmware
slowly; the cost of a longer wait is Docker starting that much later on a host whose driver never
answers. A oneshot unit has no start timeout of its own (systemd.service(5), `TimeoutStartSec=`:
"disabled by default" for `Type=oneshot`), so this is the bound."""
STATUS_KEY = "Device-share Status"
UNSUPPORTED = "does not support"

# `holders CARD`: the containers holding the card, space-separated; the host check reads them too.
# `$docker` is set only by tests (a CLI under their stand-in root), so they never see this machine's
# containers. `without "LIST" NAME...`: the names not in the space-separated LIST (the plan's own
# containers here, the host's `replaces` in the host check).
_CONTAINERS = inspect_containers(f"{NAME} {PRIVILEGED} {DEVICES}", wrap=" \\\n    ")
"""Each running container's name, whether it is privileged, and its devices."""
HOLDERS = f"""holders() {{
  command -v {SH} >/dev/null 2>&1 || return 0
  {_CONTAINERS} 2>/dev/null |
    awk -v dev="/dev/davinci$1" '{{ for (i = 3; i <= NF; i++) if ($i == dev) {{ print substr($1, 2); next }} }} $2 == "true" {{ print substr($1, 2) }}' |
    tr '\\n' ' ' | sed 's/ $//'
}}
without() {{ skip=" $1 "; shift; out=; for n in "$@"; do case $skip in *" $n "*) ;; *) out="${{out:+$out }}$n" ;; esac; done; printf '%s' "$out"; }}
"""
# Shared by the deploy-time run, the host check and the boot unit. `enable CARD` leaves the card in
# device-share mode, or prints why not and returns 1; with held=stopHolders it first stops the
# containers holding the card and starts them again after the switch, when all of them are the
# plan's own (`own`, their Docker names): a container outside the plan is never stopped or started
# (names from `docker inspect`: Docker allows only [a-zA-Z0-9_.-] in them, so they split safely), each
# stopped and started by the ID of the container of that exact name (`named`): one gone since it was
# listed is no other container's ID prefix. The holders are the containers with the card's device
# file, or privileged (those see every card). Nothing reads stdin: the script may arrive there.
_FUNCTIONS = HOLDERS + f"""oneline() {{ printf '%s' "$1" | tr '\\n\\t' '  ' | tr -s ' '; }}
state() {{ "$npu_smi" info -t device-share -i "$1" -c {CHIP} 2>&1 </dev/null; }}
switch() {{
  set_out=$(printf 'Y\\n' | "$npu_smi" set -t device-share -i "$1" -c {CHIP} -d 1 2>&1)
  case $(state "$1") in *"{STATUS_KEY}"*True*) return 0 ;; esac
  return 1
}}
enable() {{
  out=$(state "$1")
  case $out in *"{STATUS_KEY}"*True*) echo "card $1: device-share already on"; return 0 ;; esac
  case $out in *"{UNSUPPORTED}"*)
    echo "card $1 does not support container sharing (npu-smi: $(oneline "$out"))"; return 1 ;; esac
  if switch "$1"; then echo "card $1: device-share on"; return 0; fi
  who=$(holders "$1")
  others=$(without "$own" $who)
  if [ "$held" = stopHolders ] && [ -n "$who" ] && [ -n "$others" ]; then
    echo "card $1 is held by $others, outside the plan: pulumi up stops only the plan's own containers; take them out of service for good ({DISABLE}), or list them under the host's replaces"
    return 1
  fi
  if [ "$held" = stopHolders ] && [ -n "$who" ]; then
    echo "card $1: stopping $who to switch it to device-share mode"
    ids=$(for n in $who; do {named('"$n"', SH)} </dev/null 2>/dev/null; done)
    {stop(SH)} $ids </dev/null >/dev/null 2>&1
    switch "$1"; switched=$?
    {start(SH)} $ids </dev/null >/dev/null 2>&1 || echo "card $1: could not start $who again: {start()} them"
    if [ "$switched" -eq 0 ]; then echo "card $1: device-share on; $who started again"; return 0; fi
    who="$who (stopped and started again)"
  fi
  echo "card $1 could not be put into device-share mode (npu-smi: $(oneline "$set_out" | tail -c 300)); containers holding it: ${{who:-none found}}"
  return 1
}}
"""

# Atlas A3: the same functions addressing a card's NPU and chip (card k: NPU k//2, chip k%2), the
# mode set per NPU, and a card's holders those of either chip of its NPU (both must be free).
A3_ADDRESSING = {
    f'info -t device-share -i "$1" -c {CHIP}': "info -t device-share -i $(($1 / 2)) -c $(($1 % 2))",
    f'set -t device-share -i "$1" -c {CHIP} -d 1': "set -t device-share -i $(($1 / 2)) -d 1",
    '-v dev="/dev/davinci$1"': '-v dev="/dev/davinci$(($1 / 2 * 2))" -v peer="/dev/davinci$(($1 / 2 * 2 + 1))"',
    "if ($i == dev)": "if ($i == dev || $i == peer)",
}


def for_board(text: str, board: str) -> str:
    """`text` (the shell functions above) addressing the cards of `board`: A2's as they are."""
    if board == "a3":
        for a2, a3 in A3_ADDRESSING.items():
            text = text.replace(a2, a3)
    return text


def _cards_words(cards: Sequence[int]) -> str:
    return " ".join(str(int(c)) for c in cards)


def boot_script(cards: Sequence[int], *, root: str = "", board: str = "a2") -> str:
    """What the unit runs at boot: wait for the driver to answer (up to `DRIVER_WAIT_SECONDS`), then
    enable every card."""
    npu, chip = npu_chip(int(cards[0]), board)
    return "\n".join([
        "#!/bin/sh",
        "# ascend-fleet: put this host's shared NPU cards into device-share mode at boot.",
        "# Generated by ascend-fleet from the plan; do not edit.",
        f"npu_smi={shlex.quote(root + NPU_SMI)}",
        "held=refuse",
        for_board(_FUNCTIONS, board),
        "tries=0",
        f'until "$npu_smi" info -t device-share -i {npu} -c {chip} >/dev/null 2>&1; do',
        f'  tries=$((tries + 1)); [ "$tries" -lt {DRIVER_WAIT_SECONDS // 2} ] || break; sleep 2',
        "done",
        "status=0",
        f"for card in {_cards_words(cards)}; do enable \"$card\" || status=1; done",
        "exit $status",
    ]) + "\n"  # fmt: skip


def boot_unit() -> str:
    """A oneshot unit Docker waits for: the mode is back before any container restarts. On a Kubernetes
    node (docs/kubernetes.md) containerd and the kubelet start the containers, so it runs before them
    too. Ordering only acts between units started together (systemd.unit(5), `Before=`: "if ... both units
are being started"), so a unit the host does not have changes nothing."""
    return "\n".join([
        "[Unit]",
        "Description=ascend-fleet: put shared NPU cards into device-share mode before Docker starts",
        f"Before={' '.join((DAEMON_UNIT, *NODE_UNITS))}",
        "",
        "[Service]",
        "Type=oneshot",
        f"ExecStart={BOOT_SCRIPT}",
        "RemainAfterExit=yes",
        "",
        "[Install]",
        f"WantedBy=multi-user.target {DAEMON_UNIT}",
    ]) + "\n"  # fmt: skip


def device_share_script(host: Host, cards: Sequence[int], *, own: Sequence[str] = (), root: str = "") -> str:
    """A POSIX sh script run as root on the host before any container that uses `cards`. `own`: the
    Docker names of the plan's containers on the host, the only ones `heldCards: stopHolders` may stop.
    `root` exists for tests only (a temporary directory standing in for `/`)."""
    words = _cards_words(cards)
    q = shlex.quote
    script, unit = root + BOOT_SCRIPT, root + UNIT_PATH
    advice = (
        "The mode can only change while no container uses the card, and only root may change it: "
        f"take the containers named out of service for good ({DISABLE}; a bare {stop()} lasts until the "
        "next reboot), or set the host's heldCards to stopHolders for the plan's own, or give the services "
        "cards of their own, or set the host's cardSharing to privileged; then run pulumi up again."
    )
    return "\n".join([
        f"# ascend-fleet device-share for {host.name}: generated from the plan, do not edit.",
        f"npu_smi={q(root + NPU_SMI)}",
        f"held={q(host.held_cards)}",
        f"own={q(' '.join(own))}",
        *stand_in(root),
        for_board(_FUNCTIONS, host.board),
        'if [ "$(id -u)" -ne 0 ]; then',
        f"  echo {q(f'ascend-fleet: host {host.name}: setting device-share mode needs root; connect as root.')} >&2",
        "  exit 1",
        "fi",
        "problems=''",
        f"for card in {words}; do",
        '  out=$(enable "$card") || problems="$problems\n  - $out"',
        '  [ -n "$problems" ] || echo "$out"',
        "done",
        'if [ -n "$problems" ]; then',
        f"  printf '%s%s\\n%s\\n' {q(f'ascend-fleet: host {host.name} cannot share cards {words} between containers:')} "
        f'"$problems" {q(advice)} >&2',
        "  exit 1",
        "fi",
        f"mkdir -p {q(script.rsplit('/', 1)[0])} {q(unit.rsplit('/', 1)[0])}",
        f"cat > {q(script + '.tmp')} <<'ASCEND_FLEET_EOF'",
        boot_script(cards, root=root, board=host.board).rstrip("\n"),
        "ASCEND_FLEET_EOF",
        f"chmod 755 {q(script + '.tmp')} && mv {q(script + '.tmp')} {q(script)}",
        f"cat > {q(unit + '.tmp')} <<'ASCEND_FLEET_EOF'",
        boot_unit().rstrip("\n"),
        "ASCEND_FLEET_EOF",
        f"mv {q(unit + '.tmp')} {q(unit)}",
        "if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then",
        f"  systemctl daemon-reload </dev/null && systemctl enable {UNIT} </dev/null >/dev/null 2>&1 || "
        f"echo {q(f'ascend-fleet: warning: could not enable {UNIT}; after a reboot the cards are not shared until pulumi up runs again')} >&2",
        "else",
        f"  echo {q(f'ascend-fleet: warning: no systemd here: {UNIT} is installed but not enabled; run {BOOT_SCRIPT} at boot before Docker starts')} >&2",
        "fi",
        f"echo {q(f'ascend-fleet: host {host.name}: cards {words} in device-share mode, restored at boot by {UNIT}')}",
    ]) + "\n"  # fmt: skip


def removal_script() -> str:
    """Run when a host no longer shares cards: the boot unit goes; the cards keep their mode until
    the next reboot (it cannot change while containers use them)."""
    q = shlex.quote
    return "\n".join([
        "if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then",
        f"  systemctl disable {UNIT} </dev/null >/dev/null 2>&1 || true",
        "fi",
        f"rm -f {q(UNIT_PATH)} {q(BOOT_SCRIPT)}",
    ]) + "\n"  # fmt: skip
