"""CHANGELOG.md says what an upgrade re-creates, and the program says which version it is: the first
entry is the version `python -m allocation --version` prints, and the `plan --against` line it quotes
is what the command prints today (a change that re-creates containers must say so there)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from allocation.version import VERSION
from tests.support.cli import spawn

ROOT = Path(__file__).resolve().parent.parent
CHANGELOG = (ROOT / "CHANGELOG.md").read_text()


def first_entry() -> tuple[str, str]:
    """The first `## <version>` heading's version and the text up to the next heading."""
    match = re.search(r"^## (\S+)[^\n]*\n(.*?)(?=^## )", CHANGELOG, flags=re.M | re.S)
    assert match, "CHANGELOG.md has no `## <version>` entry followed by another"
    return match.group(1), match.group(2)


def test_the_first_entry_is_the_version_the_program_reports():
    version, _ = first_entry()
    assert version == VERSION
    result = spawn("--version")
    assert result.returncode == 0 and result.stdout == f"ascend-fleet {VERSION}\n"


def test_the_first_entrys_plan_against_line_is_what_the_command_prints_today():
    _, text = first_entry()
    text = " ".join(text.split())
    match = re.search(r"`plan --stack (\S+) --against (\S+)` prints `([^`]+)`", text)
    assert match, "the first entry quotes `plan --stack S --against REV` prints `LINE`"
    stack, rev, line = match.groups()
    git = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{rev}^{{commit}}"], capture_output=True)
    assert git.returncode == 0, f"{rev} is not in this clone's history (CI checks out with fetch-depth: 0)"
    result = spawn("plan", "--stack", stack, "--against", rev)
    assert result.returncode == 0, result.stderr
    assert line in result.stdout.splitlines(), result.stdout[:2000]


def test_every_entry_names_what_an_upgrade_re_creates():
    table = [row for row in CHANGELOG.splitlines() if re.match(r"\| [0-9a-f]{7} \(", row)]
    assert table and all(row.count("|") == 5 for row in table)
    assert all("`" in row.rsplit("|", 2)[1] for row in table), "each row quotes its plan --against line"
