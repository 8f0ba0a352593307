"""Numbers and booleans of a stack config, read one way by `plan`, the program and the JSON Schema.

pydantic's lax mode takes `true` as the integer 1 and `"8"` as 8 (`sshPort: true` became port 1,
`maxNumSeqs: true` `--max-num-seqs 1`), where the stack's JSON Schema refuses both. The referee is
what Pulumi hands the program (docs/stack-files.md): every object value as JSON text, decoded with
`json.loads` (pulumi/config.py `get_object`), in which a quoted YAML value stays text. So inside an
object a number is written as a number and a boolean as `true` or `false`: `Whole`, `Number` and
`Flag` refuse anything else, naming the value. A whole number written `8.0` is 8, as JSON Schema's
`integer` reads it and as the Pulumi CLI hands it over (JSON `8`).

At the top level Pulumi hands over text (`pulumi config set ascend-fleet:pullTimeoutMinutes 90`
writes `"90"`: pulumi/pulumi#18285, "top level values are always written to the configuration as
string"), so there `90` and `"90"` are one value. `top_level_value` is the program's reading of that
text; a key holding a number takes it when it is written in digits (`QUOTED_NUMBER`), and the
schema states the same spelling, bounds included (`digits_between`). Pure.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Annotated, Any

from pydantic import BeforeValidator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

QUOTED_NUMBER = re.compile(r"(?:0|-?[1-9][0-9]*)(?:\.[0-9]+)?\Z")
"""How a top-level number may be written as text: digits, a decimal point, a minus sign (what the
Pulumi CLI prints for a plain number in range), never `1e3`, `+1`, ` 1` or `08`."""


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, str) else str(value)


# The two validators below have no docstring on purpose: the schema generator (allocation/schema.py)
# adds a validator's docstring to its key's description as a rule `plan` checks beyond the schema,
# and these are rules the schema states itself (`type: integer`, `number`, `boolean`).
def _as_number(value: Any) -> Any:
    if isinstance(value, bool):
        raise PydanticCustomError("number_type", "{value} is a boolean, not a number", {"value": _shown(value)})
    if isinstance(value, str):
        hint = " (a quoted value reaches the program as text): write it unquoted" if QUOTED_NUMBER.match(value) else ""
        raise PydanticCustomError("number_type", "{value} is text, not a number{hint}", {"value": _shown(value), "hint": hint})
    return value


def _as_flag(value: Any) -> Any:
    if not isinstance(value, bool):
        raise PydanticCustomError(
            "bool_type", "{value} is not true or false (a boolean is written true or false, unquoted)", {"value": _shown(value)}
        )
    return value


Whole = Annotated[int, BeforeValidator(_as_number)]
"""A whole number: an integer (or `8.0`), never a boolean or text."""
Number = Annotated[Decimal, BeforeValidator(_as_number)]
"""A number, read exactly: never a boolean or text."""
Flag = Annotated[bool, BeforeValidator(_as_flag)]
"""`true` or `false`, never `1`, `"true"` or `yes`."""


def holds_number(field: FieldInfo) -> bool:
    """The field's type is a `Whole` or a `Number` (pydantic keeps an `Annotated`'s validators in `metadata`)."""
    return any(isinstance(m, BeforeValidator) and m.func is _as_number for m in field.metadata)


def top_level_value(text: str, number: bool) -> Any:
    """What the program makes of the text Pulumi hands it for a top-level key: JSON decoded, as
    `Config.get_object` does (an object, a list, `true`), text that is no JSON kept as it is; for a
    key holding a `number`, only digits (`QUOTED_NUMBER`) are decoded, so the schema can state them."""
    if number:
        return json.loads(text) if QUOTED_NUMBER.match(text) else text
    try:
        return json.loads(text)
    except ValueError:
        return text


def digits_between(low: int, high: int) -> str:
    """A regular expression (no anchors) of the decimal numbers `low`..`high`, written without leading
    zeros: `digits_between(1, 30)` is `[1-9]|[1-2][0-9]|30`. The schema states a bounded number written
    as text with it, since JSON Schema bounds only numbers."""
    parts = []
    for width in range(len(str(low)), len(str(high)) + 1):
        first, last = max(low, 10 ** (width - 1) if width > 1 else 0), min(high, 10**width - 1)
        if first <= last:
            parts += _same_width(str(first), str(last))
    return "|".join(parts)


def _same_width(first: str, last: str) -> list[str]:
    """Alternatives matching exactly the digit strings from `first` to `last`, of equal width."""
    rest = len(first) - 1
    if first[1:] == "0" * rest and last[1:] == "9" * rest:
        head = first[0] if first[0] == last[0] else f"[{first[0]}-{last[0]}]"
        return [head + ("[0-9]" * rest if rest < 2 else f"[0-9]{{{rest}}}")]
    if first[0] == last[0]:
        return [first[0] + tail for tail in _same_width(first[1:], last[1:])]
    low, high = int(first[0]), int(last[0])
    parts = [first[0] + tail for tail in _same_width(first[1:], "9" * rest)]
    if high - low > 1:
        parts += _same_width(f"{low + 1}" + "0" * rest, f"{high - 1}" + "9" * rest)
    return parts + [last[0] + tail for tail in _same_width("0" * rest, last[1:])]
