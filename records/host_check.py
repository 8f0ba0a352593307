"""The host check: a shell script that proves a host can run its planned containers.

Docker would refuse a container whose `/dev/davinciN` or bind-mount source is
missing, but only after the image pull and with a terse "no such file or
directory"; a 27B model would then fail minutes later on a missing weights
folder. The check runs on the host before any image or container of the host
(over SSH, or locally for a `unix://` docker host), lists every missing piece
at once, says which service needs it, and exits 1. It creates one thing: the
folder of the start gate's card locks, which every container mounts.

What is checked comes from the containers' specs, the same records the containers
are built from, so the check can never ask for less than the containers use: the
devices and driver paths are the rows of the host requirements table
(records.host_requirements) for the cards the specs use, the table `doctor` reads too.
Pure: builds text, runs nothing. `root` exists for tests only (a temporary
directory standing in for `/`); the program never passes it.
"""

from __future__ import annotations

import ipaddress
import shlex

from typing import Sequence

from allocation.config import A3_CHIPS, Host
from allocation.hbm import HBM_BYTES_FLOOR, HBM_TOLERANCE
from records.containers import DRIVER_MOUNTS, HCCN_CONF, LABEL_PREFIX, LOCK_DIR_HOST, NPU_SMI, ContainerSpec, created_on_host
from records.host_requirements import DEVICE, cards_of, requirements
from records.device_share import HOLDERS, STATUS_KEY, UNSUPPORTED, for_board
from records.runtime import (
    DAEMON_CONFIG, DEVICES, DISABLE, NAME, PORTS, PRIVILEGED, PROVIDER, RESTART_POLICY, SERVER_VERSION, STATUS,
    inspect_containers, label, path, remove, stand_in, version,
)  # fmt: skip
from records.health import START_INTERVAL_ENGINE, has_start_interval
from allocation.plan import MemberPlan, ServicePlan
from allocation.windows import KINDS

RANGE_ENV = tuple(k.env for k in KINDS if k.hccl_range and k.env)
DMI_PRODUCT = "/sys/class/dmi/id/product_name"
# CANN's env-var reference (envref_07_0143/0144): on Atlas A2 the socket-range variables are
# supported only on these products; the part of each name a DMI product name is matched on.
SOCKET_RANGE_BOARDS = {"Atlas 800T A2": "800T A2", "Atlas 900 A2 PoD": "900 A2", "Atlas 200T A2 Box16": "200T A2"}


Containers = Sequence[tuple[ServicePlan | MemberPlan, ContainerSpec]]
"""A host's services, members of multi-host services and prefill and decode instances, each with its container."""


def _needs(containers: Containers) -> tuple[dict, dict, dict, dict]:
    """Paths the host's containers need -> the containers needing them (by the docker name, which
    `docker ps` shows and a rename keeps, so a rename leaves the check as it was), by kind: devices,
    model folders, other mounts, and the compile caches the check creates."""
    devices: dict[str, list[str]] = {}
    models: dict[str, list[str]] = {}
    mounts: dict[str, list[str]] = {}
    caches: dict[str, list[str]] = {}
    for ps, spec in containers:
        for device in spec.device_files:
            devices.setdefault(device, []).append(spec.name)
        for mount in spec.mounts:
            if mount.source in DRIVER_MOUNTS or mount.source in (LOCK_DIR_HOST, HCCN_CONF):
                continue  # checked, or created, once for every service; hccn.conf once for every instance
            kind = caches if created_on_host(mount.source) else models if mount.source == ps.service.model else mounts
            kind.setdefault(mount.source, []).append(spec.name)
    return devices, models, mounts, caches


def _q(text: str) -> str:
    return shlex.quote(text)


