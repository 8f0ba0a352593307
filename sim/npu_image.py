"""The image ``ascend-fleet/npu-sim:latest``: sim/npu-sim/, a stand-in for
``quay.io/ascend/vllm-ascend`` that reproduces what a shared card does to it.

Its build context is sim/npu-sim/ plus, copied from this machine, ``/bin/busybox`` and
util-linux's ``flock`` with the shared libraries it loads. It is built with the legacy builder
(no BuildKit needed) and labelled with a content hash of all of them, so a host reuses an image
whose sources have not changed and rebuilds one whose sources have.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from sim.ascend_files import SIM_DIR
from sim.docker_cli import DOCKER_SOCKET, local_argv, local_docker, local_env
from sim.errors import SimHostError

IMAGE_DIR = SIM_DIR / "npu-sim"
IMAGE = "ascend-fleet/npu-sim:latest"
IMAGE_HASH_LABEL = "ascend-fleet.npu-sim.hash"
BUSYBOX = Path("/bin/busybox")
# util-linux's flock, which the start gate uses (records.containers.START_GATE) and vllm-ascend's
# Ubuntu-based images carry; busybox-static has no flock applet. Copied into the image with the
# shared libraries it loads.
FLOCK = Path("/usr/bin/flock")


def with_libraries(binary: Path) -> list[Path]:
    """A binary and the shared libraries it loads (ldd), by their real paths."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
    libs = [Path(word) for line in out.splitlines() for word in line.split() if word.startswith("/")]
    return [binary, *dict.fromkeys(libs)]


def flock_files() -> list[Path]:
    """flock and the shared libraries it loads."""
    return with_libraries(FLOCK)


def build_image(socket: Path = DOCKER_SOCKET) -> None:
    """Build ascend-fleet/npu-sim:latest in the daemon on `socket` unless an image with the same
    content hash is there."""
    build_scratch_image(IMAGE, IMAGE_HASH_LABEL, IMAGE_DIR, flock_files(), socket)


def content_hash(source_dir: Path, rootfs: list[Path]) -> str:
    """Content hash of an image's sources (the files of `source_dir`), the busybox binary and the
    files it copies under rootfs/."""
    digest = hashlib.sha256()
    for path in sorted(source_dir.iterdir()):
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(BUSYBOX.read_bytes())
    for path in rootfs:
        digest.update(str(path).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def build_scratch_image(
    image: str, hash_label: str, source_dir: Path, rootfs: list[Path], socket: Path = DOCKER_SOCKET
) -> None:
    """Build `image` from `source_dir` (its Dockerfile and files), busybox and the files of `rootfs`
    (copied from this machine to the same paths under rootfs/ in the context), in the daemon on
    `socket`, unless an image labelled with the same content hash is there."""
    want = content_hash(source_dir, rootfs)
    label = f'{{{{ index .Config.Labels "{hash_label}" }}}}'
    have = local_docker("image", "inspect", "-f", label, image, check=False, socket=socket)
    if have.returncode == 0 and have.stdout.strip() == want:
        return
    with tempfile.TemporaryDirectory(prefix="sim-image-build-") as context:
        for path in source_dir.iterdir():
            if path.is_file():
                shutil.copy2(path, context)
        shutil.copy2(BUSYBOX, Path(context) / "busybox")
        for path in rootfs:
            target = Path(context) / "rootfs" / path.relative_to("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path.resolve(), target)
        proc = subprocess.run(
            [*local_argv(socket), "build", "-q", "-t", image, "--label", f"{hash_label}={want}", context],
            capture_output=True, text=True, env={**local_env(), "DOCKER_BUILDKIT": "0"}, timeout=600,
        )  # fmt: skip
    if proc.returncode != 0:
        raise SimHostError(f"building {image} failed:\n{proc.stdout}\n{proc.stderr}")
