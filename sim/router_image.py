"""The router image on the simulated host: a stand-in for the one `records.router.build_script` builds.

On a real host the program builds the router image itself, `FROM` the service's image plus a
`pip install` of the pinned vllm-router wheel (tests/test_router_image.py runs that install line for
real), and skips the build when the tag `records.router.image_tag(base)` exists. The simulated
host has no registry and its service image (`ascend-fleet/npu-sim`) has no Python or pip, so that
build cannot run there. Instead `build_router_image(base)` pre-creates an image under exactly that
tag, so the program's own build script finds it and skips the build, as on a real host the second
time. The image is what the real build would give, made differently:

- `FROM base`, like the real build: a new service image gives a new router image id, so the router
  is re-created during an image upgrade here as on a real host;
- the CPython the project's venv runs (`sys.base_prefix`, its interpreter, `libpython` and standard
  library without tests, IDLE, tkinter and the like), at the same path, since its binary finds
  `libpython` by RUNPATH, and `python3` on PATH (the rollout's scripts run `docker exec <router>
  python3 -c ...`);
- vllm-router 0.1.17 and the distributions it requires, transitively, copied from the venv's
  site-packages (the same files pip installed there from requirements-dev.txt), and a `vllm-router`
  launcher for its console-script entry point, as pip writes one;
- the shared libraries all those binaries load (ldd), at the paths ldd names.

It is cached by a content hash (label `ascend-fleet.router-sim.hash`) of the base image id and
every copied file, like `SimHost.build_image`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from records.router import image_tag

HASH_LABEL = "ascend-fleet.router-sim.hash"
ROUTER_DISTRIBUTION = "vllm-router"
PYTHON_PREFIX = Path(sys.base_prefix)
STDLIB = Path(sysconfig.get_paths(vars={"installed_base": sys.base_prefix, "base": sys.base_prefix})["stdlib"])
# Parts of the standard library a router never imports (and their size: tests alone are 123 MB).
STDLIB_LEFT_OUT = frozenset(
    {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3"}
)  # fmt: skip
LIBRARY = f"libpython{sys.version_info.major}.{sys.version_info.minor}.so.1.0"


def _distributions(root: str = ROUTER_DISTRIBUTION) -> list[importlib.metadata.Distribution]:
    """`root` and every distribution it requires, transitively, as installed beside this interpreter
    (markers evaluated for this interpreter, no extras)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [root]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found:
            continue
        found[name] = dist = importlib.metadata.distribution(name)
        for line in dist.requires or ():
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return [found[name] for name in sorted(found)]


def _site_packages_files() -> list[tuple[Path, Path]]:
    """(file here, its path relative to site-packages) for every file of the router's distributions."""
    files = []
    for dist in _distributions():
        base = Path(dist.locate_file("")).resolve()
        for entry in dist.files or ():
            path = Path(dist.locate_file(entry))
            # Console scripts live outside site-packages, with this venv's interpreter in their shebang.
            if path.is_file() and path.resolve().is_relative_to(base):
                files.append((path, path.resolve().relative_to(base)))
    return files


def _stdlib_files() -> list[Path]:
    out = []
    for folder, dirs, names in os.walk(STDLIB):
        here = Path(folder)
        if here == STDLIB:
            dirs[:] = [d for d in dirs if d not in STDLIB_LEFT_OUT and not d.startswith("config-")]
        for name in names:
            # Only the unoptimised bytecode is ever loaded; the Tk module needs X11; CPython's own test modules.
            if ".opt-" in name or name.startswith(("_tkinter", "_test", "_ctypes_test", "xx")):
                continue
            out.append(here / name)
    return sorted(out)


def _shared_libraries(binaries: list[Path]) -> list[Path]:
    """The system libraries the binaries load, by the paths ldd names (not those it finds beside them)."""
    libs: dict[Path, None] = {}
    own = (PYTHON_PREFIX.resolve(), *(Path(p).resolve() for p in sys.path if p))
    for binary in binaries:
        out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
        for word in (w for line in out.splitlines() for w in line.split() if w.startswith("/")):
            path = Path(word)
            if not any(path.resolve().is_relative_to(o) for o in own if o != Path("/")):
                libs[path] = None
    return sorted(libs)


def _launcher(dist: importlib.metadata.Distribution, name: str) -> str:
    """The console script pip writes for entry point `name` of `dist`."""
    (entry,) = [e for e in dist.entry_points if e.group == "console_scripts" and e.name == name]
    return (
        "#!/usr/local/bin/python3\n"
        "import re\n"
        "import sys\n"
        f"from {entry.module} import {entry.attr}\n"
        "if __name__ == '__main__':\n"
        "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
        f"    sys.exit({entry.attr}())\n"
    )


