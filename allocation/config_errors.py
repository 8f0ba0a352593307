"""The wording of stack-config errors: where a problem is and what was probably meant.

pydantic reports a location tuple (`('services', 1, 'tensorParallelSize')`); an operator reads
`ascend-fleet:services[1] (qwen-vl).tensorParallelSize`, with the key they probably meant when
one is unknown. Names from the config are shown escaped and cut, so a hostile stack file cannot
drive the terminal or flood the message. Kept apart from the schema (allocation/config.py), whose
models are the config reference; the schema hands its root model and namespace in. Pure.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Iterable, Mapping

from pydantic import BaseModel, ValidationError


def suggest(word: str, choices: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the closest of `choices`, or "" when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def field_aliases(model: type[BaseModel]) -> list[str]:
    """The keys a config model accepts, as the stack file writes them."""
    return [f.alias or n for n, f in model.model_fields.items()]


def shown(name: Any) -> str:
    """A name from the config as a message shows it: as is when plain, else escaped and cut."""
    text = str(name)
    if re.fullmatch(r"[\w.:/@+-]{1,80}", text):
        return text
    return repr(text[:80]) + ("..." if len(text) > 80 else "")


def unknown_keys(values: Mapping[str, Any], known: set[str], ignored: Iterable[str], namespace: str) -> list[str]:
    """One problem per top-level key of `values` that is neither `known` nor `ignored`."""
    return [
        f"unknown config key '{namespace}:{shown(key)}'{suggest(key, known)}"
        for key in sorted(values)
        if key not in known and key not in ignored
    ]


def validation_problems(
    exc: ValidationError, values: Mapping[str, Any], root: type[BaseModel], namespace: str
) -> list[str]:
    """One problem per error of `exc`, raised validating `values` as `root`."""
    return [_describe_error(e, values, root, namespace) for e in exc.errors()]


def _describe_location(loc: tuple[Any, ...], values: Mapping[str, Any], namespace: str) -> str:
    """`services[1] (qwen-vl).tensorParallelSize` from pydantic's location tuple."""
    out = f"{namespace}:{shown(loc[0])}" if loc else namespace
    node: Any = values.get(loc[0]) if loc else values
    for part in loc[1:]:
        if isinstance(part, int):
            out += f"[{part}]"
            node = node[part] if isinstance(node, list) and part < len(node) else None
            if isinstance(node, Mapping) and isinstance(node.get("name"), str):
                out += f" ({shown(node['name'])})"
        else:
            out += f".{shown(part)}"
            node = node.get(part) if isinstance(node, Mapping) else None
    return out


def _describe_error(err: Any, values: Mapping[str, Any], root: type[BaseModel], namespace: str) -> str:
    loc = tuple(err["loc"])
    if err["type"] == "extra_forbidden":
        parent_loc, key = loc[:-1], str(loc[-1])
        model = _model_at(root, parent_loc)
        hint = suggest(key, field_aliases(model)) if model else ""
        where = _describe_location(parent_loc, values, namespace) if parent_loc else "the stack config"
        key_shown = f"'{key}'" if shown(key) == key else shown(key)
        return f"{where}: unknown key {key_shown}{hint}"
    msg = err["msg"].removeprefix("Value error, ")
    return f"{_describe_location(loc, values, namespace)}: {msg}"


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The config model found at a pydantic location under `root`, to suggest the key the user meant."""
    model: Any = root
    for part in loc:
        if isinstance(part, int):
            continue
        field = next(
            (f for n, f in model.model_fields.items() if (f.alias or n) == part or n == part),
            None,
        )
        if field is None:
            return None
        annotation = field.annotation
        model = next(
            (a for a in getattr(annotation, "__args__", (annotation,)) if isinstance(a, type) and issubclass(a, BaseModel)),
            None,
        )
        if model is None:
            return None
    return model
