"""The program's pipeline as tests call it: stack values (or a parsed fleet) → plan → deployment → plan JSON.

One spelling of `parse_fleet → plan_fleet → deploy → plan_json` for the tests, so a change to how
the program chains its layers changes this module, not every test that needs a plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allocation.config import FleetConfig, parse_fleet
from allocation.plan import Plan
from allocation.planner import plan_fleet
from records.deployment import Deployment, deploy
from views.report import plan_json


def plan_of(source: Mapping[str, Any] | FleetConfig, stack: str = "test") -> Plan:
    """The plan of stack values (parsed as stack `stack`) or of a fleet already parsed."""
    fleet = source if isinstance(source, FleetConfig) else parse_fleet(stack, source)
    return plan_fleet(fleet)


def deployment_of(source: Mapping[str, Any] | FleetConfig, stack: str = "test") -> Deployment:
    """The records `deploy` builds from the plan of `source`."""
    return deploy(plan_of(source, stack))


def plan_json_of(source: Mapping[str, Any] | FleetConfig, stack: str = "test") -> dict[str, Any]:
    """The plan document (`plan --format json`) of `source`."""
    return plan_json(deployment_of(source, stack))
