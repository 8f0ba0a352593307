"""The one pull-request comment of a fleet deployed as shards.

First what `plan --against` says for the whole fleet (its **Will restart** list leads, as for a stack
not deployed as shards), then the preview of each shard whose slice changed (`cli.shard_changes`),
then which shards are unchanged and were not previewed. Each preview job uploads what
`pulumi preview --json` printed: a preview digest, `{"steps": [{"op", "urn", ...}], "diagnostics":
[{"message", "severity"}], "changeSummary": {op: count}}` (pulumi/pulumi `pkg/display/json.go`,
`PreviewDigest`; written whole at the end of the preview by `pkg/backend/display/json.go`,
`ShowPreviewDigest`), so the summary is read from the engine's own counts, never scraped from text.
Pure: the caller reads the files.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from cli.shard_changes import ShardChanges
from cli.shards import shard_stack

MAX_COMMENT = 60_000
"""GitHub refuses a comment body over 65,536 characters; the previews share what the diff leaves."""
MAX_STEPS = 200
"""Changed resources listed per shard; the counts always cover all of them."""


def comment(fleet: str, changes: ShardChanges, diff: str, previews: Mapping[str, tuple[str | None, str | None]]) -> str:
    """The comment's markdown. `diff`: `plan --against` as markdown; `previews`: shard stack -> (the
    text of its `pulumi preview --json`, the text of its error output), None for a file not uploaded."""
    head = [diff.rstrip(), "", f"### Shard previews of fleet {fleet} against {changes.ref}", ""]
    head.append(_status(fleet, changes))
    budget = max(2_000, (MAX_COMMENT - sum(map(len, head))) // max(1, len(changes.changed)))
    sections = [_section(shard_stack(fleet, k), *previews.get(shard_stack(fleet, k), (None, None)), budget) for k in changes.changed]
    return "\n".join([*head, *sections]).rstrip() + "\n"


def _indexes(shards: tuple[int, ...]) -> str:
    return ", ".join(map(str, shards))


def _status(fleet: str, changes: ShardChanges) -> str:
    lines = []
    if changes.changed:
        why = f": {changes.every}" if changes.every else ""
        lines.append(f"- **Changed**, previewed below: shards {_indexes(changes.changed)}{why}.")
    else:
        lines.append("- **Changed**: none; no shard's slice differs, so no shard was previewed.")
    if changes.unchanged:
        lines.append(
            f"- **Unchanged**, not previewed: shards {_indexes(changes.unchanged)} (each deploys the same hosts, "
            f"services, routers and settings as at {changes.ref})."
        )
    if changes.emptied:
        lines.append(
            f"- **Holding no host now**: shards {_indexes(changes.emptied)}; destroy their stacks "
            f"(`pulumi destroy --stack {shard_stack(fleet, changes.emptied[0])}`, ...) and delete their files."
        )
    return "\n".join(lines) + "\n"


def _section(stack: str, digest_text: str | None, log: str | None, budget: int) -> str:
    digest = _digest(digest_text)
    if digest is None:
        why = "no preview was uploaded" if digest_text is None else "the preview printed no JSON digest"
        return f"#### {stack}: no preview\n\n{why}; its error output:\n\n{_fenced((log or '(none)')[-budget:])}\n"
    summary = digest.get("changeSummary") or {}
    counts = ", ".join(f"{n} to {op}" for op, n in sorted(summary.items()) if op != "same" and n) or "no changes"
    title = f"#### {stack}: {counts}, {summary.get('same', 0)} unchanged"
    lines = [f"{s.get('op', '?')} {_resource(str(s.get('urn', '')))}" for s in digest.get("steps") or () if s.get("op") != "same"]
    lines += [f"{d.get('severity', '?')}: {d.get('message', '')}".rstrip() for d in digest.get("diagnostics") or () if d.get("severity") in ("error", "warning")]
    if not lines:
        return title + "\n"
    more = len(lines) - MAX_STEPS
    body = "\n".join(lines[:MAX_STEPS]) + (f"\n... and {more} more" if more > 0 else "")
    if len(body) > budget:
        body = body[:budget] + f"\n... ({len(body) - budget} more characters)"
    return f"{title}\n\n<details><summary>what it changes</summary>\n\n{_fenced(body)}\n</details>\n"


def _digest(text: str | None) -> dict[str, Any] | None:
    try:
        doc = json.loads(text) if text else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _resource(urn: str) -> str:
    """`type name` of a URN, `urn:pulumi:<stack>::<project>::<type>::<name>`."""
    parts = urn.split("::")
    return f"{parts[-2].rsplit('$', 1)[-1]} {parts[-1]}" if len(parts) >= 4 else urn


def _fenced(text: str) -> str:
    """A code block whose fence is longer than any run of backticks in `text`, so nothing escapes it."""
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
    return f"{fence}text\n{text}\n{fence}"
