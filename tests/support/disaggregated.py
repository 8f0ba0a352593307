"""A disaggregated service's stack values for tests: the committed 1P1D example, and small two-host stacks."""

from __future__ import annotations

from pathlib import Path

from cli.stackfile import load_fleet
from records.deployment import Deployment
from tests.support.pipeline import deployment_of
from tests.support.stacks import host

EXAMPLE = str(Path(__file__).resolve().parent.parent.parent / "examples" / "Pulumi.pd-1p1d.yaml")
ROLES = {"prefill": {"tensorParallelSize": 4}, "decode": {"tensorParallelSize": 4}}


def pd(**extra) -> dict:
    """A disaggregated service `pd` of TP 4 per role, `extra` merged (its `disaggregated` into the roles)."""
    return {"name": "pd", "model": "/models/pd", "disaggregated": {**ROLES, **extra.pop("disaggregated", {})}, **extra}


def values(*services, **fleet) -> dict:
    """Hosts a (10.0.0.1) and b (10.0.0.2) with `services` (default one `pd()`)."""
    return {"hosts": [host("a", address="10.0.0.1"), host("b", address="10.0.0.2")], "services": list(services or [pd()]), **fleet}


def example() -> Deployment:
    """The deployment of the committed 1P1D example."""
    return deployment_of(load_fleet(None, EXAMPLE)[0])
