"""The runtime and the development requirements stay apart: `make plan` installs requirements.txt
alone (what the program and `python -m allocation` import), the test targets requirements-dev.txt on
top; both pinned exactly. A module of the program that starts importing a test tool, or a runtime
package missing from requirements.txt, fails here rather than on a fresh operator's first `make plan`."""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "requirements.txt"
DEV = ROOT / "requirements-dev.txt"
PROGRAM = ("allocation", "records", "views", "cli", "components", "ops", "sim")
VENV_OWN = {"pip", "setuptools"}
"""What `python -m venv` puts in every virtualenv (setuptools' .pth file loads its distutils hack at start)."""


def normal(name: str) -> str:
    """A distribution's name as PyPI compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    """name -> version of every `name==version` line; any other line but a comment or `-r` fails."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line or line.startswith("-r "):
            continue
        name, sep, version = line.partition("==")
        assert sep and re.fullmatch(r"[0-9][0-9A-Za-z.]*", version), f"{path.name}: {line!r} is not pinned exactly"
        found[normal(name)] = version
    return found


def closure(names: set[str]) -> set[str]:
    """The installed distributions `names` need, transitively (markers evaluated, no extras)."""
    seen, pending = set(), list(names)
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for text in metadata.requires(name) or ():
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                pending.append(normal(req.name))
    return seen


def loaded_distributions() -> set[str]:
    """The distributions whose modules a fresh interpreter loads when it imports every module of the
    program (the planner, records, views, the command line, the components, ops and the simulator)."""
    code = (
        "import importlib, importlib.metadata as md, json, pathlib, sys\n"
        f"for pkg in {PROGRAM!r}:\n"
        "    for p in sorted(pathlib.Path(pkg).rglob('*.py')):\n"
        "        if p.stem != '__main__':\n"
        "            importlib.import_module('.'.join(p.with_suffix('').parts).removesuffix('.__init__'))\n"
        "found = md.packages_distributions()\n"
        "print(json.dumps(sorted({d for m in list(sys.modules) for d in found.get(m.split('.')[0], [])})))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return {normal(d) for d in json.loads(result.stdout)}


def test_both_files_pin_every_package_exactly_and_the_dev_file_adds_the_runtime_first():
    runtime, dev = pins(RUNTIME), pins(DEV)
    assert runtime and dev
    assert DEV.read_text().splitlines()[[l.startswith("#") for l in DEV.read_text().splitlines()].index(False)] == "-r requirements.txt"
    assert set(runtime) & set(dev) == set(), "a package is pinned in one file only"


def test_the_program_imports_only_what_requirements_txt_installs_and_no_test_tool():
    loaded = loaded_distributions()
    runtime = set(pins(RUNTIME))
    assert loaded - closure(runtime) - VENV_OWN == set(), "imported at run time but not installed by requirements.txt"
    assert loaded & set(pins(DEV)) == set(), "a test tool imported by the program"
    assert {"pulumi", "pulumi-docker", "pulumi-command", "pulumi-kubernetes", "grafana-foundation-sdk"} <= loaded


def test_every_runtime_pin_is_imported_by_the_program():
    """No test tool hides in requirements.txt: each pin is a distribution the program loads."""
    assert set(pins(RUNTIME)) - loaded_distributions() == set()


def dry_run(tmp_path: Path, target: str) -> str:
    """The commands `make TARGET` would run in a fresh clone (no .venv yet)."""
    for name in ("Makefile", "requirements.txt", "requirements-dev.txt", "requirements-bench.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    # Under `make test` (as .ci/run runs it) the parent's MAKEFLAGS and MAKELEVEL would reach this make,
    # which then prints "Entering directory" lines and takes the parent's variables.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    result = subprocess.run(["make", "-n", target], cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_make_plan_installs_the_runtime_alone(tmp_path: Path):
    commands = dry_run(tmp_path, "plan")
    assert "pip install --quiet --disable-pip-version-check -r requirements.txt" in commands
    assert "requirements-dev.txt" not in commands
    assert commands.strip().endswith("-m allocation plan --stack prod")


@pytest.mark.parametrize("target", ["test", "test-sim", "test-engine", "test-kube", "bench"])
def test_every_test_target_installs_the_test_tools_on_top_of_the_runtime(tmp_path: Path, target: str):
    commands = dry_run(tmp_path, target)
    assert commands.index("-r requirements.txt") < commands.index("-r requirements-dev.txt")


def test_ci_runs_make_test_so_it_installs_everything():
    script = (ROOT / ".ci" / "run").read_text()
    assert 'make TEST_MARKS= "${1:-test}"' in script