def _path_checks(needs: tuple[dict, dict, dict, dict], root: str) -> list[str]:
    devices, models, mounts, caches = needs
    lines = []
    # The cards these containers use, not every card of the host: a dead card nobody uses must not
    # block a deploy. Only devices some container here uses are asked for, so a host without
    # containers is not asked for the control devices either.
    for req in requirements(cards_of(devices)):
        if req.what == DEVICE and req.path not in devices:
            continue
        why = f"used by {', '.join(devices[req.path])}" if req.what == DEVICE else "mounted read-only into every container"
        lines.append(f"{req.test(root + req.path)} || missing {_q(req.missing(root + req.path, why))}")
    # The start gate's card locks (records.containers): created, since every container mounts the
    # folder and Docker refuses a bind mount whose source is missing.
    locks = root + LOCK_DIR_HOST
    text = f"cannot create the start gate's lock folder {locks}: create it once as root (install -d {locks})"
    lines.append(f"mkdir -p {_q(locks)} 2>/dev/null || missing {_q(text)}")
    # The compile caches (records.containers.cache_dir): created, never required, so a new service
    # finds its own empty one.
    for cache in sorted(caches):
        text = f"cannot create the compile cache {root + cache} (used by {', '.join(caches[cache])}): create it as root"
        lines.append(f"mkdir -p {_q(root + cache)} 2>/dev/null || missing {_q(text)}")
    npu_smi = root + NPU_SMI
    lines.append(f"[ ! -e {_q(npu_smi)} ] || [ -x {_q(npu_smi)} ] || missing {_q(f'{npu_smi} is not executable')}")
    for folder in sorted(models):
        text = f"missing model directory {root + folder} (used by {', '.join(models[folder])})"
        lines.append(f"[ -d {_q(root + folder)} ] || missing {_q(text)}")
    for source in sorted(mounts):
        text = f"missing mount source {root + source} (used by {', '.join(mounts[source])})"
        lines.append(f"[ -e {_q(root + source)} ] || missing {_q(text)}")
    # npu-smi only answers when the driver and the cards are healthy; its error
    # codes (e.g. -8005: a card held by another container) are worth showing.
    return lines + [
        f"if [ -x {_q(npu_smi)} ] && ! out=$({_q(npu_smi)} info 2>&1); then",
        f'  missing "{npu_smi} info failed: $(printf \'%s\\n\' "$out" | tail -n 3 | tr \'\\n\' \' \')"',
        "fi",
    ]


def _daemon_log_check(containers: Containers, root: str) -> list[str]:
    """dockerd merges daemon.json's log-opts into a container whose log driver is the daemon's
    default; the provider reads the merged map back and, log_opts forcing replacement, would
    replace every container on every `pulumi up`. So extra keys there stop the deployment."""
    own = sorted({key for _, spec in containers for key in spec.log_opts})
    daemon = _q(root + DAEMON_CONFIG)
    flat = f"tr -d '\\n' < {daemon}"
    return [
        f"if [ -r {daemon} ]; then",
        f"  driver=$({flat} | sed -n 's/.*\"log-driver\"[[:space:]]*:[[:space:]]*\"\\([^\"]*\\)\".*/\\1/p')",
        f"  opts=$({flat} | sed -n 's/.*\"log-opts\"[[:space:]]*:[[:space:]]*{{\\([^}}]*\\)}}.*/\\1/p')",
        "  extra=$(printf '%s' \"$opts\" | grep -o '\"[^\"]*\"[[:space:]]*:' | tr -d '\":[:blank:]' | "
        + "grep -vx " + " ".join(f"-e {_q(k)}" for k in own) + " | tr '\\n' ' ')",
        '  if [ "${driver:-json-file}" = json-file ] && [ -n "$extra" ]; then',
        f'    missing "{DAEMON_CONFIG} sets log-opts $extra for every json-file container; the {PROVIDER} '
        + "reads them back as a change and would replace every container on every pulumi up: remove them there, "
        + 'or set the same keys in ascend-fleet:defaults.logOpts"',
        "  fi",
        "fi",
    ]


def _board_warning(root: str) -> list[str]:
    """CANN documents HCCL_*_SOCKET_PORT_RANGE on A2 only for three products; elsewhere HCCL may
    ignore them. How each board names itself in DMI is not documented, so this only warns."""
    product = _q(root + DMI_PRODUCT)
    known = "|".join(f"*{_q(b)}*" for b in SOCKET_RANGE_BOARDS.values())
    return [
        f"product=$(cat {product} 2>/dev/null)",
        f'case "$product" in {known}) ;; *) echo "ascend-fleet: warning: the board is \'${{product:-unknown}}\', '
        + f"not one of {', '.join(SOCKET_RANGE_BOARDS)} for which CANN documents {' and '.join(RANGE_ENV)}; "
        + 'check that HCCL honours them here" >&2 ;; esac',
    ]


