"""Running the CLI as an operator does: `python -m allocation ARGS` in a child process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def spawn(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """The CLI in a child process, from the repository root unless `cwd` says otherwise."""
    return subprocess.run([sys.executable, "-m", "allocation", *args], cwd=cwd, capture_output=True, text=True)
