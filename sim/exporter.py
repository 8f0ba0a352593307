"""The NPU exporter on the simulated host: a stand-in image, the card state it reads, and how this
machine runs the exporter's privileged container.

The image ``ascend-fleet/npu-exporter-sim:latest`` (sim/npu-exporter-sim/) stands in for the one
the operator builds from MindCluster's NPU Exporter: the container the fleet plans for it
(records/exporter.py: entrypoint ``/bin/bash -c --``, ``npu-exporter -port P -ip 0.0.0.0
-containerMode docker``, a bash ``/dev/tcp`` health check, the driver, dcmi, localtime and
/var/run/docker mounts) runs unchanged in it and serves the card metrics of the real exporter's
source, with values read from the simulated cards.

The real exporter reads the cards through the driver, which the container gets by mounting
/usr/local/Ascend/driver. The simulated host keeps its card state in /var/lib/npu-sim
(sim/npu_state.py), which the exporter's container does not mount, so `npu_state_in_driver`
shows that folder, read-only, inside the driver folder (a bind mount at `STATE_IN_DRIVER`, which
Docker's recursive bind of the driver folder carries into the container): the container's spec
stays the planned one.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

from sim.ascend_files import CLAIMS_DIR, DRIVER_DIR, SIM_DIR
from sim.errors import SimHostError
from sim.npu_image import build_scratch_image, with_libraries

IMAGE = "ascend-fleet/npu-exporter-sim:latest"
HASH_LABEL = "ascend-fleet.npu-exporter-sim.hash"
SOURCE_DIR = SIM_DIR / "npu-exporter-sim"
BASH = Path("/bin/bash")
"""The real image is Ubuntu with bash: the container's entrypoint and health check need it."""
STATE_IN_DRIVER = DRIVER_DIR / "sim-state"
"""Where the stand-in reads the card state (sim/npu-exporter-sim/npu-exporter-scrape)."""

GRANTABLE = (
    "--cap-add=ALL", "--security-opt=seccomp=unconfined", "--security-opt=apparmor=unconfined",
    "--security-opt=systempaths=unconfined",
)  # fmt: skip
"""What a daemon that cannot start ``--privileged`` containers can still grant: every capability
but those missing from its own bounding set (`missing_capabilities`), no seccomp or AppArmor
profile, /proc unmasked. Not granted: the missing capabilities, every host device, a writable /sys."""

CAPABILITIES = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
    "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
    "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
    "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
    "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ",
)  # fmt: skip
"""Linux capabilities by number (include/uapi/linux/capability.h) up to AUDIT_READ (37), the last
one Docker 20.10 knows by name."""


def build_exporter_image() -> None:
    """Build ascend-fleet/npu-exporter-sim:latest unless an image with the same content hash exists."""
    build_scratch_image(IMAGE, HASH_LABEL, SOURCE_DIR, with_libraries(BASH))


def missing_capabilities(status: str | None = None) -> list[str]:
    """The capabilities Docker knows that this machine's root lacks (its `CapBnd`, which the docker
    daemon it starts inherits): why ``--privileged`` fails here with runc's "unable to apply caps"."""
    text = Path("/proc/self/status").read_text() if status is None else status
    bounding = int(next(line.split()[1] for line in text.splitlines() if line.startswith("CapBnd:")), 16)
    return [name for bit, name in enumerate(CAPABILITIES) if not bounding >> bit & 1]


def as_this_daemon_allows(args: Sequence[str], privileged_ok: bool) -> list[str]:
    """`docker run` arguments of a planned container, unchanged when this daemon starts privileged
    containers; otherwise ``--privileged`` is replaced by `GRANTABLE` minus the missing capabilities."""
    if privileged_ok or "--privileged" not in args:
        return list(args)
    drops = [f"--cap-drop={name}" for name in missing_capabilities()]
    at = list(args).index("--privileged")
    return [*args[:at], *GRANTABLE, *drops, *args[at + 1 :]]


@contextlib.contextmanager
def npu_state_in_driver() -> Iterator[Path]:
    """The simulated host's card state (/var/lib/npu-sim) shown read-only at `STATE_IN_DRIVER`, for
    as long as the context lasts; the mount point is removed again if it was made here."""
    made = not STATE_IN_DRIVER.exists()
    STATE_IN_DRIVER.mkdir(parents=True, exist_ok=True)
    _mount(["mount", "-o", "bind,ro", str(CLAIMS_DIR), str(STATE_IN_DRIVER)])
    try:
        yield STATE_IN_DRIVER
    finally:
        _mount(["umount", str(STATE_IN_DRIVER)])
        if made:
            STATE_IN_DRIVER.rmdir()


def _mount(argv: list[str]) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise SimHostError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
