"""The host check: a shell script that proves a host can run its planned containers.

Docker would refuse a container whose `/dev/davinciN` or bind-mount source is
missing, but only after the image pull and with a terse "no such file or
directory"; a 27B model would then fail minutes later on a missing weights
folder. The check runs on the host before any image or container of the host
(over SSH, or locally for a `unix://` docker host), lists every missing piece
at once, says which service needs it, and exits 1.

What is checked comes from the containers' specs, the same records the containers
are built from, so the check can never ask for less than the containers use.
Pure: builds text, runs nothing. `root` exists for tests only (a temporary
directory standing in for `/`); the program never passes it.
"""

from __future__ import annotations

import re
import shlex

from typing import Sequence

from allocation.config import Host
from allocation.containers import DRIVER_DIR, DRIVER_MOUNTS, ContainerSpec
from allocation.plan import PlannedService

NPU_SMI = "/usr/local/bin/npu-smi"


def _natural(path: str) -> tuple[str, int]:
    """`/dev/davinci10` after `/dev/davinci9`."""
    match = re.fullmatch(r"(.*?)(\d+)", path)
    return (match.group(1), int(match.group(2))) if match else (path, -1)


Containers = Sequence[tuple[PlannedService, ContainerSpec]]


def _needs(containers: Containers) -> tuple[dict, dict, dict]:
    """Paths the host's containers need -> the services needing them, by kind."""
    devices: dict[str, list[str]] = {}
    models: dict[str, list[str]] = {}
    mounts: dict[str, list[str]] = {}
    for ps, spec in containers:
        for path in spec.device_files:
            devices.setdefault(path, []).append(ps.name)
        for mount in spec.mounts:
            if mount.source in DRIVER_MOUNTS:
                continue  # checked once, for every service
            kind = models if mount.source == ps.service.model else mounts
            kind.setdefault(mount.source, []).append(ps.name)
    return devices, models, mounts


def host_check_script(host: Host, containers: Containers, *, root: str = "") -> str:
    """A POSIX sh script: exit 0 when the host has everything its containers use, else
    exit 1 with one readable paragraph on stderr listing every missing piece."""
    devices, models, mounts = _needs(containers)
    count = len(containers)

    def q(text: str) -> str:
        return shlex.quote(text)

    lines = [
        f"# ascend-fleet host check for {host.name}: generated from the plan, do not edit.",
        "problems=''",
        'missing() { problems="$problems\n  - $1"; }',
    ]
    for path in sorted(devices, key=_natural):
        users = ", ".join(devices[path])
        lines.append(f"[ -e {q(root + path)} ] || missing {q(f'missing device {root + path} (used by {users})')}")
    for path in DRIVER_MOUNTS:
        what = "driver folder" if path == DRIVER_DIR else "driver path"
        test = "-d" if path == DRIVER_DIR else "-e"
        lines.append(
            f"[ {test} {q(root + path)} ] || missing "
            f"{q(f'missing Ascend {what} {root + path} (mounted read-only into every container)')}"
        )
    npu_smi = root + NPU_SMI
    lines.append(f"[ ! -e {q(npu_smi)} ] || [ -x {q(npu_smi)} ] || missing {q(f'{npu_smi} is not executable')}")
    for path in sorted(models):
        users = ", ".join(models[path])
        lines.append(f"[ -d {q(root + path)} ] || missing {q(f'missing model directory {root + path} (used by {users})')}")
    for path in sorted(mounts):
        users = ", ".join(mounts[path])
        lines.append(f"[ -e {q(root + path)} ] || missing {q(f'missing mount source {root + path} (used by {users})')}")
    # npu-smi only answers when the driver and the cards are healthy; its error
    # codes (e.g. -8005: a card held by another container) are worth showing.
    lines += [
        f"if [ -x {q(npu_smi)} ] && ! out=$({q(npu_smi)} info 2>&1); then",
        f'  missing "{npu_smi} info failed: $(printf \'%s\\n\' "$out" | tail -n 3 | tr \'\\n\' \' \')"',
        "fi",
    ]
    header = f"ascend-fleet: host {host.name} ({host.address}) cannot run its {count} planned service(s):"
    advice = (
        "Install or repair the Ascend driver and npu-smi, copy the model weights to the listed "
        "directories, or change the plan (cards, hosts, models); then run `pulumi up` again."
    )
    summary = (
        f"ascend-fleet: host {host.name} ready for {count} service(s): devices {len(devices)}, "
        f"driver and npu-smi present, model directories {len(models)}, other mounts {len(mounts)}"
    )
    lines += [
        'if [ -n "$problems" ]; then',
        f'  printf \'%s%s\\n%s\\n\' {q(header)} "$problems" {q(advice)} >&2',
        "  exit 1",
        "fi",
        f"echo {q(summary)}",
    ]
    return "\n".join(lines) + "\n"
