"""The NPU state of the simulated host: what lives in /var/lib/npu-sim and the fault marks.

The npu-sim containers share ``/var/lib/npu-sim`` (bind-mounted at the same path): a claim
``cardN/portP/`` per HCCL rank, ``cardN/.lock`` while a container checks and claims card N,
and ``device-share/cardN`` (``1``) for the cards npu-smi put into device-share mode. The fault
marks are files under the driver folder that sim/npu-smi reads: cards reported unhealthy, and
boards without device-share support.

A real host keeps this state in the driver and loses it at a reboot; here it is files, so
`reboot` and `sweep_claims` do to them what a reboot and a dead process do.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from records.containers import ALIVE_PREFIX, ORDER_PREFIX, SERVED_PREFIX, SETTLED, STARTED_PREFIX
from sim.ascend_files import (
    BOARD_FILE, CLAIMS_DIR, DEVICE_SHARE_DIR, GATE_LOCK_DIR, HBM_FILE, NO_DEVICE_SHARE_FILE, UNHEALTHY_FILE,
)

BOOT_STAMPS = (SETTLED, f"{STARTED_PREFIX}*", f"{SERVED_PREFIX}*")
"""The start gate's files stamped with a boot id (records.containers, records.card_order)."""


def live_claims() -> dict[Path, int]:
    """Claims in /var/lib/npu-sim whose rank process is alive: claim folder -> host PID."""
    alive: dict[Path, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"npu-sim-rank" in argv and len(argv) >= 2:
            last = argv[-2] if argv[-1] == b"" else argv[-1]
            fifo = Path(last.decode(errors="replace"))
            if fifo.name == "alive" and fifo.parent.parent.parent == CLAIMS_DIR:
                alive[fifo.parent] = int(proc.name)
    return alive


def sweep_claims() -> None:
    """Delete NPU port claims whose container is gone (killed without a chance to release)."""
    alive = live_claims()
    for claim in CLAIMS_DIR.glob("card*/port*"):
        if claim not in alive:
            shutil.rmtree(claim, ignore_errors=True)


def device_share_off() -> None:
    """Every card out of device-share mode."""
    for path in DEVICE_SHARE_DIR.glob("card*"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def device_shared_cards() -> list[int]:
    """Cards in device-share mode."""
    cards = []
    for path in DEVICE_SHARE_DIR.glob("card*"):
        if path.name[4:].isdigit() and path.read_text().strip() == "1":
            cards.append(int(path.name[4:]))
    return sorted(cards)


def reboot() -> None:
    """Do to the NPU state what a host reboot does: every card back out of device-share mode
    (the mode is off after a reboot unless set again) and no claims left (of live ranks, the
    claims stay); and to the start gate's boot stamps what a new boot id does."""
    device_share_off()
    sweep_claims()
    _remove_gate_files(BOOT_STAMPS)


def _remove_gate_files(patterns: tuple[str, ...]) -> None:
    """Files of the start gate's lock folder on the host. A real reboot leaves its stamps in place
    with the old boot id, which the gates and the boot step count as no stamp; this machine's boot
    id (/proc/sys/kernel/random/boot_id) cannot change, so a simulated reboot removes them."""
    for pattern in patterns:
        for path in GATE_LOCK_DIR.glob(pattern):
            path.unlink(missing_ok=True)


def clear_cards() -> None:
    """With no sim container left: no card in device-share mode, no card lock, and no start order,
    boot stamp or lifetime lock file of the start gate."""
    device_share_off()
    _remove_gate_files((*BOOT_STAMPS, f"{ORDER_PREFIX}*", f"{ALIVE_PREFIX}*"))
    for path in CLAIMS_DIR.glob("card*/.lock"):
        shutil.rmtree(path, ignore_errors=True)


def mark_unhealthy(card: int, status: str = "Warning") -> None:
    """Make `npu-smi info` report a card with this health (Warning, Alarm, Critical)."""
    UNHEALTHY_FILE.parent.mkdir(parents=True, exist_ok=True)
    with UNHEALTHY_FILE.open("a") as f:
        f.write(f"{card} {status}\n")


def mark_no_device_share(card: int) -> None:
    """Make the card a board without device-share support (npu-smi says so when asked)."""
    NO_DEVICE_SHARE_FILE.parent.mkdir(parents=True, exist_ok=True)
    with NO_DEVICE_SHARE_FILE.open("a") as f:
        f.write(f"{card}\n")


def set_layout(board: str = "a2", hbm_mb: int | None = None) -> None:
    """Make sim/npu-smi show an Atlas A3 board (`a3`: 16 chips as 8 NPUs of 2) or the A2 one, with
    `hbm_mb` MB of HBM per chip (npu-smi's figure: 65536 for 64 GB, 32768 for 32 GB; None: 65536)."""
    BOARD_FILE.parent.mkdir(parents=True, exist_ok=True)
    BOARD_FILE.write_text(f"{board}\n")
    if hbm_mb is None:
        HBM_FILE.unlink(missing_ok=True)
    else:
        HBM_FILE.write_text(f"{int(hbm_mb)}\n")


def clear_fault_marks() -> None:
    """No card unhealthy, every board with device-share support, the A2 board with 64 GB chips."""
    for path in (UNHEALTHY_FILE, NO_DEVICE_SHARE_FILE, BOARD_FILE, HBM_FILE):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
