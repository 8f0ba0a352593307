"""Why a container is re-created, in a short phrase per difference: the container part of the plan diff.

The plan JSON's `container` is the record `records.containers.ContainerSpec.to_json` writes; this
module compares two of them key by key. The command is compared as the records read it back
(`records.command.parse_command`: the start gate, the words, each option's values), since the old
plan, printed by an older revision's code, carries only the rendered argv. Settings that only render
a placement or port field (`PLACEMENT_OPTIONS`, `PLACEMENT_ENV`, `PLACEMENT_KEYS`) are left to the
move or the port change that explains them. Pure.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from allocation.vllm_args import spelled
from records.command import PLACEMENT_OPTIONS, Command, parse_command
from records.containers import PLACEMENT_ENV

# Container keys that widen what a container may touch; a change to them stands out.
SECURITY_KEYS = ("privileged", "deviceFiles", "mounts", "ipcMode")
# Container keys that only render a placement or port field: reported as the move or the port
# change, not again as a restart reason.
PLACEMENT_KEYS = frozenset({"deviceFiles", "ports", "labels", "sysctls", "healthcheck"})


def security_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Changes to privilege, device files, mounts or IPC. A key the old revision's plan did not print
    is unknown then, not changed."""
    return [key_change(key, old, new) for key in SECURITY_KEYS if key in old and old.get(key) != new.get(key)]


def key_change(key: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    before, after = old.get(key), new.get(key)
    if isinstance(before, list) and isinstance(after, list):
        # What was added and removed, not two long lists to compare by eye.
        gone = [compact(v) for v in before if v not in after]
        came = [compact(v) for v in after if v not in before]
        if gone or came:
            return f"{key} " + "; ".join([*(f"+ {v}" for v in came), *(f"- {v}" for v in gone)])
    return f"{key} {compact(before)} -> {compact(after)}"


def container_changes(
    old: Mapping[str, Any], new: Mapping[str, Any], explained: set[str], recreate: list[str]
) -> list[str]:
    """Why a container is re-created, one short phrase per difference; `recreate`: the keys whose
    change re-creates it (`records.restarts.changed`)."""
    out = []
    if old.get("image") != new.get("image"):
        out.append(f"image {old.get('image')} -> {new.get('image')}")
    out += _command_changes(list(old.get("command") or ()), list(new.get("command") or ()), explained)
    out += _env_changes(old.get("env") or {}, new.get("env") or {}, explained)
    for key in sorted(set(recreate) - {"image", "command", "env", *SECURITY_KEYS}):
        if explained and key in PLACEMENT_KEYS:
            continue
        before, after = old.get(key), new.get(key)
        if isinstance(before, dict) and isinstance(after, dict):
            out += [
                f"{key}.{k} {compact(before.get(k, 'unset'))} -> {compact(after.get(k, 'unset'))}"
                for k in sorted(before.keys() | after.keys())
                if before.get(k) != after.get(k)
            ]
        else:
            out.append(key_change(key, old, new))
    return out


def _command_changes(old_argv: list[str], new_argv: list[str], explained: set[str]) -> list[str]:
    if old_argv == new_argv:
        return []
    old, new = _as_its_program_reads(old_argv), _as_its_program_reads(new_argv)
    out = []
    if old.gate != new.gate:
        change = "added" if old.gate is None else "removed" if new.gate is None else "changed"
        out.append(f"start gate {change}")
    if old.runs == new.runs:
        return out
    if old.words != new.words:
        out.append(f"command {' '.join(old.words)} -> {' '.join(new.words)}")
    for key in sorted(old.options.keys() | new.options.keys()):
        before, after = old.options.get(key), new.options.get(key)
        if before == after or explained.intersection(PLACEMENT_OPTIONS.get(key, ())):
            continue
        if before is None:
            out.append(f"{_option(key, after)} added")
        elif after is None:
            out.append(f"{_option(key, before)} removed")
        else:
            out.append(f"{key} {_values(before)} -> {_values(after)}")
    if old.words == new.words and old.options == new.options:
        # Same words, other order or spelling: vLLM reads them the same, but the container is still new.
        respelled = parse_command(old_argv).options != parse_command(new_argv).options
        out.append("command arguments respelled (vLLM reads them the same)" if respelled else "command arguments reordered")
    return out


def _as_its_program_reads(argv: list[str]) -> Command:
    """The command with each `vllm serve` option under the one name vLLM reads it by
    (`allocation.vllm_args.spelled`: `--block_size` is `--block-size`); any other command as written."""
    command = parse_command(argv)
    return parse_command(argv, spelled) if command.words[:2] == ("vllm", "serve") else command


def _option(key: str, values: tuple[str | None, ...]) -> str:
    return key if values in ((), (None,)) else f"{key} {_values(values)}"


def _values(values: tuple[str | None, ...]) -> str:
    return ", ".join("(flag)" if v is None else v for v in values)


def _env_changes(old: Mapping[str, str], new: Mapping[str, str], explained: set[str]) -> list[str]:
    out = []
    for key in sorted(old.keys() | new.keys()):
        if old.get(key) == new.get(key) or explained.intersection(PLACEMENT_ENV.get(key, ())):
            continue
        if key not in old:
            out.append(f"env {key}={new[key]} added")
        elif key not in new:
            out.append(f"env {key} removed (was {old[key]})")
        else:
            out.append(f"env {key} {old[key]} -> {new[key]}")
    return out


def compact(value: Any) -> str:
    """A value on one short line: text as it is, anything else as compact JSON with sorted keys."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
