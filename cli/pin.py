"""`pin`: write a reviewed plan back into its stack file, so it never moves again.

Without pins, adding or removing a service can shift the allocator's choices
for others on the same host. Pinning writes every service's host, cards and
port windows into `Pulumi.<stack>.yaml` as explicit keys, through
`cli.stack_editor`, which changes only those values in the file's own text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedSeq

from allocation.errors import ConfigError
from allocation.plan import Plan, PlannedService
from allocation.windows import KINDS
from cli.stack_editor import set_service_keys


def _flow(values: list[int]) -> CommentedSeq:
    seq = CommentedSeq(values)
    seq.fa.set_flow_style()
    return seq


def pins_of(ps: PlannedService) -> dict[str, Any]:
    """The config keys that fix a service's current assignment."""
    a = ps.assignment
    # A service that lists candidate `hosts` keeps that key (narrowed to its host): `host` beside it is
    # refused. A replica's pins (`replicaPins`) have only `host`.
    narrowed = ps.service.hosts is not None and ps.replica_of is None
    where: dict[str, Any] = {"hosts": _flow([a.host_name])} if narrowed else {"host": a.host_name}
    pins: dict[str, Any] = where | {"devices": _flow(list(a.cards))}
    if ps.auto_fraction:  # `auto` becomes the number the planner chose
        pins["memoryFraction"] = float(ps.service.memory_fraction)
    for kind in KINDS:
        if kind.key in a.windows:
            value = kind.value(a.windows[kind.key])
            pins[kind.key] = _flow(value) if isinstance(value, list) else value
    return pins


def _replicated_pins(plan: Plan) -> dict[str, dict[str, Any]]:
    """A replicated service's pins: each replica's under `replicaPins`, in order, and its router's ports."""
    replicas: dict[str, dict[str, PlannedService]] = {}
    for _, ps in plan.services():
        if ps.replica_of is not None:
            replicas.setdefault(ps.replica_of, {})[ps.name] = ps
    keys: dict[str, dict[str, Any]] = {}
    for router in plan.routers:
        ordered = [replicas[router.service.name][name] for name in router.replicas]
        each = [pins_of(ps) for ps in ordered]
        fractions = sorted({pins.pop("memoryFraction") for pins in each if "memoryFraction" in pins})
        if len(fractions) > 1:
            sized = ", ".join(f"{ps.name} {ps.service.memory_fraction} on {ps.assignment.host_name}" for ps in ordered)
            raise ConfigError(
                f"service {router.service.name}: memoryFraction auto chose different fractions for its replicas "
                f"({sized}), and a service has one memoryFraction: set it by hand (the largest that fits every "
                "replica's host), or give its replicas hosts of one HBM size; nothing was written"
            )
        shared = {"memoryFraction": fractions[0]} if fractions else {}
        keys[router.service.name] = shared | {
            "replicaPins": each,
            "routerPort": router.port,
            "routerMetricsPort": router.metrics_port,
        }
    return keys


def stack_pins(plan: Plan) -> dict[str, dict[str, Any]]:
    """Every configured service's pins, by its name in the stack file."""
    keys = {ps.name: pins_of(ps) for _, ps in plan.services() if ps.replica_of is None}
    return keys | _replicated_pins(plan)


def pin_stack_file(path: Path, plan: Plan) -> list[str]:
    """Write the plan's pins into the stack file; return the names of services that changed."""
    return set_service_keys(path, stack_pins(plan), every=True)
