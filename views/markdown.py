"""Markdown for pull-request comments: text, code spans and code blocks that no value can break out of.

Stack names, host addresses, env values and arguments are written by people; in
a comment they must stay text. GitHub splits table cells on `|` even inside code
spans, and a code span ends at the first backtick run as long as its fence
(CommonMark 6.1), so both are escaped here, and nowhere else; so are line breaks, escape
sequences and other control or format characters.
"""

from __future__ import annotations

import re

from allocation.errors import printable

_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~])")


def _one_line(text: str) -> str:
    """One line, with no control or format character left to drive a terminal or hide text (a
    comment is also read in a terminal, `gh pr view`): line breaks become spaces, the rest is
    escaped as `allocation.errors.printable` escapes it."""
    return printable(" ".join(text.splitlines())) if text else text


def text(value: str) -> str:
    """Plain text for a heading or a cell: markdown's special characters escaped."""
    return _SPECIAL.sub(r"\\\1", _one_line(value))


def block(value: str) -> str:
    """A fenced code block holding `value`'s lines: a fence longer than any backtick run inside it
    (CommonMark 4.5: only a fence at least as long closes it), so no line can end the block; each
    line's control and format characters are escaped as `text` escapes them."""
    value = "\n".join(printable(line) for line in value.splitlines())
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", value)), default=0))
    return f"{fence}text\n{value}\n{fence}"


def code(value: str) -> str:
    """A code span holding `value` verbatim: a fence longer than any backtick run inside it."""
    value = _one_line(value).replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", value)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if value.startswith("`") or value.endswith("`") or longest else ""
    return f"{fence}{pad}{value}{pad}{fence}"
