"""The router image's install step, run for real: pip installs the pinned wheel only if its hash matches.

The Dockerfile's `RUN` line runs here in a fresh venv, as it runs in the service's image (which
has Python, pip and vLLM's dependencies): PyPI serves the wheel for this machine and pip checks
it against the pinned sha256. No registry holds a vLLM-Ascend image here, so `docker build`
itself is not run; the line it runs is.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from allocation import router


def _run_line(dockerfile: str) -> str:
    (line,) = [line for line in dockerfile.split("\nRUN ", 1)[1:]]
    return line.replace("\\\n", " ")


def install(tmp_path: Path, dockerfile: str) -> subprocess.CompletedProcess:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "TMPDIR": str(tmp_path)}
    line = _run_line(dockerfile).replace("/tmp/", f"{tmp_path}/")
    return subprocess.run(["sh", "-c", line], env=env, capture_output=True, text=True, timeout=600)


def test_the_pinned_wheel_installs_with_its_hash_checked(tmp_path):
    result = install(tmp_path, router.dockerfile("quay.io/ascend/vllm-ascend:v0.20.2rc1"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Successfully installed vllm-router-{router.VERSION}" in result.stdout
    assert (tmp_path / "venv/bin/vllm-router").exists()


def test_a_wheel_whose_hash_is_not_pinned_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(router, "WHEEL_HASHES", ("0" * 64,))
    result = install(tmp_path, router.dockerfile("quay.io/ascend/vllm-ascend:v0.20.2rc1"))
    assert result.returncode != 0
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in result.stderr