def _sharing_checks(host: Host, shared_cards: Sequence[int], own: Sequence[str], root: str) -> list[str]:
    """Shared cards need the container-sharing mode; a board without it is refused here, before
    any pull (the mode itself is set by the device-share command that runs next). So is a card not
    yet in the mode that running containers hold, unless the host lets `pulumi up` stop them
    (`heldCards: stopHolders`): the mode cannot change under them, and stopping here, before any
    container of the host changes, never leaves the host half deployed. Each holder is named with the
    way out that applies to it: `heldCards: stopHolders` stops only the plan's own containers (`own`,
    their Docker names; records.device_share), so one outside the plan is to be listed under
    `replaces` or taken out of service by hand."""
    npu_smi = _q(root + NPU_SMI)
    refuse = shared_cards and host.held_cards == "refuse"
    lines = [for_board(HOLDERS, host.board).rstrip("\n")] if refuse else []
    for card in shared_cards:
        text = (
            f"card {card} is shared but does not support container sharing (device-share): "
            f"set host {host.name}'s cardSharing to privileged, or give its services cards of their own"
        )
        lines += [
            f"state=$({npu_smi} info -t device-share -i {host.npu_chip(int(card))[0]} -c {host.npu_chip(int(card))[1]} 2>&1 </dev/null)",
            f'case $state in *{_q(UNSUPPORTED)}*) missing {_q(text)} ;; esac',
            f'sharing="$sharing card {int(card)} $(printf \'%s\' "$state" | '
            f"sed -n 's/.*{STATUS_KEY}[[:space:]]*:[[:space:]]*//p')\"",
        ]
        if host.held_cards == "refuse":
            before = f"card {card} must go into device-share mode, but running container(s) "
            after = (
                f" hold it, and the mode can only change while no container uses the card: set host {host.name}'s "
                "heldCards to stopHolders to let pulumi up stop them (the plan's own containers only), switch the "
                f"card and start them again, or take them out of service for good ({DISABLE})"
            )
            outside = (
                f" outside the plan hold it, and the mode can only change while no container uses the card: list "
                f"them under host {host.name}'s replaces to let pulumi up take them out of service, or do it by "
                f"hand ({DISABLE}); heldCards: stopHolders stops only the plan's own containers"
            )
            # The containers the host replaces are disabled by the takeover step before the switch.
            replaced = _q(" ".join(host.replaces))
            lines += [
                f'case $state in *{_q(STATUS_KEY)}*True*) ;; *) who=$(without {replaced} $(holders {int(card)})); '
                f'others=$(without {_q(" ".join(own))} $who); who=$(without "$others" $who); '
                f'[ -z "$others" ] || missing {_q(before)}"$others"{_q(outside)}; '
                f'[ -z "$who" ] || missing {_q(before)}"$who"{_q(after)} ;; esac',
            ]
    return lines


# One line per container outside the stack that holds, or after a reboot would hold, a planned card or
# port: running (or restarting, paused), or stopped with restart policy `always`, which Docker starts
# again when the daemon restarts, even after `docker stop` (docs.docker.com, "Start containers
# automatically"). Fields are split on `|`, which Docker allows in no name, device path or port; the
# stack label comes last, so a label holding `|` is read whole. Containers of this stack (by their
# label) are pulumi's own: those it removes go after it creates, and a plan that reuses their cards or
# ports says so in `plan --against`. The awk program reads its settings from the environment, where
# no escape sequence is interpreted (awk -v would).
_FIELDS = (NAME, STATUS, RESTART_POLICY, PRIVILEGED, DEVICES, PORTS, label(f"{LABEL_PREFIX}.stack"))
_INSPECT = inspect_containers("|".join(_FIELDS), stopped=True) + " 2>/dev/null"
_HOLDING = (
    "awk -F'|' '"
    '{ name = substr($1, 2); label = $7; for (i = 8; i <= NF; i++) label = label "|" $i; '
    'if (label == ENVIRON["stack"] || index(ENVIRON["skip"], " " name " ")) next; '
    'active = ($2 == "running" || $2 == "restarting" || $2 == "paused"); back = (!active && $3 == "always"); '
    'if (!active && !back) next; held = ""; '
    'if ($4 == "true") held = "every card (privileged)"; '
    'else { n = split($5, d, " "); for (i = 1; i <= n; i++) if (index(ENVIRON["cards"], " " d[i] " ")) '
    'held = held (held == "" ? "" : " ") d[i] }; '
    'n = split($6, p, " "); for (i = 1; i <= n; i++) if (index(ENVIRON["ports"], " " p[i] " ")) '
    'held = held (held == "" ? "" : " ") "port " p[i]; '
    'if (held == "") next; advice = ENVIRON["advice"]; gsub(/NAME/, name, advice); '
    'print "  - container " name " outside the plan (" $2 ", restart " ($3 == "" ? "no" : $3) '
    '(back ? ": a reboot starts it again" : "") ") holds " held advice }\''
)


