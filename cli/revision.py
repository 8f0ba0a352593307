"""The plan of a stack as it was at another git revision.

`plan --against REF` compares the current plan with the plan the code and the
configuration at REF produced. The old plan is computed by the old code, not by
today's planner applied to yesterday's YAML: a change to the allocator itself is
a change of allocation too, and the diff must show it. So the tree at REF is
extracted into a temporary directory and `python -m allocation plan --format
json` runs there, with the same interpreter.

The only outside dependency is the `git` command line.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from allocation.errors import FleetError

# Generous: the planner takes milliseconds, but the old tree's imports (pydantic) do not.
PLAN_TIMEOUT_SECONDS = 300


def plan_at_revision(
    repo_root: Path,
    ref: str,
    stack: str | None,
    config_path: Path | None,
) -> dict[str, Any] | None:
    """The plan JSON of the same stack at git revision `ref`, or None if its file did not exist.

    Give either `stack` (the file `Pulumi.<stack>.yaml` at the top of the repository) or
    `config_path` (a stack file inside the repository, absolute or relative to the current
    directory). Raises FleetError when `ref` is unknown or the old plan fails.
    """
    if (stack is None) == (config_path is None):
        raise ValueError("give exactly one of stack and config_path")
    repo_root = Path(repo_root).resolve()
    # The project may sit in a subdirectory of the git work tree.
    top = _toplevel(repo_root)
    prefix = repo_root.relative_to(top).as_posix()
    prefix = "" if prefix == "." else prefix + "/"
    commit = resolve_revision(repo_root, ref)
    relative = _stack_file(repo_root, stack, config_path)
    if not _exists_at(repo_root, commit, prefix + relative):
        return None
    with tempfile.TemporaryDirectory(prefix="ascend-fleet-plan-") as tmp:
        _extract(top, commit, Path(tmp))
        project = Path(tmp, prefix)
        selector = ["--stack", stack] if stack is not None else ["--config", relative]
        return _run_plan(project, selector, ref)


def _toplevel(repo_root: Path) -> Path:
    result = _git(repo_root, "rev-parse", "--show-toplevel")
    if result.returncode != 0:
        raise FleetError(
            f"{repo_root} is not inside a git work tree, so there is no other revision to plan: "
            f"{result.stderr.decode(errors='replace').strip()}"
        )
    return Path(result.stdout.decode().strip()).resolve()


def resolve_revision(repo_root: Path, ref: str) -> str:
    """The commit id `ref` names in the repository at `repo_root`."""
    if ref.startswith("-"):
        # Never let a revision be read as an option of git.
        raise FleetError(f"'{ref}' is not a git revision.")
    result = _git(repo_root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    if result.returncode != 0:
        raise FleetError(
            f"unknown git revision '{ref}' in {repo_root}: it names no commit there. "
            "Check the spelling, and fetch it first if it is a remote branch "
            "(in CI, check out with full history, e.g. actions/checkout with fetch-depth: 0)."
        )
    return result.stdout.decode().strip()


def _stack_file(repo_root: Path, stack: str | None, config_path: Path | None) -> str:
    """The stack file's path relative to the repository root, with '/' separators."""
    if stack is not None:
        return f"Pulumi.{stack}.yaml"
    path = Path(config_path).resolve()  # type: ignore[arg-type]
    try:
        return path.relative_to(repo_root).as_posix()
    except ValueError:
        raise FleetError(
            f"config file {config_path} is outside the git repository {repo_root}, "
            "so it has no version at another revision; --against needs a stack file in the repository."
        ) from None


def _exists_at(repo_root: Path, commit: str, path: str) -> bool:
    """Whether `path` (relative to the top of the work tree) exists in `commit`."""
    return _git(repo_root, "cat-file", "-e", f"{commit}:{path}").returncode == 0


def _extract(top: Path, commit: str, dest: Path) -> None:
    """Unpack the whole tree of `commit` into `dest` (git archive, read with tarfile: no `tar` needed)."""
    result = _git(top, "archive", "--format=tar", commit)
    if result.returncode != 0:
        raise FleetError(
            f"could not extract revision {commit[:12]} of {top} with git archive: "
            f"{result.stderr.decode(errors='replace').strip()}"
        )
    try:
        with tarfile.open(fileobj=io.BytesIO(result.stdout)) as archive:
            archive.extractall(dest, filter="data")
    except tarfile.TarError as exc:
        raise FleetError(
            f"revision {commit[:12]} holds a file that cannot be unpacked safely ({exc}), so its plan cannot be run."
        ) from None


def _run_plan(tree: Path, selector: list[str], ref: str) -> dict[str, Any]:
    env = dict(os.environ)
    # The old tree's `allocation` package must win over any other on the path.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
    env.pop("PYTHONSAFEPATH", None)
    command = [sys.executable, "-m", "allocation", "plan", *selector, "--format", "json"]
    try:
        result = subprocess.run(
            command,
            cwd=tree,
            env=env,
            capture_output=True,
            timeout=PLAN_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise FleetError(
            f"the plan at {ref} did not finish within {PLAN_TIMEOUT_SECONDS} s "
            f"(`{' '.join(command[1:])}` in the tree of {ref})."
        ) from None
    stderr = result.stderr.decode(errors="replace").strip()
    if result.returncode != 0:
        raise FleetError(
            f"the plan at {ref} failed (`python {' '.join(command[1:])}` in the tree of {ref} "
            f"exited with {result.returncode}), so there is nothing to compare with: "
            f"{stderr or 'no error output'}"
        )
    try:
        plan = json.loads(result.stdout)
    except json.JSONDecodeError as exc:
        raise FleetError(
            f"the plan at {ref} did not print JSON ({exc}); does the code at {ref} support "
            f"`plan --format json`? Its error output: {stderr or 'none'}"
        ) from None
    if not isinstance(plan, dict):
        raise FleetError(f"the plan at {ref} printed {type(plan).__name__} JSON, not an object.")
    return plan


def _git(repo_root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", "-C", str(repo_root), *args], capture_output=True, check=False)
    except FileNotFoundError:
        raise FleetError(
            "plan --against needs the `git` command line, which is not installed or not on PATH."
        ) from None
