"""The plan diff as text: a table for terminals, JSON for machines, markdown for pull-request comments.

Each format reads the same `PlanDiff` (views.diff.compare) and adds no fact of its own. Pure.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from allocation import names
from allocation.errors import printable
from views import markdown
from views.diff.compare import CAPACITY, IN_PLACE, SECURITY, Placement, PlanDiff, ServiceDiff

Format = Literal["table", "json", "markdown"]
FORMATS: tuple[Format, ...] = ("table", "json", "markdown")


def render_diff(diff: PlanDiff, fmt: str) -> str:
    """The diff as `table` (terminals), `json` (machines) or `markdown` (pull-request comments)."""
    if fmt == "table":
        return _render_table(diff)
    if fmt == "json":
        return _render_json(diff)
    if fmt == "markdown":
        return _render_markdown(diff)
    raise ValueError(f"unknown diff format {fmt!r}; choose one of {', '.join(FORMATS)}")


def _title(diff: PlanDiff) -> str:
    versus = f" against {diff.against}" if diff.against else ""
    return f"Allocation changes for stack {diff.stack}{versus}"


def _new_stack_note(diff: PlanDiff) -> str:
    where = f" at {diff.against}" if diff.against else ""
    return f"The stack did not exist{where}: every service is new."


def _restart_note(s: ServiceDiff) -> str:
    """What a re-created container costs the service it serves."""
    if s.exporter:
        return f"no NPU metrics from {s.host} until it is back; no model restarts"
    if s.kind == names.ROUTER:
        return f"router of {s.replica_of}: the endpoint is down until it is back"
    if s.kind == names.REPLICA:
        return f"replica of {s.replica_of}: one replica at a time, the others keep serving"
    return "down for the model load"


def _restart_rows(diff: PlanDiff) -> list[tuple[str, str, str, str]]:
    """(host, container, fields that force it, what it costs) per container `pulumi up` re-creates."""
    rows = []
    for s in diff.recreated():
        fields = list(s.recreate_keys) or [k for k in s.kinds() if k not in (IN_PLACE, CAPACITY)]
        if s.unaliased:  # a new resource to Pulumi: its missing previousNames entry re-creates it
            fields = ["previousNames", *s.recreate_keys]
        if s.moved:
            fields = ["cards", *(f for f in fields if f != "deviceFiles")]
        rows.append((s.host, s.name, ", ".join(dict.fromkeys(fields)), _restart_note(s)))
    return rows


def _restart_title(diff: PlanDiff) -> str:
    count = len(diff.recreated())
    if not count:
        # A multi-host service's members are in its line above (`Restarts as one`), a disaggregated service's
        # instances and proxy in theirs (`Prefill and decode`), not in the table.
        above = [what for what, lines in (("multi-host", diff.groups), ("disaggregated", diff.disaggregated)) if lines]
        if above:
            return f"Will restart: no running container but the {' and '.join(above)} service(s) above."
        return "Will restart: no running container."
    if any(s.exporter for s in diff.recreated()):
        return f"Will restart: {count} container(s), each at the cost beside it:"
    return f"Will restart: {count} container(s), each down for its model load:"


def _rows(diff: PlanDiff) -> list[tuple[str, str, str, str]]:
    """(host, service, kind, detail), the host and service shown on a service's first line only."""
    rows = []
    for h in diff.hosts:
        rows.append((h.name, "", "host", h.detail()))
    for s in diff.changes():
        for i, (kind, detail) in enumerate(s.lines()):
            rows.append((s.host if i == 0 else "", s.name if i == 0 else "", kind, detail))
    return rows


def _render_table(diff: PlanDiff) -> str:
    lines = _shown([f"{_title(diff)}: {diff.summary()}"])
    if diff.stack_is_new:
        lines += _shown([_new_stack_note(diff)])
    if not diff.has_changes:
        lines.append("No allocation changes.")
        return "\n".join(lines) + "\n"
    lines += _shown([f"Takes over first: host {h.name} {h.takeover()}." for h in diff.takeovers()])
    lines += _shown([f"Restarts as one: {line}." for line in diff.groups])
    lines += _shown([f"Prefill and decode: {line}." for line in diff.disaggregated])
    lines.append(_restart_title(diff))
    restarts = _restart_rows(diff)
    if restarts:
        lines += _columns(("HOST", "CONTAINER", "RE-CREATED BY", "COST"), restarts)
    lines.append("")
    lines += _columns(("HOST", "SERVICE", "CHANGE", "DETAILS"), _rows(diff))
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _shown(lines: list[str]) -> list[str]:
    """Lines for a terminal: escape sequences, line breaks and other control or format characters in
    a value (an env value, an argument) shown escaped, so that a value can neither erase nor forge a line."""
    return [printable(line) for line in lines]


