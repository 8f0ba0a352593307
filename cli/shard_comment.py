"""The one pull-request comment of a fleet deployed as shards.

First what `plan --against` says for the whole fleet (its **Will restart** list leads, as for a stack
not deployed as shards), then which shards changed and which are unchanged and were not previewed,
then the preview of each shard whose slice changed (`cli.shard_changes`). Each preview job uploads
what `pulumi preview --json` printed: a preview digest, `{"steps": [{"op", "urn", ...}],
"diagnostics": [{"message", "severity"}], "changeSummary": {op: count}}` (pulumi/pulumi
`sdk/pkg/display/json.go`, `PreviewDigest`, every key `omitempty`; written whole at the end of the
preview by `pkg/backend/display/json.go`, `ShowPreviewDigest`), so the summary is read from the
engine's own counts, never scraped from text. A digest of any other shape is named as unusable in
its shard's section, with the reason and the preview's error output, and the other shards are shown.

Nothing read from a digest or a log reaches the markdown as markdown: it is in a fenced block or a
code span (`views.markdown`), its control and format characters escaped.

The whole comment stays under GitHub's limit: the parts share `MAX_COMMENT`, the diff up to half
of it, each cut at a line's end (a cut inside a code span would set its text loose) and saying what
it cut and where the whole comment is: the pull-request workflow uploads it as the artifact
`ARTIFACT`. Pure: the caller reads the files.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping

from allocation.errors import printable
from cli.shard_changes import ShardChanges
from cli.shards import shard_stack
from views import markdown

MAX_COMMENT = 60_000
"""GitHub refuses a comment body over 65,536 characters; the whole comment stays under this."""
MAX_STEPS = 200
"""Changed resources listed per shard in the comment (all of them in the whole comment); the counts
always cover all of them."""
ARTIFACT = "shard-comments"
"""The pull-request workflow's artifact holding each fleet's whole comment, nothing cut, as
`<fleet>.md` (`shards --whole-comment`); a test holds the workflow to this name."""
LIMIT_NOTE = "to fit GitHub's limit on a comment"
MAX_COUNTS = 200
"""Characters of the operations' counts in a shard's heading; the others are counted, not named."""
MAX_COUNT = 2**63 - 1
"""A count in `changeSummary` is a Go `int` (`ResourceChanges map[StepOp]int`), 64 bits on every
platform Pulumi ships for."""
SEP = "\n\n"


def comment(
    fleet: str,
    changes: ShardChanges,
    diff: str,
    previews: Mapping[str, tuple[str | None, str | None]],
    limit: int | None = MAX_COMMENT,
) -> str:
    """The comment's markdown, at most `limit` characters (None: the whole comment, nothing cut).
    `diff`: `plan --against` as markdown; `previews`: shard stack -> (the text of its `pulumi
    preview --json`, the text of its error output), None for a file not uploaded."""
    head = f"### Shard previews of fleet {markdown.text(fleet)} against {markdown.code(changes.ref)}{SEP}{_status(fleet, changes)}"
    stacks = [shard_stack(fleet, k) for k in changes.changed]
    steps = None if limit is None else MAX_STEPS
    sections = [_section(s, *previews.get(s, (None, None)), steps) for s in stacks]
    if limit is None:
        return SEP.join([diff.rstrip(), head, *(s.whole for s in sections)]) + "\n"
    cut = _Cut(fleet)
    return SEP.join(_fitted(cut, _Lines(diff.rstrip(), "the allocation diff"), _Lines(head, "the shard list"), sections, limit)) + "\n"


def _indexes(shards: tuple[int, ...]) -> str:
    return ", ".join(map(str, shards))


def _status(fleet: str, changes: ShardChanges) -> str:
    lines = []
    if changes.changed:
        why = f": {markdown.text(changes.every)}" if changes.every else ""
        lines.append(f"- **Changed**, previewed below: shards {_indexes(changes.changed)}{why}.")
    else:
        lines.append("- **Changed**: none; no shard's slice differs, so no shard was previewed.")
    if changes.unchanged:
        lines.append(
            f"- **Unchanged**, not previewed: shards {_indexes(changes.unchanged)} (each deploys the same hosts, "
            f"services, routers and settings as at {markdown.code(changes.ref)})."
        )
    if changes.emptied:
        destroy = markdown.code(f"pulumi destroy --stack {shard_stack(fleet, changes.emptied[0])}")
        lines.append(f"- **Holding no host now**: shards {_indexes(changes.emptied)}; destroy their stacks ({destroy}, ...) and delete their files.")
    return "\n".join(lines)


# --- fitting the parts into the limit ----------------------------------------------------------


@dataclass(frozen=True)
class _Cut:
    """What a cut says about where the whole text is."""

    fleet: str

    def where(self) -> str:
        return f"the whole comment is {markdown.code(self.fleet + '.md')} in the artifact {markdown.code(ARTIFACT)} of this workflow run"

    def plain(self) -> str:
        """`where` for inside a code block, where nothing is markdown."""
        return f"the whole comment is {printable(self.fleet)}.md in the artifact {ARTIFACT} of this workflow run"


@dataclass(frozen=True)
class _Lines:
    """Markdown that is cut at a line's end, never inside a line."""

    text: str
    what: str

    @property
    def whole(self) -> str:
        return self.text

    def _note(self, cut: _Cut, lines: int) -> str:
        return f"**... {lines:,} more lines of {self.what} are cut** {LIMIT_NOTE}; {cut.where()}."

    def least(self, cut: _Cut) -> int:
        """The fewest characters it can say itself in: whole, or all its lines cut."""
        return min(len(self.text), len(self._note(cut, self.text.count("\n") + 1)))

    def fit(self, cut: _Cut, room: int) -> str:
        if len(self.text) <= room:
            return self.text
        lines = self.text.split("\n")
        room -= len(SEP + self._note(cut, len(lines)))
        kept: list[str] = []
        for line in lines:
            room -= len(line) + 1
            if room < 0:
                break
            kept.append(line)
        note = self._note(cut, len(lines) - len(kept))
        return SEP.join(["\n".join(kept), note]) if kept else note


