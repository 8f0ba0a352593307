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

import shlex

from typing import Sequence

from allocation.config import Host
from records.containers import DRIVER_MOUNTS, LOCK_DIR_HOST, NPU_SMI, ContainerSpec
from records.host_requirements import DEVICE, cards_of, requirements
from records.device_share import CHIP, HOLDERS, STATUS_KEY, UNSUPPORTED
from records.health import START_INTERVAL_ENGINE, has_start_interval
from allocation.plan import ServicePlan
from allocation.windows import KINDS

DAEMON_JSON = "/etc/docker/daemon.json"
RANGE_ENV = tuple(k.env for k in KINDS if k.hccl_range and k.env)
DMI_PRODUCT = "/sys/class/dmi/id/product_name"
# CANN's env-var reference (envref_07_0143/0144): on Atlas A2 the socket-range variables are
# supported only on these products; the part of each name a DMI product name is matched on.
SOCKET_RANGE_BOARDS = {"Atlas 800T A2": "800T A2", "Atlas 900 A2 PoD": "900 A2", "Atlas 200T A2 Box16": "200T A2"}


Containers = Sequence[tuple[ServicePlan, ContainerSpec]]


def _needs(containers: Containers) -> tuple[dict, dict, dict]:
    """Paths the host's containers need -> the containers needing them (by the docker name, which
    `docker ps` shows and a rename keeps, so a rename leaves the check as it was), by kind."""
    devices: dict[str, list[str]] = {}
    models: dict[str, list[str]] = {}
    mounts: dict[str, list[str]] = {}
    for ps, spec in containers:
        for path in spec.device_files:
            devices.setdefault(path, []).append(spec.name)
        for mount in spec.mounts:
            if mount.source in DRIVER_MOUNTS or mount.source == LOCK_DIR_HOST:
                continue  # checked once, for every service
            kind = models if mount.source == ps.service.model else mounts
            kind.setdefault(mount.source, []).append(spec.name)
    return devices, models, mounts


def _q(text: str) -> str:
    return shlex.quote(text)


