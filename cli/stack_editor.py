"""Set keys of services in a stack file by editing its text, not by re-dumping the document.

`pin` writes a plan's pins with it and `profile` writes `modelSize`. It parses the file to find
where each service's mapping and each existing key sit, then changes only those values in place
(a key that is missing becomes a new line after the service's last line, indented like its other
keys). Everything else stays byte for byte: comments, indentation, CRLF line ends, a UTF-8 byte
order mark, number spellings, quotes, long flow lists already there. What it writes is plain text
only where every reader reads it as that text (YAML 1.1 and 1.2, and the Pulumi CLI, for which
`2024-6-1` is a date), else quoted; a list whose flow text would pass column 100, or with more
than four mappings (a replicated service's `replicaPins`), goes in block style, one entry a line.
Before anything is written, the new text is parsed again and must equal the old document with
exactly those keys set.

It is linear in the file: libyaml's events locate the nodes, `cli.yaml12` reads the document (the
plan's reading of the same bytes is reused), and the edits are joined in one pass. Alias bombs and
nesting past `cli.yaml12.MAX_DEPTH` are refused with one paragraph before any work grows with them.

The file is replaced by `cli.safe_write` (a temporary file beside it, never following a link,
fsynced, renamed into place) with the old file's mode and owner, under a lock and only if it still
holds the bytes the command read (an edit made meanwhile is never lost: the command refuses); a stack file that is a symlink is
resolved first and its target is replaced, so the link stays a link. Every problem (no services
list, a read-only file or directory, a full disk) is a ConfigError that leaves the file untouched.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import yaml
from yaml.cyaml import CParser
from yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import ScalarNode
from yaml.resolver import Resolver as Resolver11

from allocation.config import NAMESPACE
from allocation.errors import ConfigError
from cli import yaml12
from cli.pulumi_scalars import program_value
from cli.safe_write import replace_if_unchanged

YAMLError = yaml12.YAMLError
MAX_DEPTH = yaml12.MAX_DEPTH
WIDTH = 100
"""A list whose flow text would pass this column, or with more than `FEW` mappings, is written one entry a line."""
FEW = 4

BOM = "\ufeff"
SERVICES = f"{NAMESPACE}:services"
HOSTS = f"{NAMESPACE}:hosts"
ENTRY = {SERVICES: "service", HOSTS: "host"}
"""What one entry of each list the editor sets keys in is called, in messages."""
# What YAML (and libyaml's line count) treats as a line break.
LINE_BREAK = re.compile(r"\r\n|[\n\r\x85\u2028\u2029]")
PLAIN_WORD = re.compile(r"[a-z0-9-]+")
COLON = re.compile(r"[ \t]*:")


# ---- where things are in the text ------------------------------------------------------


@dataclass
class _Node:
    """One YAML node as the parser saw it: its kind and where its text is."""

    kind: str  # "scalar", "alias", "seq" or "map"
    start: int
    end: int | None  # just past the node's last character; None for an empty scalar
    column: int
    flow: bool = False
    value: str | None = None
    children: list[_Node] = field(default_factory=list)
    close: int | None = None  # a flow collection: index of its closing bracket

    def pairs(self) -> Iterator[tuple[_Node, _Node]]:
        return zip(self.children[::2], self.children[1::2])

    def get(self, key: str) -> tuple[_Node, _Node] | None:
        """The own (written, not merged) key `key` of a mapping and its value."""
        return next(((k, v) for k, v in self.pairs() if k.kind == "scalar" and k.value == key), None)


def _node(events: _Events, text: str, depth: int = 0) -> _Node:
    event = next(events)
    start = event.start_mark
    if depth > MAX_DEPTH:
        raise _TooDeep(start.line + 1)
    if isinstance(event, ScalarEvent):
        empty = event.value == "" and not event.style
        end = None if empty else _trimmed(text, start.index, event.end_mark.index)
        return _Node("scalar", start.index, end, start.column, value=event.value)
    if isinstance(event, AliasEvent):
        return _Node("alias", start.index, event.end_mark.index, start.column)
    assert isinstance(event, (MappingStartEvent, SequenceStartEvent)), event
    kind = "map" if isinstance(event, MappingStartEvent) else "seq"
    node = _Node(kind, start.index, None, start.column, flow=bool(event.flow_style))
    while True:
        close = events.end_of_collection()
        if close is not None:
            if node.flow:
                node.end, node.close = close.end_mark.index, close.end_mark.index - 1
            else:
                node.end = _content_end(node, text)
            return node
        node.children.append(_node(events, text, depth + 1))


class _TooDeep(Exception):
    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


class _Events:
    """libyaml's events (marks count characters, as `text` is indexed) with one event of look-ahead."""

    def __init__(self, text: str) -> None:
        self._events = iter(yaml.parse(text, Loader=CParser))
        self._next: Any = None

    def __iter__(self) -> _Events:
        return self

    def __next__(self) -> Any:
        if self._next is not None:
            event, self._next = self._next, None
            return event
        return next(self._events)

    def peek(self) -> Any:
        if self._next is None:
            self._next = next(self._events)
        return self._next

    def end_of_collection(self) -> Any:
        """The collection's end event if it comes next (consumed), else None."""
        return next(self) if isinstance(self.peek(), CollectionEndEvent) else None