@dataclass(frozen=True)
class _Section:
    """One changed shard: its heading, the line under it, and the text shown in a code block below."""

    title: str
    intro: str = ""
    """A line of markdown under the heading; empty for a preview, whose text folds into `<details>`."""
    body: str = ""
    keep_end: bool = False
    """A cut keeps the text's end (an error output ends with what failed), else its start."""

    def _shown(self, body: str) -> str:
        if not body and not self.intro:
            return self.title
        if not self.intro:
            return f"{self.title}{SEP}<details><summary>what it changes</summary>{SEP}{markdown.block(body)}\n</details>"
        return f"{self.title}{SEP}{self.intro}{SEP}{markdown.block(body)}"

    @cached_property
    def whole(self) -> str:
        return self._shown(self.body)

    def _bare(self, cut: _Cut) -> str:
        """The heading alone, saying that what it shows is cut."""
        what = "error output" if self.keep_end else "list of changes"
        note = f"**Its {what} ({len(self.body):,} characters) is cut** {LIMIT_NOTE}; {cut.where()}."
        return SEP.join(filter(None, [self.title, self.intro, note]))

    def least(self, cut: _Cut) -> int:
        return min(len(self.whole), len(self._bare(cut)))

    def fit(self, cut: _Cut, room: int) -> str:
        """The section in at most `room` characters (`least` at the fewest): the text in the code
        block cut to whole lines that fit, with a line saying what was cut; the heading alone, saying
        so, when not one line would fit."""
        whole = self.whole
        if len(whole) <= room:
            return whole
        keep = room - len(self._shown(self._note(cut, len(self.body)))) - 1
        while 0 < keep < len(self.body) and (kept := self._lines(keep)):
            note = self._note(cut, len(self.body) - len(kept))
            shown = self._shown(f"{note}\n{kept}" if self.keep_end else f"{kept}\n{note}")
            if len(shown) <= room:
                return shown
            keep -= len(shown) - room  # a longer fence for a backtick run kept, or escaped characters
        return self._bare(cut)

    def _lines(self, keep: int) -> str:
        """The body's first whole lines in at most `keep` characters (`keep` < its length), or its last
        when `keep_end`."""
        if self.keep_end:
            start = len(self.body) - keep
            return self.body[start:] if self.body[start - 1] == "\n" else self.body[start:].partition("\n")[2]
        return self.body[:keep] if self.body[keep] == "\n" else self.body[:keep].rpartition("\n")[0]

    @staticmethod
    def _note(cut: _Cut, more: int) -> str:
        return f"... ({more:,} more characters are cut {LIMIT_NOTE}; {cut.plain()})"


