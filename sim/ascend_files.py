"""The files an Ascend 910B host has, laid out on this machine, and the record of what was made.

The device nodes ``/dev/davinci0..7``, ``/dev/davinci_manager``, ``/dev/devmm_svm``,
``/dev/hisi_hdc`` (harmless copies of /dev/null, 1:3), ``/usr/local/Ascend/driver``
(version.info, lib64/), ``/usr/local/dcmi``, ``/etc/ascend_install.info``, ``/etc/hccn.conf``, the fake
``/usr/local/bin/npu-smi`` (sim/npu-smi), the NPU state folder ``/var/lib/npu-sim``
(sim/npu_state.py), ``/srv/models`` and the start gate's lock folder.

These paths are machine-wide and may belong to the machine: `HostFiles` creates only what is
missing and, at `HostFiles.remove`, removes only what it created, newest first.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path

SIM_DIR = Path(__file__).resolve().parent
NPU_SMI_SOURCE = SIM_DIR / "npu-smi"

CARDS = 8
CARD_DEVICES = tuple(f"/dev/davinci{i}" for i in range(CARDS))
CONTROL_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
DRIVER_DIR = Path("/usr/local/Ascend/driver")
DCMI_DIR = Path("/usr/local/dcmi")
INSTALL_INFO = Path("/etc/ascend_install.info")
HCCN_CONF = Path("/etc/hccn.conf")
"""The NPUs' network settings `hccn_tool` writes, which every prefill and decode instance mounts read-only
(records.containers; vllm-ascend issue 7711) and the host check asks for."""
NPU_SMI = Path("/usr/local/bin/npu-smi")
CLAIMS_DIR = Path("/var/lib/npu-sim")
DEVICE_SHARE_DIR = CLAIMS_DIR / "device-share"
UNHEALTHY_FILE = DRIVER_DIR / "sim" / "unhealthy"
NO_DEVICE_SHARE_FILE = DRIVER_DIR / "sim" / "no-device-share"
BOARD_FILE = DRIVER_DIR / "sim" / "board"  # "a3": sim/npu-smi shows an Atlas A3 board
HBM_FILE = DRIVER_DIR / "sim" / "hbm-mb"  # HBM per chip sim/npu-smi shows, in MB
A3_CARD_DEVICES = tuple(f"/dev/davinci{i}" for i in range(CARDS, 2 * CARDS))  # an A3's chips 8-15
MODELS_DIR = Path("/srv/models")
GATE_LOCK_DIR = Path("/var/lib/ascend-fleet/locks")  # records.containers.LOCK_DIR_HOST; the host check makes it

NPU_SMI_MARKER = "ascend-fleet npu-sim: fake npu-smi"

VERSION_INFO = """\
Version=24.1.rc2
ascendhal_version=7.35.23
aicpu_version=1.0
tdt_version=1.0
log_version=1.0
prof_version=2.0
dvppkernels_version=1.1
tsfw_version=1.0
Innerversion=V100R001C19SPC002B214
compatible_version=[V100R001C15],[V100R001C17],[V100R001C18],[V100R001C19]
compatible_version_fw=[7.0.0,7.5.99]
package_version=24.1.rc2
"""

ASCEND_INSTALL_INFO = """\
UserName=HwHiAiUser
UserGroup=HwHiAiUser
Driver_Install_Type=full
Driver_Install_Path_Param=/usr/local/Ascend
Driver_Install_For_All=no
"""


class HostFiles:
    """The paths this run created on the machine (and only those), to remove at the end."""

    def __init__(self) -> None:
        self._created: list[Path] = []

    def ensure_dir(self, path: Path) -> None:
        """Make `path` and its missing parents, recording each one made."""
        missing = []
        for parent in [path, *path.parents]:
            if parent.exists():
                break
            missing.append(parent)
        for directory in reversed(missing):
            directory.mkdir()
            self._created.append(directory)

    def ensure_file(self, path: Path, content: str, mode: int = 0o644, *, replace_if: str | None = None) -> None:
        """Write `path` unless it exists; an existing file holding `replace_if` is ours from a run
        that could not clean up, refreshed and then removed like a new one."""
        if path.exists():
            if not (replace_if and replace_if in path.read_text(errors="replace")):
                return
            # Left behind by an earlier run that could not clean up: ours to refresh and remove.
            self._created.append(path)
        else:
            self.ensure_dir(path.parent)
            self._created.append(path)
        path.write_text(content)
        path.chmod(mode)

    def ensure_device(self, path: Path) -> None:
        """A character device 1:3 (what /dev/null is) at `path` unless something is there."""
        if not path.exists():
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            path.chmod(0o666)
            self._created.append(path)

    def forget(self, paths: Iterable[Path]) -> None:
        """Remove those of `paths` that were created here (an A3 layout's extra chips, at `reset`)."""
        for path in paths:
            if path in self._created:
                path.unlink(missing_ok=True)
                self._created.remove(path)

    def remove(self) -> None:
        """Remove what was created, newest first."""
        for path in reversed(self._created):
            with contextlib.suppress(FileNotFoundError):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
        self._created.clear()


def lay_out(files: HostFiles) -> None:
    """Lay out the Ascend host's files that are missing."""
    for device in (*CARD_DEVICES, *CONTROL_DEVICES):
        files.ensure_device(Path(device))
    files.ensure_file(DRIVER_DIR / "version.info", VERSION_INFO)
    files.ensure_file(DRIVER_DIR / "lib64" / "README.npu-sim", "placeholder for the Ascend driver libraries\n")
    files.ensure_dir(UNHEALTHY_FILE.parent)
    files.ensure_file(DCMI_DIR / "README.npu-sim", "placeholder for dcmi\n")
    files.ensure_file(INSTALL_INFO, ASCEND_INSTALL_INFO)
    files.ensure_file(HCCN_CONF, "".join(f"address_{c}=192.168.100.{101 + c}\nnetmask_{c}=255.255.255.0\n" for c in range(CARDS)))
    files.ensure_file(NPU_SMI, NPU_SMI_SOURCE.read_text(), 0o755, replace_if=NPU_SMI_MARKER)
    files.ensure_dir(CLAIMS_DIR)
    files.ensure_dir(DEVICE_SHARE_DIR)
    files.ensure_dir(MODELS_DIR)
    files.ensure_dir(GATE_LOCK_DIR)