def python_layout() -> dict[Path, Path]:
    """The CPython the project's venv runs, as an image carries it: path in the image -> file here
    (its interpreter, `libpython` and standard library, at the same paths: the binary finds `libpython`
    by RUNPATH)."""
    interpreter = Path(sys.executable).resolve()  # a venv's python is a symlink to its base interpreter
    if not interpreter.is_relative_to(PYTHON_PREFIX):
        raise RuntimeError(f"the stand-in images copy the interpreter under {PYTHON_PREFIX}, not {interpreter}")
    files = {interpreter: interpreter, PYTHON_PREFIX / "lib" / LIBRARY: PYTHON_PREFIX / "lib" / LIBRARY}
    return files | {path: path for path in _stdlib_files()}


def with_shared_libraries(files: dict[Path, Path]) -> dict[Path, Path]:
    """`files` and the system libraries its binaries (the interpreter, every extension module) load."""
    interpreter = Path(sys.executable).resolve()
    binaries = [here for here in files.values() if here.suffix == ".so" or ".so." in here.name or here == interpreter]
    return files | {lib: lib.resolve() for lib in _shared_libraries(binaries)}


def _layout() -> dict[Path, Path]:
    """Every file of the image beyond the base: path in the image -> file here."""
    site_packages = STDLIB / "site-packages"
    files = python_layout() | {site_packages / relative: path for path, relative in _site_packages_files()}
    return with_shared_libraries(files)


def content_hash(base_id: str, layout: dict[Path, Path], text: str) -> str:
    """A 16-hex digest of an image built on `base_id` from `layout` and `text` (what else it writes)."""
    digest = hashlib.sha256(base_id.encode() + b"\0" + text.encode())
    for target in sorted(layout):
        digest.update(str(target).encode() + b"\0")
        with layout[target].open("rb") as f:
            digest.update(hashlib.file_digest(f, "sha256").digest())
    return digest.hexdigest()[:16]


def build_router_image(docker: list[str], base_image: str) -> str:
    """Make `records.router.image_tag(base_image)` on the daemon `docker` (the CLI argv that reaches
    it) unless the image with the same content is there; its tag."""
    tag = image_tag(base_image)
    base_id = inspect(docker, "{{.Id}}", base_image)
    if base_id is None:
        raise RuntimeError(f"the router stand-in needs the service image {base_image} on the simulated host")
    layout = _layout()
    launcher = _launcher(importlib.metadata.distribution(ROUTER_DISTRIBUTION), "vllm-router")
    want = content_hash(base_id, layout, launcher)
    if inspect(docker, f'{{{{ index .Config.Labels "{HASH_LABEL}" }}}}', tag) == want:
        return tag
    launcher_path = Path("usr/local/bin/vllm-router")
    build_on_base(
        docker, base_image, tag, f"{HASH_LABEL}={want}", layout, {launcher_path: launcher},
        "# Stands in for records.router.dockerfile(base): the same base, vllm-router copied instead of pip-installed.",
    )  # fmt: skip
    return tag


def build_on_base(
    docker: list[str],
    base_image: str,
    tag: str,
    label: str,
    layout: dict[Path, Path],
    scripts: dict[Path, str],
    comment: str,
) -> None:
    """Build `tag` on the daemon `docker`: `FROM base_image`, the files of `layout` (path in the image ->
    file here), the executable `scripts` (path in the image, relative to /, -> text) and `python3` on
    PATH for the interpreter of `python_layout`, labelled `label`."""
    interpreter = next(t for t in layout if t.parent == PYTHON_PREFIX / "bin")
    with tempfile.TemporaryDirectory(prefix="sim-python-image-") as context:
        rootfs = Path(context) / "rootfs"
        for target, source in layout.items():
            copy = rootfs / target.relative_to("/")
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy)
        for relative, text in scripts.items():
            script = rootfs / relative
            script.parent.mkdir(parents=True, exist_ok=True)
            script.write_text(text)
            script.chmod(0o755)
        (Path(context) / "Dockerfile").write_text(
            f"{comment}\n"
            f"FROM {base_image}\n"
            "COPY rootfs/ /\n"
            f'RUN ["/bin/busybox", "ln", "-sf", "{interpreter}", "/usr/local/bin/python3"]\n'
        )
        proc = subprocess.run(
            [*docker, "build", "-q", "-t", tag, "--label", label, context],
            capture_output=True, text=True, timeout=900, env={**os.environ, "DOCKER_BUILDKIT": "0"},
        )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"building the stand-in image {tag} failed:\n{proc.stdout}\n{proc.stderr}")


def inspect(docker: list[str], fmt: str, image: str) -> str | None:
    proc = subprocess.run([*docker, "image", "inspect", "-f", fmt, image], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None
