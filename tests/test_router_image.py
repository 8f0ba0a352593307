"""The router image's install step, run for real, and the router it installs started for real.

The Dockerfile's `RUN` line runs here as it runs in the service's image: in a venv that holds
only what vLLM 0.20.2 declares and the router uses (`VLLM_DECLARES`, with vLLM's and
vllm-ascend's version bounds), so what the step leaves out is missing here too. PyPI serves the
wheels for this machine and pip checks them against the pinned sha256. No registry holds a
vLLM-Ascend image here, so `docker build` itself is not run; the line it runs is.

The venv of vLLM's dependencies (and pip) is built once for the module; each test gets a venv of
its own that sees it through a `.pth` file, so one test's install never leaks into another's. That
venv has no pip of its own: its `pip` runs the module venv's pip (the same version the service
image would bring), which installs into the venv that runs it, and the venv is made in
milliseconds instead of the seconds `ensurepip` takes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from records import router

# vLLM 0.20.2's Requires-Dist that vllm-router 0.1.17 imports (fastapi[standard] brings uvicorn);
# fastapi below 0.124 as vllm-ascend's requirements.txt pins it.
VLLM_DECLARES = ("requests>=2.26.0", "fastapi[standard]>=0.115.0,<0.124.0", "aiohttp>=3.13.3", "setproctitle")
BASE = "quay.io/ascend/vllm-ascend:v0.20.2rc1"


def _site_packages(venv: Path) -> Path:
    relative = Path(sysconfig.get_path("purelib")).relative_to(sysconfig.get_path("data"))
    return venv / relative


@pytest.fixture(scope="module")
def vllm_deps(tmp_path_factory) -> Path:
    """A venv with vLLM's declared dependencies that the router uses, and nothing else."""
    venv = tmp_path_factory.mktemp("vllm-deps") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin/python"), "-m", "pip", "install", "--quiet", *VLLM_DECLARES]
    subprocess.run(pip, check=True, timeout=600, capture_output=True)
    probe = subprocess.run([str(venv / "bin/python"), "-c", "import orjson"], capture_output=True, timeout=60)
    assert probe.returncode != 0, "vLLM's declared dependencies would bring orjson: the router image would not need it"
    return venv


class Image:
    """A venv standing in for the service's image: vLLM's dependencies, then the Dockerfile's RUN line."""

    def __init__(self, root: Path, vllm_deps: Path) -> None:
        self.root, self.venv = root, root / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(self.venv)], check=True, timeout=120)
        (_site_packages(self.venv) / "vllm-deps.pth").write_text(f"{_site_packages(vllm_deps)}\n")
        pip = self.venv / "bin/pip"  # what pip's console script runs, by this venv's interpreter
        launcher = "import sys\nfrom pip._internal.cli.main import main\nsys.exit(main())\n"
        pip.write_text(f"#!{self.venv / 'bin/python'}\n{launcher}")
        pip.chmod(0o755)
        self.env = {**os.environ, "PATH": f"{self.venv / 'bin'}:{os.environ['PATH']}", "TMPDIR": str(root)}

    def run_line(self, dockerfile: str) -> subprocess.CompletedProcess:
        (line,) = [line for line in dockerfile.split("\nRUN ", 1)[1:]]
        line = line.replace("\\\n", " ").replace("/tmp/", f"{self.root}/")
        return subprocess.run(["sh", "-c", line], env=self.env, capture_output=True, text=True, timeout=600)

    def router_help(self) -> subprocess.CompletedProcess:
        return subprocess.run(["vllm-router", "--help"], env=self.env, capture_output=True, text=True, timeout=120)


def test_the_pinned_wheels_install_with_their_hashes_checked_and_the_router_starts(tmp_path, vllm_deps):
    image = Image(tmp_path, vllm_deps)
    result = image.run_line(router.dockerfile(BASE))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Successfully installed" in result.stdout
    assert f"vllm-router-{router.VERSION}" in result.stdout and "orjson-3.13.0" in result.stdout
    started = image.router_help()
    assert started.returncode == 0, started.stderr
    assert "--worker-urls" in started.stdout and "--health-check-interval-secs" in started.stdout


def test_the_wheel_alone_does_not_start_on_vllms_dependencies(tmp_path, vllm_deps, monkeypatch):
    monkeypatch.setattr(router, "RUNTIME_HASHES", {})
    image = Image(tmp_path, vllm_deps)
    assert image.run_line(router.dockerfile(BASE)).returncode == 0
    started = image.router_help()
    assert started.returncode != 0
    assert "No module named 'orjson'" in started.stderr, "why the image installs orjson beside the wheel"


def test_a_wheel_whose_hash_is_not_pinned_is_refused(tmp_path, vllm_deps, monkeypatch):
    monkeypatch.setattr(router, "RUNTIME_HASHES", {"orjson==3.13.0": ("0" * 64,)})
    result = Image(tmp_path, vllm_deps).run_line(router.dockerfile(BASE))
    assert result.returncode != 0
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in result.stderr