def _columns(header: tuple[str, str, str, str], rows: list[tuple[str, str, str, str]]) -> list[str]:
    rows = [tuple(_shown(list(row))) for row in rows]  # type: ignore[misc]  # escaped before they are measured
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    return ["  ".join(c.ljust(w) for c, w in zip(row[:3], widths)) + "  " + row[3] for row in [header, *rows]]


def _render_json(diff: PlanDiff) -> str:
    doc = {
        "stack": diff.stack,
        "against": diff.against,
        "stackIsNew": diff.stack_is_new,
        "hasChanges": diff.has_changes,
        "summary": diff.counts(),
        "recreatedCount": len(diff.recreated()),
        "hosts": [
            {
                "name": h.name,
                "added": h.added,
                "removed": h.removed,
                "changes": [{"key": f.key, "old": f.old, "new": f.new} for f in h.fields],
                "stops": list(h.stops),
                "takesOver": list(h.takeovers),
                "takeoverDownSeconds": h.takeover_chain[0] if h.takeovers else None,
            }
            for h in diff.hosts
        ],
        "services": [_service_json(s) for s in diff.services],
    } | ({"groups": list(diff.groups)} if diff.groups else {}) | (  # only with a multi-host service, as the plan
        {"disaggregated": list(diff.disaggregated)} if diff.disaggregated else {}  # likewise
    )
    return json.dumps(doc, indent=2) + "\n"


def _render_markdown(diff: PlanDiff) -> str:
    versus = f" vs {markdown.code(diff.against)}" if diff.against else ""
    lines = [f"### Allocation plan: stack {markdown.code(diff.stack)}{versus}", "", f"**{diff.summary()}**", ""]
    if diff.stack_is_new:
        lines += [_new_stack_note(diff), ""]
    if not diff.has_changes:
        lines.append("No allocation changes.")
        return "\n".join(lines) + "\n"
    for h in diff.takeovers():
        lines += [f"**Takes over first:** host {markdown.code(h.name)} {markdown.text(h.takeover())}.", ""]
    lines += [line for g in diff.groups for line in (f"**Restarts as one:** {markdown.text(g)}.", "")]
    lines += [line for d in diff.disaggregated for line in (f"**Prefill and decode:** {markdown.text(d)}.", "")]
    lines += [f"**{_restart_title(diff)}**", ""]
    restarts = _restart_rows(diff)
    if restarts:
        lines += ["| Host | Container | Re-created by | Cost |", "|---|---|---|---|"]
        lines += [
            f"| {markdown.code(h)} | {markdown.code(c)} | {markdown.code(f)} | {markdown.text(note)} |"
            for h, c, f, note in restarts
        ]
        lines.append("")
    lines += ["| Host | Service | Change | Details |", "|---|---|---|---|"]
    for host, service, kind, detail in _rows(diff):
        cells = [
            markdown.code(host) if host else "",
            markdown.code(service) if service else "",
            f"**{kind}**" if kind == SECURITY else kind,
            markdown.code(detail) if detail else "",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _service_json(s: ServiceDiff) -> dict[str, Any]:
    return {
        "name": s.name,
        "host": s.host,
        "status": s.status,
        "renamedFrom": s.renamed_from,
        "changes": [k for k in s.kinds() if k != "unchanged"],
        "placement": _placement_json(s.placement),
        "moved": ({"from": _placement_json(s.moved_from), "to": _placement_json(s.moved_to)} if s.moved else None),
        "ports": [{"key": p.key, "old": p.old, "new": p.new} for p in s.ports],
        "security": list(s.security),
        "restartReasons": list(s.restart_reasons),
        "recreated": s.recreated,
        "recreatedBy": list(s.recreate_keys),
        "inPlace": list(s.in_place),
        "capacity": [{"key": c.key, "old": c.old, "new": c.new} for c in s.capacity],
        "npuExporter": s.exporter,
    }


def _placement_json(p: Placement | None) -> dict[str, Any] | None:
    return {"host": p.host, "devices": list(p.devices)} if p else None