def _foreign_checks(host: Host, stack: str, containers: Containers, ports: Sequence[int]) -> list[str]:
    """Containers outside the plan on the planned cards or ports stop the deployment, unless the host
    `replaces` them. `docker stop` alone is not a way out: a reboot would start them again."""
    cards = sorted({d for _, spec in containers for d in spec.device_files if d.removeprefix("/dev/davinci").isdigit()})
    advice = (
        f": take it out of service for good ({DISABLE}, or {remove()}), or list it under host "
        f"{host.name}'s replaces to let pulumi up do that"
    )
    settings = {
        "stack": stack,
        "skip": f" {' '.join(host.replaces)} ",
        "cards": f" {' '.join(cards)} ",
        "ports": f" {' '.join(map(str, sorted(ports)))} ",
        "advice": advice,
    }
    env = " ".join(f"{k}={_q(v)}" for k, v in settings.items())
    return [
        f"foreign=$({_INSPECT} | {env} {_HOLDING})",
        '[ -z "$foreign" ] || problems="$problems\n$foreign"',
    ]


# `npu-smi info`: a chip row's cells are chip (A2) or chip and Phy-ID (A3), Bus-Id, then AICore,
# Memory-Usage and HBM-Usage `used / total` in MB; the NPU row above it starts with the NPU ID and
# name (tests/data/npu-smi/*.txt; A3 screens in vllm-ascend issues 6245, 2035). Prints
# "card total_mb" for every chip row before the process table.
HBM_AWK = r"""/Process id/ { exit }
{ if (split($0, cell, "|") < 5) next; split(cell[2], id, " ") }
cell[3] ~ /[0-9A-Fa-f]+:[0-9A-Fa-f]+:/ { m = split(cell[4], hbm, "/"); print (id[2] != "" ? id[2] : npu), hbm[m] + 0; next }
id[1] ~ /^[0-9]+$/ && id[2] != "" { npu = id[1] }"""
# `npu-smi info -m`: a header `NPU ID  Chip ID  Chip Logic ID  [Chip Phy-ID]  Chip Name`, then one
# row per chip; management chips (Mcu) have `-` for their ids (vllm-ascend
# tests/ut/test_cpu_binding.py: A2 `0 0 0 Ascend` / `0 1 - Mcu`, A3 `0 0 0 0 Ascend` / `0 1 1 1
# Ascend` / `0 2 - - Mcu`). The card (`/dev/davinciN`) is the Phy-ID, else the logic ID. Prints
# "card npu chip" for every compute chip.
MAP_AWK = r"""/NPU ID/ && /Chip ID/ { phy = ($0 ~ /Phy-ID/); next }
$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/ { print (phy && $4 ~ /^[0-9]+$/ ? $4 : $3), $1, $2 }"""


