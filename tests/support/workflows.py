"""The workflows' own shell scripts (`run:` of .github/workflows/*.yml), run as GitHub's runner runs
them (`bash --noprofile --norc -eo pipefail`, the default shell of a `run:` step on Linux: GitHub's
workflow syntax, `jobs.<job_id>.steps[*].shell`), in a git repository holding the real program."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from tests.support.git_repos import REPO

WORKFLOW_DIR = REPO / ".github" / "workflows"


def load(name: str) -> dict[str, Any]:
    """A workflow as data; ruamel reads YAML 1.2, where `on:` is the string "on", not the boolean True."""
    return YAML(typ="safe").load((WORKFLOW_DIR / name).read_text())


def step_script(workflow: str, job: str, name: str) -> str:
    """The `run:` script of the step `name` of `job`."""
    [step] = [s for s in load(workflow)["jobs"][job]["steps"] if s.get("name") == name]
    return step["run"]


def run_script(repo: Path, script: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`script` run in `repo` as a step runs it, with only PATH, HOME and `env` set."""
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=repo, capture_output=True, text=True,
        timeout=600, env={"PATH": os.environ["PATH"], "HOME": str(repo), **env},
    )  # fmt: skip


def outputs(path: Path) -> dict[str, str]:
    """The `name=value` lines a step wrote to $GITHUB_OUTPUT."""
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def link_venv(repo: Path) -> None:
    """The workflows run `.venv/bin/python`: this interpreter's virtualenv, linked whole (a link to the
    interpreter alone would lose the virtualenv's site-packages)."""
    (repo / ".venv").symlink_to(Path(sys.executable).parents[1])
