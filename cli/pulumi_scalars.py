"""What the Pulumi program sees for a plain YAML scalar of a stack file, so `plan` can refuse what it reads otherwise.

`plan` reads a stack file as YAML 1.2 (`cli.yaml12`). Under `pulumi up` the program reads what the Pulumi
CLI hands it: the CLI parses the file with gopkg.in/yaml.v3, whose `resolve` (go-yaml/yaml `resolve.go`)
reads plain scalars its own way (`0X1F` is 31, `2001-1-1` a `time.Time`, `1e400` the text `1e400`, `.inf`
a float that its JSON encoder then refuses), and passes every object value as JSON text (`pulumi config
--json` shows it under `"value"`). The program decodes that text with `json.loads`
(`components/stack_config.py`, as `pulumi.Config.get_object` does: pulumi/config.py `_get_object` calls
`json.loads` on the string `get_config` returns). So a float the CLI holds as `1.0` reaches the program as
the JSON `1`, an `int`; an integer past 2**63 comes back rounded through a float64.

`program_value` is that chain for one plain scalar of a nested value (every `ascend-fleet:` key that
reaches a container is an object or list). `tests/data/pulumi_readings.json`, recorded from the real CLI by
`tests/data/record_pulumi_readings.py`, is the referee: `tests/test_pulumi_scalars.py` checks this function
against every spelling recorded there.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from dataclasses import dataclass
from typing import Any

_MAP = {
    **dict.fromkeys(("true", "True", "TRUE"), True),
    **dict.fromkeys(("false", "False", "FALSE"), False),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), None),
}
_NOT_JSON = {".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF"}
# Go's strconv.ParseInt(s, 0, 64) syntax (underscores already removed): a base prefix, or a leading 0 for octal.
_GO_INT = re.compile(r"[+-]?(?:0[xX][0-9a-fA-F]+|0[bB][01]+|0[oO][0-7]+|0[0-7]*|[1-9][0-9]*)")
_GO_UINT = re.compile(r"(?:0[xX][0-9a-fA-F]+|0[bB][01]+|0[oO][0-7]+|0[0-7]*|[1-9][0-9]*)")
_YAML_STYLE_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
# yaml.v3 `parseTimestamp`: four digits and `-`, then Go's time.Parse with "2006-1-2" and three longer layouts.
_TIMESTAMP = re.compile(r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})(?:[Tt ][0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2}.*)?")
INT64 = 2**63


@dataclass(frozen=True)
class Refused:
    """The CLI refuses the whole stack file over this scalar; `why` is its reason."""

    why: str


@dataclass(frozen=True)
class Timestamp:
    """A `time.Time`, which reaches the program as its Go `String()`, e.g. `2001-01-01 00:00:00 +0000 UTC`."""

    text: str


def _go_int(text: str) -> int:
    sign = -1 if text[:1] == "-" else 1
    digits = text.lstrip("+-")
    if len(digits) > 1 and digits[0] == "0" and digits[1] not in "xXbBoO":
        return sign * int(digits, 8)
    return sign * int(digits, 0)


def _from_float(value: float) -> Any:
    """A float64 through Go's JSON encoder and `json.loads`: an integral value under 1e21 becomes an int."""
    if value.is_integer() and abs(value) < 1e21:
        return int(Decimal(repr(value)))  # Go prints the shortest digits, then zeros: 18446744073709552000
    return value


def _timestamp(text: str) -> Timestamp | None:
    match = _TIMESTAMP.fullmatch(text)
    if match is None:
        return None
    if text == match.group(0) and len(match.group(0)) <= 10:
        year, month, day = (int(g) for g in match.groups())
        if 1 <= month <= 12 and 1 <= day <= 31:
            return Timestamp(f"{year:04d}-{month:02d}-{day:02d} 00:00:00 +0000 UTC")
        return None
    return Timestamp("a timestamp")  # with a time of day: yaml.v3 reads it as time.Time too


def program_value(text: str) -> Any:
    """The value the program gets for the plain scalar `text` inside an object: a str, int, float, bool,
    None, a `Timestamp`, or `Refused` when the CLI cannot pass the stack on at all."""
    if text in _NOT_JSON:
        return Refused(f"the CLI reads {text} as a float that JSON cannot hold (json: unsupported value)")
    if text in _MAP:
        return _MAP[text]
    if not text or text[0] not in "+-0123456789.":
        return text
    if text[0] != ".":
        stamp = _timestamp(text)
        if stamp is not None:
            return stamp
    plain = text.replace("_", "") if text[0] != "." else text
    if text[0] != "." and _GO_INT.fullmatch(plain):
        value = _go_int(plain)
        if -INT64 <= value < INT64:
            return value
        if _GO_UINT.fullmatch(plain) and value < 2 * INT64:
            return _from_float(float(value))  # a uint64 reaches the program through a float64
    if _YAML_STYLE_FLOAT.fullmatch(plain) or (text[0] == "." and re.fullmatch(r"\.[0-9]+(?:[eE][-+]?[0-9]+)?", text)):
        value = float(plain)
        if not math.isinf(value):
            return _from_float(value)
    return text


def top_level_text(value: Any) -> str:
    """The text the Pulumi CLI hands the program for a top-level scalar that `plan` read as `value`
    (`pulumi config --json` shows it; `top` in tests/data/pulumi_readings.json): `true` or `false`,
    the empty text for null, a number as Go's JSON encoder prints it (`1.0` is `1`, `0.90` is `0.9`):
    golang/go src/encoding/json/encode.go `floatEncoder.encode` writes digits with a decimal point for
    1e-6 <= |x| < 1e21, else an exponent whose `e-09` it shortens to `e-9`."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        value = _from_float(value)
        if isinstance(value, float):
            if 1e-6 <= abs(value) < 1e21:
                return format(Decimal(repr(value)), "f")
            return re.sub(r"e([+-])0+(?=[0-9])", r"e\1", repr(value))  # Go: 1e-7, 1e+21
    return str(value)
