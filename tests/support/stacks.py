"""Stack config values: small builders (`host`, `service`, `fleet`), the seed fleets, and the
repository's `Pulumi.*.yaml` stack files with one mocked program run each."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from allocation.config import FleetConfig, parse_fleet
from allocation.errors import ConfigError
from allocation.planner import plan_fleet
from cli.pin import stack_pins
from cli.stackfile import stack_values, StackFile
from tests.support.pulumi_harness import PROJECT_ROOT, run_program

STACK_FILES = sorted(PROJECT_ROOT.glob("Pulumi.*.yaml"))
STACKS = {p.name.removeprefix("Pulumi.").removesuffix(".yaml"): p for p in STACK_FILES}
_RUNS: dict[str, object] = {}
stack_params = pytest.mark.parametrize("stack", sorted(STACKS))
SEED_UNPINNED = """\
# A comment the operator wrote, which pin must keep.
config:
  ascend-fleet:hosts:
    - name: npu-a
      address: 192.0.2.10   # the rack's first host
  ascend-fleet:services:
    - name: qwen
      model: /m/qwen        # weights
      tensorParallelSize: 4
      memoryFraction: 0.85
    - name: bge
      model: /m/bge
      memoryFraction: 0.1
"""


def host(name: str = "npu-a", **extra: Any) -> dict[str, Any]:
    return {"name": name, "address": f"{name}.example", **extra}


def service(name: str, tp: int = 1, fraction: float = 0.5, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "model": f"/models/{name}",
        "tensorParallelSize": tp,
        "memoryFraction": fraction,
        **extra,
    }


def fleet(hosts: list[dict], services: list[dict], stack: str = "test", **extra: Any) -> FleetConfig:
    return parse_fleet(stack, {"hosts": hosts, "services": services, **extra})


def seed_values() -> dict[str, Any]:
    """The seed deployment without any pins: the allocator chooses everything."""
    return {
        "hosts": [host("npu-a")],
        "services": [
            service("bge-m3", 1, 0.1, apiPort=7007, maxModelLen=8192),
            service("qwen-vl", 4, 0.85, apiPort=9009, maxModelLen=25000, maxNumSeqs=10),
            service("qwen-long", 4, 0.90, apiPort=6006, maxModelLen=100000, maxNumSeqs=2),
        ],
    }


def values_of(stack: str) -> dict:
    """The values of the repository's stack file `Pulumi.<stack>.yaml`, as the program reads them."""
    return stack_values(StackFile(stack, STACKS[stack]))


def planned(stack: str, values: dict):
    """The parsed fleet and its plan."""
    fleet = parse_fleet(stack, values)
    return fleet, plan_fleet(fleet)


def stack_run(stack: str):
    """One mocked run per stack file, shared by the tests that only read it."""
    if stack not in _RUNS:
        _RUNS[stack] = run_program(stack, values_of(stack))
    return _RUNS[stack]


def two_host_values() -> dict:
    """Two hosts, services pinned to each, one service sharing cards with another."""
    return {
        "hosts": [
            {"name": "npu-a", "address": "192.0.2.10"},
            {"name": "npu-b", "address": "192.0.2.11", "user": "deploy", "sshPort": 2222},
        ],
        "services": [
            {"name": "embed-a", "host": "npu-a", "model": "/models/bge-m3", "memoryFraction": 0.1, "devices": [0]},
            {"name": "chat-a", "host": "npu-a", "model": "/models/qwen", "tensorParallelSize": 4,
             "memoryFraction": 0.8, "devices": [0, 1, 2, 3]},
            {"name": "chat-b", "host": "npu-b", "model": "/models/qwen", "tensorParallelSize": 4,
             "memoryFraction": 0.8},
            {"name": "solo-b", "host": "npu-b", "model": "/models/small", "memoryFraction": 0.5},
        ],
    }  # fmt: skip


def pinned_values(values: dict, stack: str) -> dict:
    """The stack's values with every service pinned to what the planner gave it."""
    _, plan = planned(stack, values)
    pinned = copy.deepcopy(values)
    pins = stack_pins(plan)
    for service in pinned.get("services", []):
        service.update({k: list(v) if isinstance(v, list) else v for k, v in pins[service["name"]].items()})
    return pinned


def values(stack: str, metrics=None) -> dict:
    """A copy of a stack file's values, with `metrics` merged over its own."""
    out = copy.deepcopy(stack_values(StackFile(stack, PROJECT_ROOT / f"Pulumi.{stack}.yaml")))
    if metrics is not None:
        out["metrics"] = {**out.get("metrics", {}), **metrics}
    return out


def add_first(values: dict) -> dict:
    """A small newcomer whose name sorts before every other service."""
    values["services"].append({"name": "a-embed", "model": "/models/a", "memoryFraction": 0.05, "maxModelLen": 2048})
    return values


def refusal(vals: dict[str, Any]) -> str:
    """The one paragraph `parse_fleet` refuses the stack values `vals` with: no line break, no traceback."""
    with pytest.raises(ConfigError) as err:
        parse_fleet("test", vals)
    text = str(err.value)
    assert "\n" not in text and "Traceback" not in text
    return text