# Shared by the two awk judges below: `want` (the planned cards) from -v want="0 1", and `say`,
# which joins the problems into the host check's list ("\n  - " between them).
_JUDGE_HEAD = r"""BEGIN { split(want, w, " "); for (i in w) wanted[w[i]] = 1 }
function say(text) { printf "%s%s", (n++ ? "\n  - " : ""), text }
"""
# Input: "card total_mb" (HBM_AWK). -v mib (hbmGiB x 1024), tol, bytes (hbmBytes, 0 when unset), floor.
# allocation.hbm `card_passes` is this judgement in Python, which `plan` asks of the declarations.
HBM_JUDGE = _JUDGE_HEAD + r"""$1 in wanted && ($2 < mib * (1 - tol) || $2 > mib * (1 + tol)) {
  say("card " $1 " has " $2 " MB of HBM (npu-smi info), but host " host " declares hbmGiB: " mib / 1024 " (" mib " MB): set its hbmGiB to " int($2 / 1024 + 0.5) " (and hbmBytes to what the runtime reports for such a card), or the plan sizes KV caches this card does not have"); next
}
$1 in wanted && bytes > 0 && (bytes > $2 * 1048576 || bytes < $2 * 1048576 * floor) {
  say("card " $1 " has " $2 " MB of HBM (npu-smi info), but host " host " declares hbmBytes: " bytes ", not " floor * 100 "-100% of it: set its hbmBytes to the total the runtime reports (vLLM logs it), or remove it")
}"""
# Input: "card npu chip" (MAP_AWK). -v board, other, npus (the other board's chip count), host.
BOARD_JUDGE = _JUDGE_HEAD + r"""{ card[NR] = $1; npu[NR] = $2; chip[NR] = $3; if (++chips[$2] > most) most = chips[$2] }
END {
  if (!NR) exit
  if ((most > 1) != (board == "a3")) {
    say("npu-smi info -m shows " most " compute chip(s) per NPU ID, an Atlas " toupper(other) " board, but host " host " declares board: " board ": set its board to " other " (npus: " npus "); the card addressing, the sharing unit and the default image follow it")
    exit
  }
  for (r = 1; r <= NR; r++) {
    if (!(card[r] in wanted)) continue
    want_npu = board == "a3" ? int(card[r] / 2) : card[r]
    want_chip = board == "a3" ? card[r] % 2 : 0
    if (npu[r] != want_npu || chip[r] != want_chip)
      say("card " card[r] " is NPU " npu[r] " chip " chip[r] " on host " host " (npu-smi info -m), but board " board " addresses it as NPU " want_npu " chip " want_chip ", so npu-smi would set and read another card: check the board and the /dev/davinci numbering")
  }
}"""


def _judged(name: str, npu_smi: str, parse: str, judge: str, variables: dict[str, object]) -> list[str]:
    """sh running `npu-smi info ... | awk parse | awk judge`, whose problems join the host check's list."""
    assigned = " ".join(f"-v {k}={_q(str(v))}" for k, v in variables.items())
    return [
        f'{name}=$({npu_smi} 2>/dev/null </dev/null | awk {_q(parse)} | awk {assigned} {_q(judge)})',
        f'[ -z "${name}" ] || missing "${name}"',
    ]


def _hbm_checks(host: Host, cards: Sequence[int], root: str) -> list[str]:
    """Each planned card's HBM as npu-smi shows it against `hbmGiB` (and `hbmBytes` when set): the
    capacity check sizes every KV cache from them, so a 32 GB card declared as 64 would be planned
    a cache it does not have."""
    if not cards:
        return []
    npu_smi = _q(root + NPU_SMI)
    variables = {
        "want": " ".join(map(str, cards)), "host": host.name, "mib": host.hbm_gi_b * 1024,
        "tol": HBM_TOLERANCE, "bytes": host.hbm_bytes or 0, "floor": HBM_BYTES_FLOOR,
    }  # fmt: skip
    return _judged("hbm", f"{npu_smi} info", HBM_AWK, HBM_JUDGE, variables)


def _board_checks(host: Host, cards: Sequence[int], root: str) -> list[str]:
    """The board npu-smi shows against `board`: two compute chips under one NPU ID is Atlas A3, one is
    A2 (`npu-smi info -m`). Then each planned card's NPU ID and chip ID as the host maps them against
    the plan's, which the device-share script and `doctor` pass to npu-smi. An npu-smi that prints
    no mapping is taken at the plan's word (on A2: card k is NPU k, chip 0)."""
    other = "a2" if host.board == "a3" else "a3"
    npu_smi = _q(root + NPU_SMI)
    variables = {
        "want": " ".join(map(str, cards)), "host": host.name, "board": host.board, "other": other,
        "npus": A3_CHIPS if other == "a3" else 8,
    }  # fmt: skip
    return _judged("board", f"{npu_smi} info -m", MAP_AWK, BOARD_JUDGE, variables)