def _trimmed(text: str, start: int, end: int) -> int:
    """`end` moved back over whitespace (a block scalar's end mark lies past its trailing line breaks)."""
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def _content_end(node: _Node, text: str) -> int:
    """Where a block collection's own text ends: its last value, not the comments after it."""
    if node.kind == "map":
        key, value = node.children[-2], node.children[-1]
        return value.end if value.end is not None else _colon_end(key, text)
    last = node.children[-1]
    return last.end if last.end is not None else node.start + 1


def _colon_end(key: _Node, text: str) -> int:
    """Just past the `:` that follows a key."""
    assert key.end is not None
    match = COLON.match(text, key.end)
    return match.end() if match else key.end


def _document(text: str) -> _Node | None:
    """The located node tree of the (first) document; None for an empty file."""
    events = _Events(text)
    while not isinstance(events.peek(), (MappingStartEvent, SequenceStartEvent, ScalarEvent, AliasEvent)):
        if isinstance(next(events), StreamEndEvent):
            return None
    return _node(events, text)


# ---- the edits ---------------------------------------------------------------------------


def _read_alike(text: str) -> bool:
    """Whether every reader of the file reads the plain scalar `text` as that text: YAML 1.2 (`plan`),
    YAML 1.1 (PyYAML, older tools: `yes`, `0x1f`, `1:30`) and the Pulumi CLI (`2024-6-1` is a date there)."""
    implicit = (True, False)
    return (
        Resolver11().resolve(ScalarNode, text, implicit) == yaml12.TAG + "str"
        and yaml12.Resolver12().resolve(ScalarNode, text, implicit) == yaml12.PLAIN_STR
        and program_value(text) == text
    )


