"""Committed stacks on the Kubernetes target, for the render, target and doctor tests."""

from __future__ import annotations

from pathlib import Path

from cli.stackfile import locate, stack_values
from records.deployment import Deployment
from tests.support.pipeline import deployment_of

ROOT = Path(__file__).resolve().parents[2]


def kubernetes_deployment(stack: str, extra: dict | None = None) -> Deployment:
    """The records of committed stack `stack` with `target: kubernetes` (and `extra` keys) set."""
    values = stack_values(locate(stack, None)) | {"target": "kubernetes"} | (extra or {})
    return deployment_of(values, stack)


def with_keys(tmp_path: Path, stack: str, keys: str) -> Path:
    """A copy of committed stack file `stack` in `tmp_path` with `keys` (YAML lines) first under `config:`."""
    text = (ROOT / f"Pulumi.{stack}.yaml").read_text(encoding="utf-8")
    assert "\nconfig:\n" in text
    path = tmp_path / f"Pulumi.{stack}.yaml"
    path.write_text(text.replace("\nconfig:\n", "\nconfig:\n" + keys, 1), encoding="utf-8")
    return path