def _engine_check(host: Host, declared: str, root: str) -> list[str]:
    """The Docker Engine the host runs against the one the stack declares for it (records.health):
    only a disagreement about version 25 matters. Declared 25+ but older found: the engine drops
    `start_interval`, the containers turn healthy up to 30 s late and every preview shows a change.
    Declared older but 25+ found: the containers probe every few seconds for their whole life where
    they need not. Either stops `pulumi up`; a version that cannot be read only warns (the docker
    provider reports an unreachable daemon itself)."""
    new = has_start_interval(declared)
    key = (
        f"Set dockerEngine on host {host.name} in ascend-fleet:hosts"
        if host.docker_engine is not None
        else f"Set ascend-fleet:dockerEngine, or dockerEngine on host {host.name} in ascend-fleet:hosts,"
    )
    why = (
        "engines before 25 drop the health check's start_interval: its containers would turn healthy up to "
        "30 s after they serve, and every pulumi preview would show a change"
        if new
        else f"the plan probes its containers every few seconds for their whole life, where engines from "
        f"{START_INTERVAL_ENGINE} on would probe that often only while they start"
    )
    before = f"host {host.name} is declared to run Docker Engine {declared}, but runs "
    after = f": {why}. {key} to the version it runs (a quoted string), or change the engine; then run pulumi up again"
    wrong = f'[ "$engine_major" -lt {START_INTERVAL_ENGINE} ]' if new else f'[ "$engine_major" -ge {START_INTERVAL_ENGINE} ]'
    return [
        f"engine=$({version(SERVER_VERSION, path(root))} 2>/dev/null </dev/null)",
        'engine_major=${engine%%.*}',
        'case $engine_major in',
        f"  ''|*[!0-9]*) echo {_q(f'ascend-fleet: warning: could not read the Docker Engine version of host {host.name}; its health probes assume the declared {declared}')} >&2 ;;",
        f'  *) if {wrong}; then missing {_q(before)}"$engine"{_q(after)}; fi ;;',
        "esac",
    ]


# `ip -o addr show [dev IFACE]` prints one line per address: index, interface, family, address/prefix
# (iproute2 `ip/ipaddress.c` print_addrinfo). Prints "address on interface" for each IPv4 and IPv6
# address, joined by ", ": an interface name holds no space or comma, so " ADDRESS on " is one address.
ADDR_AWK = r"""$3 == "inet" || $3 == "inet6" { split($4, a, "/"); printf "%s%s on %s", (n++ ? ", " : ""), a[1], $2 }"""


def _nic_checks(host: Host, users: Sequence[str]) -> list[str]:
    """The address the containers `users` put in `HCCL_IF_IP` (multi-host members, the leader in
    `--data-parallel-address` too, and prefill and decode instances) must be one of this host's, on
    `nic.interface` when the host names one (the three `*_SOCKET_IFNAME` variables): HCCL and Gloo bind it,
    and a rank on an address the host does not have fails only when its group or KV transfer starts. The exact address, compared
    in the text iproute2 prints (inet_ntop's, as Python's `ipaddress` writes it), not its subnet. An
    interface that does not exist is one whose addresses `ip` cannot list, in its own words."""
    interface = host.nic.interface if host.nic is not None else None
    declared = host.nic_address or ""
    where = f"interface {interface}" if interface else "the host"
    key = "nic.address" if host.nic is not None and host.nic.address is not None else "address, as nic.address is unset"
    which = f"HCCL_IF_IP {declared} of {', '.join(users)} on host {host.name} (from its {key})"
    fix = (
        f"): set host {host.name}'s nic in ascend-fleet:hosts, nic.address to an address of the host"
        + (" and nic.interface to the interface it is on" if interface else "")
        + " (ip -br addr), or configure the address there"
    )
    show = f"ip -o addr show dev {_q(interface)}" if interface else "ip -o addr show"
    return [
        # `ip` is in /sbin or /usr/sbin on some distributions, which a non-root SSH session's PATH may lack.
        f'if nic=$(PATH="$PATH:/usr/sbin:/sbin" {show} 2>&1 </dev/null); then',
        f"  nic_has=$(printf '%s\\n' \"$nic\" | awk {_q(ADDR_AWK)})",
        f'  case " $nic_has" in *{_q(f" {ipaddress.ip_address(declared)} on ")}*) ;; '
        f'*) missing {_q(f"{which} is not an address of {where} (it has: ")}"${{nic_has:-none}}"{_q(fix)} ;; esac',
        "else",
        f'  missing {_q(f"cannot list the addresses of {where} for {which} ({show}: ")}"$nic"{_q(fix)}',
        "fi",
    ]


