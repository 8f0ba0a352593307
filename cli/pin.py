"""`pin`: write a reviewed plan back into its stack file, so it never moves again.

Without pins, adding or removing a service can shift the allocator's choices
for others on the same host. Pinning writes every service's host, cards and
port windows into `Pulumi.<stack>.yaml` as explicit keys; comments, key order
and formatting of the file are preserved (ruamel.yaml round trip), and the
file is replaced atomically, so it is never left half-written.
"""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedSeq

from allocation.config import NAMESPACE
from allocation.errors import ConfigError
from allocation.plan import Plan, PlannedService
from allocation.windows import KINDS


def _flow(values: list[int]) -> CommentedSeq:
    seq = CommentedSeq(values)
    seq.fa.set_flow_style()
    return seq


def pins_of(ps: PlannedService) -> dict[str, Any]:
    """The config keys that fix a service's current assignment."""
    a = ps.assignment
    pins: dict[str, Any] = {"host": a.host_name, "devices": _flow(list(a.cards))}
    for kind in KINDS:
        if kind.key in a.windows:
            value = kind.value(a.windows[kind.key])
            pins[kind.key] = _flow(value) if isinstance(value, list) else value
    return pins


def pin_stack_file(path: Path, plan: Plan) -> list[str]:
    """Write the plan's pins into the stack file; return the names of services that changed."""
    yaml = YAML()  # round trip: keeps comments and key order
    yaml.preserve_quotes = True
    yaml.indent(mapping=2, sequence=4, offset=2)
    doc = yaml.load(path.read_text(encoding="utf-8"))
    services = (doc or {}).get("config", {}).get(f"{NAMESPACE}:services")
    if services is None:
        raise ConfigError(
            f"{path}: has no '{NAMESPACE}:services' list to pin; pin writes the stack file only, "
            "so services defined in Pulumi.yaml must move to the stack file first"
        )
    planned = {ps.name: ps for _, ps in plan.services()}
    changed = []
    for entry in services:
        ps = planned[entry["name"]]
        before = {k: entry.get(k) for k in pins_of(ps)}
        for key, value in pins_of(ps).items():
            entry[key] = value
        if any(before[k] != entry[k] for k in before):
            changed.append(ps.name)
    buffer = io.StringIO()
    yaml.dump(doc, buffer)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(buffer.getvalue())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return changed
