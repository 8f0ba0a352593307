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

# A fleet deployed as two shards: shard 0 holds a and b, shard 1 c and d; every service is pinned to its host.
SHARDED_FLEET = """\
config:
  ascend-fleet:shards: {size: 2}
  ascend-fleet:hosts:
    - {name: a, address: 192.0.2.1}
    - {name: b, address: 192.0.2.2}
    - {name: c, address: 192.0.2.3}
    - {name: d, address: 192.0.2.4}
  ascend-fleet:services:
    - {name: on-a, model: /models/x, memoryFraction: 0.5, host: a}
    - {name: on-b, model: /models/x, memoryFraction: 0.5, host: b}
    - {name: on-c, model: /models/x, memoryFraction: 0.5, host: c}
    - {name: on-d, model: /models/x, memoryFraction: 0.5, host: d}
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
