"""The one exception family of the project.

Every problem an operator can cause (a bad key, a conflicting pin, a fleet that
does not fit) is a `FleetError` whose message is a complete, single-paragraph
explanation. The command line and the Pulumi program print it without a
traceback.
"""

from __future__ import annotations

import unicodedata


class FleetError(Exception):
    """A problem with the stack configuration or the fleet it describes."""


class ConfigError(FleetError):
    """The stack configuration is malformed: unknown keys, bad values, unknown hosts."""


class AllocationError(FleetError):
    """The configuration is well formed but the fleet cannot be allocated as asked."""


def listing(problems: list[str], limit: int = 12) -> str:
    """`a; b; c`, or the first `limit` problems and how many more: thousands stay one short paragraph."""
    shown = "; ".join(problems[:limit])
    return shown if len(problems) <= limit else f"{shown}; and {len(problems) - limit} more problems"


def printable(text: str) -> str:
    """Text as a terminal may show it: every control or format character (escape sequences, bell,
    C1 codes, bidi overrides, odd line breaks) escaped, so text read from a file or a host cannot
    drive the terminal."""
    if text.isprintable():  # no character of those categories (Python's str.isprintable): the text as it is
        return text
    return "".join(
        ch if ch == " " or unicodedata.category(ch)[0] not in "CZ" else ch.encode("unicode_escape").decode("ascii")
        for ch in text
    )