def _yaml_text(value: Any) -> str:
    """A pin value in YAML flow style: `7007`, `0.46`, `[0, 1, 2, 3]`, `npu-a`; text that any reader
    would read as something else (`2024-6-1`, `1e3`, `yes`) in double quotes."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_yaml_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml_text(v)}" for k, v in value.items()) + "}"
    text = str(value)
    return text if PLAIN_WORD.fullmatch(text) and _read_alike(text) else json.dumps(text)


def _value_text(value: Any, column: int, indent: str, newline: str) -> str:
    """A value as it follows `key:` at `column`: flow style, or block style (starting with a line
    break, entries indented under the key) for a list or mapping a reviewer could not read on one
    line: past column `WIDTH`, or a list of more than `FEW` mappings."""
    flow = _yaml_text(value)
    records = isinstance(value, list) and sum(isinstance(v, (dict, list)) for v in value) > FEW
    if not isinstance(value, (list, dict)) or not value or (column + len(flow) <= WIDTH and not records):
        return flow
    inner = indent + "  "
    if isinstance(value, dict):
        return newline + newline.join(_pairs(value, inner, newline))
    lines = []
    for entry in value:
        if isinstance(entry, dict) and entry:
            pairs = _pairs(entry, inner + "  ", newline)
            lines.append(f"{inner}- {pairs[0].lstrip(' ')}")
            lines += pairs[1:]
        else:
            lines.append(f"{inner}-{_after_colon(_value_text(entry, len(inner) + 2, inner + '  ', newline))}")
    return newline + newline.join(lines)


def _pairs(mapping: dict[str, Any], indent: str, newline: str) -> list[str]:
    """A mapping's keys in block style, one a line at `indent`; a value too long for its line below it."""
    return [
        f"{indent}{k}:{_after_colon(_value_text(v, len(indent) + len(k) + 2, indent, newline))}" for k, v in mapping.items()
    ]


def _same(old: Any, new: Any) -> bool:
    return old == new and isinstance(old, bool) == isinstance(new, bool)


Edit = tuple[int, int, str]  # replace text[start:end] with the string


def _replace(key: _Node, value: _Node, new: Any, text: str, flow: bool) -> Edit:
    """Set an existing key: the value in place when it sits on one line, else the key's lines. In a
    flow mapping (`flow`) the value stays in flow style: YAML allows no block inside a flow."""
    assert key.end is not None
    column, indent, newline = key.column + len(text[key.start : key.end]) + 2, " " * key.column, _newline(text, key.end)
    new = _yaml_text(new) if flow else _value_text(new, column, indent, newline)
    block = new.startswith(("\n", "\r"))
    if value.end is not None and not LINE_BREAK.search(text, value.start, value.end) and not block:
        return value.start, value.end, new
    colon = _colon_end(key, text)
    return key.end, max(colon, value.end or colon), ":" + _after_colon(new)


def _after_colon(value: str) -> str:
    """What follows a key's `:`: a space and a flow value, or a block value's own line break."""
    return value if value.startswith(("\n", "\r")) else f" {value}"


def _newline(text: str, at: int) -> str:
    brk = LINE_BREAK.search(text, at) or LINE_BREAK.search(text) or LINE_BREAK.match("\n")
    return brk.group()


def _insert(entry: _Node, missing: dict[str, Any], text: str) -> Edit:
    """New keys after a service's last line (block style) or after its last entry (flow style: before
    any comment or trailing comma that follows that entry, which would otherwise swallow them)."""
    if entry.flow:
        last = entry.children[-1] if entry.children else None
        at = last.end if last is not None and last.end is not None else None
        if at is None:  # no entries, or an empty last value: before the `}`, as far back as a comma or `{`
            assert entry.close is not None
            at = len(text[: entry.close].rstrip())
        sep = {"{": "", ",": " "}.get(text[at - 1], ", ")
        return at, at, sep + ", ".join(f"{k}: {_yaml_text(v)}" for k, v in missing.items())
    assert entry.end is not None
    indent = " " * entry.children[0].column
    brk = LINE_BREAK.search(text, entry.end)
    newline = _newline(text, entry.end)
    lines = [f"{indent}{k}:{_after_colon(_value_text(v, len(indent) + len(k) + 2, indent, newline))}" for k, v in missing.items()]
    if brk:
        return brk.end(), brk.end(), "".join(line + newline for line in lines)
    return len(text), len(text), "".join(newline + line for line in lines)


def _entry_edits(entry: _Node, current: dict[str, Any], pins: dict[str, Any], text: str) -> list[Edit]:
    edits, missing = [], {}
    for key, value in pins.items():
        if key in current and _same(current[key], value):
            continue
        own = entry.get(key)
        if own is None:
            missing[key] = value
        else:
            edits.append(_replace(*own, value, text, entry.flow))
    if missing:
        edits.append(_insert(entry, missing, text))
    return edits


