"""What a host must have before any container runs on it: one table, read by the host check and `doctor`.

Every container gets device files and driver paths from the host (records.containers), and Docker
refuses to create one whose device file or bind-mount source is missing. The host check
(records.host_check) asks the table for the cards its containers use, since it proves that *these*
containers can run and a dead card nobody uses must not block a deploy; `doctor` asks for every
configured card, since it judges the host as configured. Both word a missing path the same way.
Pure: builds text, runs nothing.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Iterable

from records.containers import CONTROL_DEVICES, DRIVER_DIR, DRIVER_MOUNTS

DEVICE = "device"


@dataclass(frozen=True)
class Requirement:
    """One path the host must have."""

    path: str
    directory: bool
    """The path must be a directory (`test -d`); otherwise any file will do (`test -e`)."""
    what: str
    """What the path is, in a sentence: `device`, `Ascend driver folder`, `Ascend driver path`."""

    def test(self, shown: str) -> str:
        """The POSIX sh test that succeeds when the path is there; `shown` is where to look for it."""
        return f"[ {'-d' if self.directory else '-e'} {shlex.quote(shown)} ]"

    def missing(self, shown: str, why: str = "") -> str:
        """The sentence naming the path as missing, e.g. `missing device /dev/davinci3 (used by bge-m3)`."""
        return f"missing {self.what} {shown}" + (f" ({why})" if why else "")


def device_file(card: int) -> str:
    return f"/dev/davinci{int(card)}"


def cards_of(paths: Iterable[str]) -> set[int]:
    """The cards whose device files are among `paths`."""
    return {int(m.group(1)) for p in paths if (m := re.fullmatch(r"/dev/davinci([0-9]{1,9})", p))}


def requirements(cards: Iterable[int]) -> tuple[Requirement, ...]:
    """What the host needs for `cards`: their device files in card order, the control devices, then
    the driver paths every container bind-mounts read-only."""
    devices = (*(device_file(c) for c in sorted(set(cards))), *CONTROL_DEVICES)
    driver = (
        Requirement(p, p == DRIVER_DIR, "Ascend driver folder" if p == DRIVER_DIR else "Ascend driver path")
        for p in DRIVER_MOUNTS
    )
    return (*(Requirement(d, False, DEVICE) for d in devices), *driver)
