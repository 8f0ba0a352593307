"""A stand-in root for the scripts that run on a host (device-share, the host check): the simulated
npu-smi under it, an `ip` that lists given addresses, and a live NPU claim as a running rank keeps one.
The scripts take `root` for this (`docker` then resolves to `<root>/bin/docker`, which each test writes
as the answers it needs)."""

from __future__ import annotations

import os
import signal
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from records.containers import NPU_SMI

REPO = Path(__file__).resolve().parents[2]

GONE = "while [ -e /proc/{pid} ] && ! grep -q '^State:.*Z' /proc/{pid}/status 2>/dev/null; do sleep 0.05; done"
"""Shell that returns once process {pid} has exited (gone, or a zombie its parent has not reaped): as
`docker stop` returns once the container is gone, so its rank's FIFO is closed by then."""


def npu_smi(root: Path) -> None:
    """`<root>/usr/local/bin/npu-smi`: sim/npu-smi with its state under `root` (claims/; the board,
    HBM and no-device-share marks as files the tests write), logging every call to `root/calls`."""
    claims = root / "claims"
    (claims / "device-share").mkdir(parents=True)
    smi = root / NPU_SMI.lstrip("/")
    smi.parent.mkdir(parents=True)
    smi.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {root}/calls\n'
        f"NPU_SIM_CLAIMS={claims} NPU_SIM_NO_DEVICE_SHARE={root}/no-device-share "
        f"NPU_SIM_BOARD={root}/board NPU_SIM_HBM={root}/hbm-mb "
        f'exec sh {REPO}/sim/npu-smi "$@"\n'
    )
    smi.chmod(0o755)


def ip(root: Path, addresses: dict[str, str]) -> None:
    """`<root>/bin/ip`: answers `ip -o addr show [dev IFACE]` with `addresses` (interface -> the lines
    iproute2's `ip/ipaddress.c` prints for it), or iproute2's refusal of an interface it does not have."""
    (root / "ip").mkdir()
    for name, lines in addresses.items():
        (root / "ip" / name).write_text(lines)
    (root / "bin").mkdir(exist_ok=True)
    (root / "bin/ip").write_text(
        "#!/bin/sh\n"
        '[ "$1 $2 $3" = "-o addr show" ] || { echo "unexpected: $*" >&2; exit 2; }\n'
        f'[ -z "$5" ] && exec cat {root}/ip/*\n'
        f'[ -e "{root}/ip/$5" ] && exec cat "{root}/ip/$5"\n'
        'echo "Device \\"$5\\" does not exist." >&2; exit 1\n'
    )
    (root / "bin/ip").chmod(0o755)


def hold(root: Path, card: int, service: str) -> subprocess.Popen:
    """A live claim of `service` on the card, as a running npu-sim rank keeps it: a FIFO somebody
    reads, opened without a gap, so a busy machine never makes it look dead."""
    claim = root / "claims" / f"card{card}" / "port16666"
    claim.mkdir(parents=True)
    os.mkfifo(claim / "alive")
    (claim / "owner").write_text(f"service={service}\ncontainer=c0ffee\nmem_mb=6000\n")
    rank = 'exec 3<>"$1"; while :; do read -r _ <&3; done'
    return subprocess.Popen(["sh", "-c", rank, "npu-sim-rank", str(claim / "alive")], start_new_session=True)


@contextmanager
def held(root: Path, card: int, service: str) -> Iterator[subprocess.Popen]:
    """`hold` for the block, the rank killed after it: the stand-in `docker stop` may have ended it
    already (its process group is then a zombie's, which the kill and the wait accept)."""
    holder = hold(root, card, service)
    try:
        yield holder
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
