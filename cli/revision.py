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
import shutil
import re
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
    as_named: str | None = None,
    flag: str = "--against",
) -> dict[str, Any] | None:
    """The plan JSON of the same stack at git revision `ref`, or None if its file did not exist.

    Give either `stack` (the file `Pulumi.<stack>.yaml` at the top of the repository) or
    `config_path` (a stack file inside the repository, absolute or relative to the current
    directory; a link is followed to its target, whose old version is planned under the link's name,
or under `as_named`, a file name such as `Pulumi.<stack>.yaml`, when the current side chose its stack
with `--stack-name`). Raises FleetError when `ref` is unknown or the old plan fails, naming `ref` by
    `flag`, the option the user gave it with (`plan --against`, `shards --changed-since`).
    """
    if (stack is None) == (config_path is None):
        raise ValueError("give exactly one of stack and config_path")
    repo_root = Path(repo_root).resolve()
    # The project may sit in a subdirectory of the git work tree.
    top = _toplevel(repo_root)
    prefix = repo_root.relative_to(top).as_posix()
    prefix = "" if prefix == "." else prefix + "/"
    commit = resolve_revision(repo_root, ref, flag)
    relative = _stack_file(repo_root, stack, config_path, flag)
    if not _exists_at(repo_root, commit, prefix + relative):
        return None
    with tempfile.TemporaryDirectory(prefix="ascend-fleet-plan-") as tmp:
        _extract(top, commit, Path(tmp))
        project = Path(tmp, prefix)
        if stack is not None:
            return _run_plan(project, ["--stack", stack], ref)
        return _run_plan(project, ["--config", _named_as_given(project, relative, as_named or Path(config_path).name)], ref)


def _named_as_given(project: Path, relative: str, name: str) -> str:
    """The old stack file under the name the current side was given (a link `Pulumi.prod.yaml` to
    `stacks/fleet.yaml`): the stack name comes from the file name, and both sides must plan one stack."""
    if Path(relative).name == name:
        return relative
    alias = Path(relative).with_name(name)
    (project / alias).unlink(missing_ok=True)  # a file or link of that name in the old tree
    shutil.copyfile(project / relative, project / alias)
    return alias.as_posix()


def _toplevel(repo_root: Path) -> Path:
    result = _git(repo_root, "rev-parse", "--show-toplevel")
    if result.returncode != 0:
        raise FleetError(
            f"{repo_root} is not inside a git work tree, so there is no other revision to plan: "
            f"{result.stderr.decode(errors='replace').strip()}"
        )
    return Path(result.stdout.decode().strip()).resolve()


_RANGE = re.compile(r"\.\.|\^[!@]\Z|\^-[0-9]*\Z")
"""git's spellings of a set of commits (gitrevisions(7), "Specifying ranges"): `A..B`, `A...B`,
`A^!`, `A^@`, `A^-`. `rev-parse --verify` refuses most of them, but with a message about an
unknown revision; `^A` (everything but A) it accepts, printing `^<id>`."""
_COMMIT_ID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?\Z")


def _not_one_commit(ref: str) -> str | None:
    """Why `ref` does not name one commit, before git is asked; None if it may."""
    if ref.startswith("-"):
        return "it starts with '-', so git would read it as an option: it is not a git revision"
    if ref.startswith("^"):
        return "a leading '^' excludes a commit instead of naming one"
    if _RANGE.search(ref):
        return "it is a range of commits (.., ..., ^!, ^@, ^-)"
    if not ref or any(c.isspace() or not c.isprintable() for c in ref):
        return "it is empty or holds spaces or control characters, so it is not one commit"
    return None


def resolve_revision(repo_root: Path, ref: str, flag: str = "--against") -> str:
    """The id of the one commit `ref` names in the repository at `repo_root`; a range, an exclusion
    (`^A`) or option-like text is refused, so the old side of a diff is never empty by accident.
    Errors name `ref` by `flag`, the option it was given with."""
    why = _not_one_commit(ref)
    if why is not None:
        raise FleetError(f"{flag} {ref!r} does not name one commit: {why}; give a branch, tag or commit id.")
    result = _git(repo_root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    commit = result.stdout.decode(errors="replace").strip()
    if result.returncode != 0:
        raise FleetError(
            f"{flag}: unknown git revision '{ref}' in {repo_root}: it names no commit there. "
            "Check the spelling, and fetch it first if it is a remote branch "
            "(in CI, check out with full history, e.g. actions/checkout with fetch-depth: 0)."
        )
    if not _COMMIT_ID.fullmatch(commit):
        raise FleetError(f"{flag} {ref!r} does not name one commit: git resolves it to {commit!r}.")
    return commit


def differs_from(repo_root: Path, commit: str, paths: tuple[str, ...]) -> bool:
    """Whether any of `paths` (relative to `repo_root`; a folder stands for everything in it) differs
    between `commit` and the work tree, as `plan` reads the files (`git diff --quiet`: exit 1 when they
    differ). A file not yet added to git is not seen, as in a clean CI checkout."""
    result = _git(repo_root, "diff", "--quiet", commit, "--", *paths)
    if result.returncode not in (0, 1):
        raise FleetError(f"git diff against {commit[:12]} failed in {repo_root}: {result.stderr.decode(errors='replace').strip()}")
    return result.returncode == 1


def file_at(repo_root: Path, commit: str, relative: str) -> bytes | None:
    """The bytes of `relative` (a path from `repo_root`) in `commit`, or None when it has no such file."""
    result = _git(repo_root, "show", f"{commit}:./{relative}")
    return result.stdout if result.returncode == 0 else None


def _stack_file(repo_root: Path, stack: str | None, config_path: Path | None, flag: str) -> str:
    """The stack file's path relative to the repository root, with '/' separators."""
    if stack is not None:
        return f"Pulumi.{stack}.yaml"
    path = Path(config_path).resolve()  # type: ignore[arg-type]
    try:
        return path.relative_to(repo_root).as_posix()
    except ValueError:
        raise FleetError(
            f"config file {config_path} is outside the git repository {repo_root}, "
            f"so it has no version at another revision; {flag} needs a stack file in the repository."
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
            "comparing with a git revision (plan --against, shards --changed-since) needs the `git` command line, "
            "which is not installed or not on PATH."
        ) from None
