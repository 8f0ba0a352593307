"""Git repositories made in a test's tmp folder, holding the real program, for the commands that read
another revision (`plan --against`, `shards --changed-since`): git with a fixed identity and no
user or system config, and the packages `python -m allocation` runs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROJECT = """\
name: ascend-fleet
runtime:
  name: python
"""


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "test", "GIT_AUTHOR_EMAIL": "test@example.com",
        "GIT_COMMITTER_NAME": "test", "GIT_COMMITTER_EMAIL": "test@example.com",
        "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
    }  # fmt: skip
    return subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True, text=True).stdout


def copy_program(dest: Path) -> None:
    """The packages `python -m allocation plan` runs, as a repository would hold them."""
    for package in ("allocation", "records", "views", "cli", "ops"):
        shutil.copytree(REPO / package, dest / package, ignore=shutil.ignore_patterns("__pycache__"))