def _fitted(cut: _Cut, diff: _Lines, head: _Lines, sections: list[_Section], limit: int) -> list[str]:
    """The parts in at most `limit` characters, joined: the diff and the shard list get up to half
    and a tenth, each section at least its heading; sections that even so do not fit are counted
    in one line at the end."""
    room = limit - 1 - len(SEP) * (len(sections) + 1)
    floors = [min(len(head.whole), max(head.least(cut), room // 10)), min(len(diff.whole), max(diff.least(cut), room // 2))]
    least = [s.least(cut) for s in sections]
    shown, left = len(sections), ""
    if sum(floors) + sum(least) > room:
        budget = room - sum(floors) - len(_left(cut, len(sections)))  # the longest such line
        shown = 0
        while shown < len(sections) and least[shown] <= budget:
            budget -= least[shown]
            shown += 1
        left = _left(cut, len(sections) - shown)
        room -= len(left)  # in the separator of a section not shown
    parts: list[_Lines | _Section] = [head, diff, *sections[:shown]]
    shares = _shares([len(p.whole) for p in parts], floors + least[:shown], room)
    head_text, texts = head.fit(cut, shares[0]), [s.fit(cut, share) for s, share in zip(sections, shares[2:])]
    # The diff's share, and what the others left of theirs (a section shows whole lines or none).
    diff_text = diff.fit(cut, room - len(head_text) - sum(map(len, texts)))
    return [diff_text, head_text, *texts, *filter(None, [left])]


def _left(cut: _Cut, count: int) -> str:
    """The line that says the last `count` sections are left out ("" for none)."""
    return f"**The sections of {count} more changed shards are cut** {LIMIT_NOTE}; {cut.where()}." if count else ""


def _shares(wants: list[int], floors: list[int], room: int) -> list[int]:
    """Each part's share of `room`: at least its floor, at most what it wants; what is left over the
    floors is split evenly, and a part that wants less than an even split leaves the rest to the others."""
    extra = [w - f for w, f in zip(wants, floors)]
    shares, left, count = list(floors), room - sum(floors), len(wants)
    for i in sorted(range(len(wants)), key=extra.__getitem__):
        give = max(0, min(extra[i], left // count))
        shares[i] += give
        left -= give
        count -= 1
    return shares


# --- one shard's preview ------------------------------------------------------------------------


def _section(stack: str, digest_text: str | None, log: str | None, steps: int | None) -> _Section:
    """A shard's section; `steps`: how many changed resources to list (None: all)."""
    digest = _digest(digest_text)
    if isinstance(digest, str):
        return _Section(f"#### {markdown.text(stack)}: no preview", f"{digest}; its error output:", log or "(none)", keep_end=True)
    summary = digest["changeSummary"]
    title = f"#### {markdown.text(stack)}: {_counts(summary)}, {summary.get('same', 0)} unchanged"
    # One line per resource, whatever its name holds (a line break in it is shown escaped).
    lines = [printable(f"{s['op']} {_resource(s['urn'])}") for s in digest["steps"] if s["op"] != "same"]
    lines += [f"{d['severity']}: {d.get('message', '')}".rstrip() for d in digest["diagnostics"] if d.get("severity") in ("error", "warning")]
    more = len(lines) - steps if steps is not None else 0
    body = "\n".join(lines[:steps]) + (f"\n... and {more} more" if more > 0 else "")
    return _Section(title, body=body)


def _counts(summary: Mapping[str, int]) -> str:
    """`1 to create, 2 to replace`: an operation named as Pulumi names them shown as it is, any other
    in a code span; as many as fit in `MAX_COUNTS`, the others counted."""
    items = [f"{n} to {op if re.fullmatch(r'[a-z]+(-[a-z]+)*', op) else markdown.code(op)}" for op, n in sorted(summary.items()) if op != "same" and n]
    shown, size = 0, 0
    while shown < len(items) and size + len(items[shown]) <= MAX_COUNTS:
        size += len(items[shown]) + 2
        shown += 1
    rest = [f"{len(items) - shown} other operation{'s' * (len(items) - shown > 1)}"] if shown < len(items) else []
    return ", ".join(items[:shown] + rest) or "no changes"


def _kind(value: Any) -> str:
    """What a JSON value is, in JSON's words."""
    return f"a JSON {_KINDS.get(type(value), 'number')}"


_KINDS = {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}


_KEYS = {"steps": list, "diagnostics": list, "changeSummary": dict}
"""The digest's keys read, each omitted or null when empty (`omitempty`), and the JSON they hold."""


def _digest(text: str | None) -> dict[str, Any] | str:
    """The digest with `steps`, `diagnostics` and `changeSummary` (empty when omitted), or why it
    cannot be read (markdown): its shape is pulumi's `PreviewDigest`, whose steps each have a text
    `op` and `urn`, whose diagnostics have text where they have a `message` or `severity`, and whose
    `changeSummary` maps operations to counts."""
    if text is None:
        return "no preview was uploaded"
    if not text.strip():  # a preview that fails before its end prints no digest
        return "the preview printed no JSON digest"
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        return "the preview printed no JSON digest"
    if not isinstance(doc, dict):
        return f"its digest is {_kind(doc)}, not {_kind({})}"
    got = {key: want() if doc.get(key) is None else doc[key] for key, want in _KEYS.items()}
    for key, want in _KEYS.items():
        if not isinstance(got[key], want):
            return f"its {key} is {_kind(got[key])}, not {_kind(want())}"
    for i, step in enumerate(got["steps"]):
        if not (isinstance(step, dict) and isinstance(step.get("op"), str) and isinstance(step.get("urn"), str)):
            return f"its step {i} is not an object with a text op and urn"
    for i, diagnostic in enumerate(got["diagnostics"]):
        if not (isinstance(diagnostic, dict) and all(isinstance(diagnostic.get(k, ""), str) for k in ("message", "severity"))):
            return f"its diagnostic {i} is not an object with a text message and severity"
    for op, n in got["changeSummary"].items():
        if isinstance(n, bool) or not isinstance(n, int):
            return f"its changeSummary counts {markdown.code(op)} as {_kind(n)}, not a number of resources"
        if not 0 <= n <= MAX_COUNT:
            return f"its changeSummary counts {markdown.code(op)} as {n}, not a number of resources"
    return got


def _resource(urn: str) -> str:
    """`type name` of a URN, `urn:pulumi:<stack>::<project>::<type>::<name>`."""
    parts = urn.split("::")
    return f"{parts[-2].rsplit('$', 1)[-1]} {parts[-1]}" if len(parts) >= 4 else urn