def _hccn_check(host: Host, instances: Sequence[str], root: str) -> list[str]:
    """A host that runs a prefill or decode instance must have `/etc/hccn.conf`, which each mounts read-only
    (records.containers.HCCN_CONF): Docker refuses a bind mount whose source is missing, and a decode instance
    started without it answers wrongly (vllm-ascend issue 7711)."""
    path = root + HCCN_CONF
    text = (
        f"missing {path} on host {host.name}, which its prefill and decode instance(s) {', '.join(instances)} mount "
        "read-only: the NPUs' network settings that hccn_tool writes and shows (hccn_tool -i 0 -ip -g, as vllm-ascend's "
        "pd_disaggregation_mooncake tutorials check it); without it a decode instance answers wrongly (vllm-ascend issue 7711)"
    )
    return [f"[ -f {_q(path)} ] || missing {_q(text)}"]


def host_check_script(
    host: Host,
    containers: Containers,
    *,
    stack: str = "",
    ports: Sequence[int] = (),
    shared_cards: Sequence[int] = (),
    root: str = "",
    engine: str | None = None,
    members: Sequence[MemberPlan] = (),
    instances: Sequence[str] = (),
) -> str:
    """A POSIX sh script: exit 0 when the host has everything its containers use and no container
    outside the plan holds what they need, else exit 1 with one readable paragraph on stderr listing
    every problem. `stack`: whose containers are the plan's own (their label); `ports`: every port the
    plan publishes on the host, its routers' too; `shared_cards`: cards to be put into device-share
    mode, whose support is checked; `engine`: the Docker Engine version the stack declares for the
    host, compared with the one it runs; `members`: the members of multi-host services on the host, and
    `instances` the names of its prefill and decode instances, whose NIC address is checked (and the
    instances need `/etc/hccn.conf`)."""
    needs = _needs(containers)
    devices, models, mounts, _ = needs
    count = len(containers)
    header = f"ascend-fleet: host {host.name} ({host.address}) cannot run its {count} planned service(s):"
    advice = (
        "Install or repair the Ascend driver and npu-smi, copy the model weights to the listed "
        "directories, or change the plan (cards, hosts, models); then run `pulumi up` again."
    )
    summary = (
        f"ascend-fleet: host {host.name} ready for {count} service(s): devices {len(devices)}, "
        f"driver and npu-smi present, model directories {len(models)}, other mounts {len(mounts)}"
    )
    if members or instances:
        interface = host.nic.interface if host.nic is not None else None
        summary += f", HCCL_IF_IP {host.nic_address}" + (f" on {interface}" if interface else "")
    summary += f", {HCCN_CONF} present" if instances else ""
    return "\n".join([
        f"# ascend-fleet host check for {host.name}: generated from the plan, do not edit.",
        "problems=''",
        "sharing=''",
        'missing() { problems="$problems\n  - $1"; }',
        *stand_in(root),
        *_path_checks(needs, root),
        *_daemon_log_check(containers, root),
        *_board_warning(root),
        *_hbm_checks(host, sorted(cards_of(devices)), root),
        *_board_checks(host, sorted(cards_of(devices)), root),
        *_sharing_checks(host, shared_cards, [spec.name for _, spec in containers], root),
        *(_foreign_checks(host, stack, containers, ports) if containers else ()),
        *(_engine_check(host, engine, root) if engine is not None else []),
        *(_nic_checks(host, [*(mp.name for mp in members), *instances]) if members or instances else []),
        *(_hccn_check(host, instances, root) if instances else []),
        'if [ -n "$problems" ]; then',
        f'  printf \'%s%s\\n%s\\n\' {_q(header)} "$problems" {_q(advice)} >&2',
        "  exit 1",
        "fi",
        f'echo {_q(summary)}"${{sharing:+, device-share:$sharing}}"',
    ]) + "\n"  # fmt: skip
