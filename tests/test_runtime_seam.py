"""The runtime seam (records/runtime.py): the container runtime's command line is spelled in one records
module, and moving it there changed no byte a host or a container receives.

Two checks. The fixture `tests/data/runtime_seam.json` holds a sha256 of every command resource's
`create`/`update`/`delete` script and of every container's inputs, for the committed stacks and the
golden synthetic fleets (tests/goldens.py), run through the real program under Pulumi's mocks
(tests/pulumi_harness.py); it was written before the seam existed, so any change to a script or a
container input fails here. `python -m tests.test_runtime_seam` writes it again; do so only for a
change meant to reach the hosts. The structural check reads every records module's syntax tree (as
tests/test_names.py does for names): outside the runtime module no string but a docstring spells the
Docker CLI.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from cli.stackfile import StackFile, stack_values
from tests import goldens
from tests.support.pulumi_harness import LOCAL_COMMAND, PROJECT_ROOT, REMOTE_COMMAND, run_program

FIXTURE = Path(__file__).parent / "data" / "runtime_seam.json"
SYNTHETIC_STACK = "golden"
RECORDS = PROJECT_ROOT / "records"
HOME = RECORDS / "runtime.py"
# The CLI as the scripts spell it: a command word (`docker ps`), the tests' override (`${docker:-docker}`,
# `"$docker"`, `docker=...`), an argv's first word (`"docker"`), and the runtime's own paths and units.
DOCKER_CLI = re.compile(r"\bdocker(\s|\}|\"|=|$)|\$docker|/docker\b|docker\.service")


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=repr).encode()).hexdigest()


def _values() -> dict[str, tuple[str, dict]]:
    """Fleet name -> (stack, its `ascend-fleet:` values): the stack files, the synthetic fleets, prod with the
    NPU exporter."""
    stacks = {s: (s, stack_values(StackFile(s, PROJECT_ROOT / f"Pulumi.{s}.yaml"))) for s in goldens.STACKS}
    # No committed fleet deploys the NPU exporter, whose container names the runtime too.
    exporter = {**stacks["prod"][1], "metrics": {"npuExporter": {"image": "registry.example/npu-exporter:v6.0.0"}}}
    synthetic = {name: (SYNTHETIC_STACK, values) for name, values in goldens._synthetic().items()}
    return stacks | synthetic | {"prod with the NPU exporter": ("prod", exporter)}


def digests(stack: str, values: dict) -> dict[str, str]:
    """Resource -> sha256 of what it receives: a command's scripts, a container's inputs."""
    run = run_program(stack, values)
    out = {}
    for kind in (REMOTE_COMMAND, LOCAL_COMMAND):
        for name, reg in sorted(run.by_name(kind).items()):
            for step in ("create", "update", "delete"):
                if step in reg.inputs:
                    out[f"command {name} {step}"] = _digest(reg.inputs[step])
    for name, inputs in sorted(run.containers().items()):
        out[f"container {name}"] = _digest(inputs)
    return out


@pytest.mark.parametrize("fleet", sorted(_values()))
def test_every_script_and_container_input_is_the_one_in_the_fixture(fleet):
    stack, values = _values()[fleet]
    expected = json.loads(FIXTURE.read_text())[fleet]
    actual = digests(stack, values)
    changed = sorted(k for k in expected.keys() | actual.keys() if expected.get(k) != actual.get(k))
    assert not changed, f"{fleet}: these resources receive other bytes than the fixture holds: {changed}"


def docker_strings(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of each string in `tree`, docstrings aside, that spells the Docker CLI."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }  # fmt: skip
    # A bare string right after an assignment documents it (the attribute docstrings of this codebase).
    bodies = [node.body for node in ast.walk(tree) if isinstance(getattr(node, "body", None), list)]
    docstrings |= {
        id(b.value)
        for body in bodies
        for a, b in zip(body, body[1:])
        if isinstance(a, (ast.Assign, ast.AnnAssign)) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)
    }  # fmt: skip
    return sorted(
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
        and DOCKER_CLI.search(node.value)
    )  # fmt: skip


@pytest.mark.parametrize("path", sorted(p for p in RECORDS.glob("*.py") if p != HOME), ids=lambda p: p.name)
def test_no_records_module_but_the_runtime_spells_the_docker_cli(path):
    found = docker_strings(ast.parse(path.read_text(), str(path)))
    assert not found, (
        f"{path.relative_to(PROJECT_ROOT)} spells the container runtime's CLI in a string "
        f"({', '.join(f'line {n}: {t[:60]!r}' for n, t in found)}): take the words from records/runtime.py, "
        "so a second runtime changes one module"
    )


def test_the_structural_rule_sees_cli_words_and_leaves_docstrings_alone():
    tree = ast.parse(
        '"""docker stop NAME in a module docstring."""\n'
        'X = "docker stop NAME"\n'
        '"""docker ps: an attribute docstring."""\n'
        'def f():\n    """docker logs: a function docstring."""\n    return f"{a} ${{docker:-docker}} ps"\n'
        'ARGV = ["docker", "exec"]\n'
        'UNIT = "After=docker.service"\n'
        'FINE = "Docker Engine 25, dockerEngine, dockerd"\n'
    )
    assert [line for line, _ in docker_strings(tree)] == [2, 6, 7, 8]
    assert HOME.exists() and docker_strings(ast.parse(HOME.read_text())), "the runtime module spells the CLI"


def main() -> int:
    FIXTURE.write_text(json.dumps({f: digests(*sv) for f, sv in _values().items()}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
