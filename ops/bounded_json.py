"""JSON from text nobody here controls, read with bounds: one error type, never a crash.

Python's `json` accepts `Infinity` and `NaN`, turns `1e400` into infinity, raises a plain
`ValueError` for an integer of thousands of digits and `RecursionError` for deep nesting.
This reader refuses each of them as `JsonError`, names what was read, and quotes at most a
short, escaped excerpt of the text, never the text itself (a config file may hold secrets).
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_DEPTH = 64
MAX_DIGITS = 30
"""Digits of an integer: far more than any byte count or dimension, far fewer than Python's limit."""


class JsonError(ValueError):
    """The text is not JSON within the bounds."""


def excerpt(text: str, limit: int = 40) -> str:
    """A short, escaped piece of untrusted text for a message: no control characters, no length."""
    shown = text[:limit].encode("unicode_escape").decode("ascii")
    return repr(shown) if len(text) <= limit else repr(shown) + "..."


def _integer(token: str) -> int:
    if len(token.lstrip("-")) > MAX_DIGITS:
        raise JsonError(f"an integer of {len(token)} digits")
    return int(token)


def _real(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):
        raise JsonError(f"the number {excerpt(token)} is out of range")
    return value


def _constant(token: str) -> Any:
    raise JsonError(f"{token} is not a JSON number")


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, depth)
            if deepest > MAX_DEPTH:
                break
            stack += [(v, depth + 1) for v in (node.values() if isinstance(node, dict) else node)]
    return deepest


def loads(text: str | bytes, what: str) -> Any:
    """The JSON value of `text`; JsonError naming `what` for anything outside the bounds."""
    try:
        value = json.loads(text, parse_int=_integer, parse_float=_real, parse_constant=_constant)
    except JsonError as exc:
        raise JsonError(f"{what}: {exc}") from None
    except RecursionError:
        raise JsonError(f"{what} is nested more than {MAX_DEPTH} levels deep") from None
    except json.JSONDecodeError as exc:
        raise JsonError(f"{what} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise JsonError(f"{what} is not JSON ({type(exc).__name__})") from None
    if _depth(value) > MAX_DEPTH:
        raise JsonError(f"{what} is nested more than {MAX_DEPTH} levels deep")
    return value