def _apply(text: str, edits: list[Edit]) -> str:
    """The text with every edit made, in one pass (edits never overlap): linear in the file's size."""
    parts, at = [], 0
    for start, end, new in sorted(edits):
        parts += [text[at:start], new]
        at = end
    return "".join(parts) + text[at:]


# ---- the file -----------------------------------------------------------------------------


def _name(path: Path, target: Path) -> str:
    """How messages name the file: as given, and the target too when it is a symlink."""
    return f"{path} (a link to {target})" if path.is_symlink() else str(path)


def read_bytes(path: Path, name: str | None = None) -> bytes:
    """The stack file's bytes as a command reads them before it works out what to write."""
    try:
        return Path(os.path.realpath(path)).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{name or path}: cannot read: {exc.strerror or exc}") from None


def _decode(raw: bytes, name: str) -> tuple[str, str]:
    """The byte order mark ('' or BOM) and the text after it, line ends untouched."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return (BOM, text[1:]) if text.startswith(BOM) else ("", text)


def _load(text: str, name: str, what: str = "not valid YAML") -> Any:
    """The document as `plan` reads it (`cli.yaml12`: libyaml, YAML 1.2, aliases bounded)."""
    try:
        return yaml12.load(text)
    except yaml12.Located as exc:
        raise ConfigError(f"{name}, line {exc.line}: {exc.problem}") from None
    except YAMLError as exc:
        raise ConfigError(f"{name}: {what}: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise ConfigError(f"{name}: nested too deeply to be a stack file") from None


def _entries(doc: Any, tree: _Node | None, name: str, section: str) -> tuple[list[Any], list[_Node]]:
    """The list `section` (services or hosts) as data and as located nodes, or a ConfigError saying why
    there is none."""
    config = doc.get("config") if isinstance(doc, dict) else None
    entries = config.get(section) if isinstance(config, dict) else None
    what = ENTRY[section]
    if entries is None:
        empty = isinstance(doc, dict) and "config" in doc and config is None
        raise ConfigError(
            f"{name}: {'its config is empty, so it ' if empty else ''}has no '{section}' list to pin; "
            f"pin writes the stack file only, so {what}s defined in Pulumi.yaml must move to the stack file first"
        )
    found = tree.get("config") if tree is not None and tree.kind == "map" else None
    found = found[1].get(section) if found and found[1].kind == "map" else None
    nodes = found[1] if found else None
    if not isinstance(entries, list) or nodes is None or nodes.kind != "seq":
        raise ConfigError(f"{name}: '{section}' must be a list of {what}s written out in the file")
    if len(nodes.children) != len(entries) or any(
        n.kind != "map" or not isinstance(e, dict) for n, e in zip(nodes.children, entries)
    ):
        raise ConfigError(f"{name}: every entry of '{section}' must be a mapping written out in the file")
    return entries, nodes.children


def _set_text(text: str, sections: dict[str, dict[str, dict[str, Any]]], name: str, *, every: bool) -> tuple[str, list[str]]:
    """The text with each named entry's keys set, by list (services, hosts), and the entries that
    changed. With `every`, a service of the file without keys is an error (a plan covers all of them)."""
    doc = _load(text, name)
    try:
        tree = _document(text)
    except YAMLError as exc:
        raise ConfigError(f"{name}: not valid YAML: {' '.join(str(exc).split())}") from None
    except _TooDeep as exc:
        raise ConfigError(
            f"{name}, line {exc.line}: nested more than {MAX_DEPTH} levels deep; a stack file needs a handful, and "
            "the editor does not follow deeper text: flatten that value; the file is untouched"
        ) from None
    edits, changed, config = [], [], dict(doc["config"]) if isinstance(doc, dict) and isinstance(doc.get("config"), dict) else {}
    for section, keys in sections.items():
        found, names, config[section] = _section_edits(text, doc, tree, name, section, keys, every and section == SERVICES)
        edits += found
        changed += names if section == SERVICES else [f"host {n}" for n in names]
    new = _apply(text, edits)
    doc = {**doc, "config": config}  # a new document: `doc` is yaml12's
    check = _load(new, name, "the edit would write text that does not parse; the file is untouched")
    if check != doc:
        raise ConfigError(f"{name}: could not set the keys without changing other content ({_what_changed(check, doc)}); "
                          "the file is untouched: write them by hand or simplify the entries")  # fmt: skip
    return new, changed


def _section_edits(
    text: str, doc: Any, tree: _Node | None, name: str, section: str, keys: dict[str, dict[str, Any]], every: bool
) -> tuple[list[Edit], list[str], list[Any]]:
    """The edits that set the keys of one list's named entries, the names that change, and the list
    as it must read afterwards."""
    entries, nodes = _entries(doc, tree, name, section)
    edits, changed, expected = [], [], []
    for entry, node in zip(entries, nodes):
        values = keys.get(entry.get("name"))
        if values is None:
            if every:
                which = f"{ENTRY[section]} {entry['name']}" if "name" in entry else f"a {ENTRY[section]} without a name"
                raise ConfigError(f"{name}: {which} is not in the plan; nothing was written")
            expected.append(entry)
            continue
        values = {k: list(v) if isinstance(v, list) else v for k, v in values.items()}
        found = _entry_edits(node, entry, values, text)
        if found:
            edits += found
            changed.append(entry["name"])
        expected.append({**entry, **values})
    return edits, changed, expected


def _what_changed(check: Any, doc: Any) -> str:
    """Where the edited text reads otherwise than intended: the first service that differs, or the rest."""
    new, old = (d.get("config", {}).get(SERVICES) if isinstance(d, dict) else None for d in (check, doc))
    for entry, wanted in zip(new or [], old or []):
        if entry != wanted:
            keys = sorted(k for k in set(entry) | set(wanted) if entry.get(k) != wanted.get(k))
            return f"service {wanted.get('name')}: {', '.join(map(str, keys))} would read otherwise; anchors or merge keys?"
    return "outside the services' keys"


def _check_writable(name: str, target: Path) -> None:
    try:
        st = os.stat(target)
    except OSError as exc:
        raise ConfigError(f"{name}: cannot write: {exc.strerror or exc}") from None
    if not os.access(target, os.W_OK) or not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(
            f"{name}: the file is read-only (mode {stat.S_IMODE(st.st_mode):04o}); pin did not write it: "
            "make it writable (chmod u+w) to pin, or pin a copy"
        )
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{name}: its directory {target.parent} is not writable; pin replaces the file atomically through "
            "a temporary file beside it, so it needs to write there; the file is untouched"
        )


def set_service_keys(
    path: Path,
    keys: dict[str, dict[str, Any]],
    *,
    every: bool = False,
    read: bytes | None = None,
    command: str = "pin",
    hosts: dict[str, dict[str, Any]] | None = None,
) -> list[str]:
    """Set keys of the named services (and `hosts`) in the stack file, in its own text, in one write;
    the services that changed, then `host NAME` for each host that changed.
    `read`: the bytes `keys` were worked out from (default: the file as this call reads it); the file
    is replaced only if it still holds them (`cli.safe_write.replace_if_unchanged`)."""
    target = Path(os.path.realpath(path))
    name = _name(Path(path), target)
    read = read_bytes(target, name) if read is None else read
    bom, text = _decode(read, name)
    new, changed = _set_text(text, {SERVICES: keys} | ({HOSTS: hosts} if hosts else {}), name, every=every)
    if new != text:
        _check_writable(name, target)
        replace_if_unchanged(target, (bom + new).encode("utf-8"), read, name, command)
    return changed
