"""The objects the lane applies: each committed stack's `render --format kubernetes`, or, while this
branch has no renderer (`views/exports/kubernetes.py`), the stand-in tests/kube/fixture.yaml.

A stack is a committed stack's name or a stack file's path (the multi-host example,
examples/Pulumi.deepseek-r1.yaml, whose groups are LeaderWorkerSets). The renderer is reached through the CLI (`python -m allocation render --format kubernetes --stack S`,
the interface issue 32 names: one YAML document per object on standard output), so the lane checks the
bytes an operator would `kubectl apply`. The hosts (nodes and their card counts) come from
`plan --format json`.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
STACKS = ("prod", "staging", "dev")
FIXTURE = Path(__file__).with_name("fixture.yaml")
FIXTURE_HOSTS = {"npu-a": 8}
MULTI_HOST = REPO / "examples" / "Pulumi.deepseek-r1.yaml"


def _stack(stack: str | Path) -> tuple[str, str]:
    return ("--config", str(stack)) if isinstance(stack, Path) else ("--stack", stack)


def renderer_present() -> bool:
    try:
        return importlib.util.find_spec("views.exports.kubernetes") is not None
    except ModuleNotFoundError:
        return False


def _cli(*args: str) -> str:
    argv = [sys.executable, "-m", "allocation", *args]
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(argv[1:])} exited {result.returncode}:\n{result.stderr}")
    return result.stdout


def rendered(stack: str | Path) -> list[dict[str, Any]]:
    """Every object `render --format kubernetes` writes for `stack`."""
    text = _cli("render", "--format", "kubernetes", *_stack(stack))
    return [doc for doc in yaml.safe_load_all(text) if doc]


def fixture() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(FIXTURE.read_text()) if doc]


def hosts(stack: str | Path) -> dict[str, int]:
    """host name -> its card count, from the stack's plan."""
    plan = json.loads(_cli("plan", *_stack(stack), "--format", "json"))
    return {host["name"]: host["npus"] for host in plan["hosts"]}