def _path_checks(needs: tuple[dict, dict, dict], root: str) -> list[str]:
    devices, models, mounts = needs
    lines = []
    # The cards these containers use, not every card of the host: a dead card nobody uses must not
    # block a deploy. Only devices some container here uses are asked for, so a host without
    # containers is not asked for the control devices either.
    for req in requirements(cards_of(devices)):
        if req.what == DEVICE and req.path not in devices:
            continue
        why = f"used by {', '.join(devices[req.path])}" if req.what == DEVICE else "mounted read-only into every container"
        lines.append(f"{req.test(root + req.path)} || missing {_q(req.missing(root + req.path, why))}")
    # The start gate's card locks (records.containers): the one thing the check creates, since every
    # container mounts the folder and Docker refuses a bind mount whose source is missing.
    locks = root + LOCK_DIR_HOST
    text = f"cannot create the start gate's lock folder {locks}: create it once as root (install -d {locks})"
    lines.append(f"mkdir -p {_q(locks)} 2>/dev/null || missing {_q(text)}")
    npu_smi = root + NPU_SMI
    lines.append(f"[ ! -e {_q(npu_smi)} ] || [ -x {_q(npu_smi)} ] || missing {_q(f'{npu_smi} is not executable')}")
    for path in sorted(models):
        text = f"missing model directory {root + path} (used by {', '.join(models[path])})"
        lines.append(f"[ -d {_q(root + path)} ] || missing {_q(text)}")
    for path in sorted(mounts):
        text = f"missing mount source {root + path} (used by {', '.join(mounts[path])})"
        lines.append(f"[ -e {_q(root + path)} ] || missing {_q(text)}")
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
    daemon = _q(root + DAEMON_JSON)
    flat = f"tr -d '\\n' < {daemon}"
    return [
        f"if [ -r {daemon} ]; then",
        f"  driver=$({flat} | sed -n 's/.*\"log-driver\"[[:space:]]*:[[:space:]]*\"\\([^\"]*\\)\".*/\\1/p')",
        f"  opts=$({flat} | sed -n 's/.*\"log-opts\"[[:space:]]*:[[:space:]]*{{\\([^}}]*\\)}}.*/\\1/p')",
        "  extra=$(printf '%s' \"$opts\" | grep -o '\"[^\"]*\"[[:space:]]*:' | tr -d '\":[:blank:]' | "
        + "grep -vx " + " ".join(f"-e {_q(k)}" for k in own) + " | tr '\\n' ' ')",
        '  if [ "${driver:-json-file}" = json-file ] && [ -n "$extra" ]; then',
        f'    missing "{DAEMON_JSON} sets log-opts $extra for every json-file container; the docker provider '
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


def _sharing_checks(host: Host, shared_cards: Sequence[int], root: str) -> list[str]:
    """Shared cards need the container-sharing mode; a board without it is refused here, before
    any pull (the mode itself is set by the device-share command that runs next). So is a card not
    yet in the mode that running containers hold, unless the host lets `pulumi up` stop them
    (`heldCards: stopHolders`): the mode cannot change under them, and stopping here, before any
    container of the host changes, never leaves the host half deployed."""
    npu_smi = _q(root + NPU_SMI)
    lines = [HOLDERS.rstrip("\n")] if shared_cards and host.held_cards == "refuse" else []
    if lines and root:
        lines.append(f"docker={_q(root + '/bin/docker')}")
    for card in shared_cards:
        text = (
            f"card {card} is shared but does not support container sharing (device-share): "
            f"set host {host.name}'s cardSharing to privileged, or give its services cards of their own"
        )
        lines += [
            f"state=$({npu_smi} info -t device-share -i {int(card)} -c {CHIP} 2>&1 </dev/null)",
            f'case $state in *{_q(UNSUPPORTED)}*) missing {_q(text)} ;; esac',
            f'sharing="$sharing card {int(card)} $(printf \'%s\' "$state" | '
            f"sed -n 's/.*{STATUS_KEY}[[:space:]]*:[[:space:]]*//p')\"",
        ]
        if host.held_cards == "refuse":
            before = f"card {card} must go into device-share mode, but running container(s) "
            after = (
                f" hold it, and the mode can only change while no container uses the card: stop them "
                f"(docker stop NAME), or set host {host.name}'s heldCards to stopHolders to let pulumi up stop "
                "them, switch the card and start them again"
            )
            lines += [
                f'case $state in *{_q(STATUS_KEY)}*True*) ;; *) who=$(holders {int(card)}); '
                f'[ -z "$who" ] || missing {_q(before)}"$who"{_q(after)} ;; esac',
            ]
    return lines


def _engine_check(host: Host, declared: str, root: str) -> list[str]:
    """The Docker Engine the host runs against the one the stack declares for it (records.health):
    only a disagreement about version 25 matters. Declared 25+ but older found: the engine drops
    `start_interval`, the containers turn healthy up to 30 s late and every preview shows a change.
    Declared older but 25+ found: the containers probe every few seconds for their whole life where
    they need not. Either stops `pulumi up`; a version that cannot be read only warns (the docker
    provider reports an unreachable daemon itself)."""
    docker = _q(root + "/bin/docker") if root else "docker"
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
        f"engine=$({docker} version --format '{{{{.Server.Version}}}}' 2>/dev/null </dev/null)",
        'engine_major=${engine%%.*}',
        'case $engine_major in',
        f"  ''|*[!0-9]*) echo {_q(f'ascend-fleet: warning: could not read the Docker Engine version of host {host.name}; its health probes assume the declared {declared}')} >&2 ;;",
        f'  *) if {wrong}; then missing {_q(before)}"$engine"{_q(after)}; fi ;;',
        "esac",
    ]


def host_check_script(
    host: Host, containers: Containers, *, shared_cards: Sequence[int] = (), root: str = "", engine: str | None = None
) -> str:
    """A POSIX sh script: exit 0 when the host has everything its containers use, else
    exit 1 with one readable paragraph on stderr listing every missing piece. `shared_cards`:
    cards to be put into device-share mode, whose support is checked; `engine`: the Docker Engine
    version the stack declares for the host, compared with the one it runs."""
    needs = _needs(containers)
    devices, models, mounts = needs
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
    return "\n".join([
        f"# ascend-fleet host check for {host.name}: generated from the plan, do not edit.",
        "problems=''",
        "sharing=''",
        'missing() { problems="$problems\n  - $1"; }',
        *_path_checks(needs, root),
        *_daemon_log_check(containers, root),
        *_board_warning(root),
        *_sharing_checks(host, shared_cards, root),
        *(_engine_check(host, engine, root) if engine is not None else []),
        'if [ -n "$problems" ]; then',
        f'  printf \'%s%s\\n%s\\n\' {_q(header)} "$problems" {_q(advice)} >&2',
        "  exit 1",
        "fi",
        f'echo {_q(summary)}"${{sharing:+, device-share:$sharing}}"',
    ]) + "\n"  # fmt: skip
