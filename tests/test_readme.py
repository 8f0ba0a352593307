"""The README gives the two commands; the docs it points to keep what other tests cannot check by behaviour.
(Every config key in docs/configuration.md: tests/test_schema.py, over the generated reference.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from cli.main import _parser

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
CAPACITY = (ROOT / "docs" / "capacity.md").read_text()


def test_the_readme_gives_the_two_commands():
    assert "make plan" in README and "make test" in README


def test_the_capacity_page_says_encoder_models_keep_no_kv_cache_and_how_auto_sizes_them():
    assert "keeps **no KV cache** at all" in CAPACITY
    assert "smallest fraction that holds its weights and the allowance" in CAPACITY
    assert "vLLM still takes the whole fraction" not in CAPACITY


def allocation_commands(text: str) -> list[str]:
    """Every `python -m allocation ...` of the page's shell blocks, up to a pipe, a `;`, `&&`, a `)` or a comment."""
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    return [m.strip() for block in blocks for m in re.findall(r"[\w./]*python3? -m allocation[^|;#)&\n]*", block)]


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md"])
def test_every_allocation_command_of_the_page_runs_as_pasted_from_the_repository_root(page: str):
    """`.venv/bin/python`, which `make plan` creates, never a bare `python` that may not be this venv's;
    and every subcommand and flag is one the command line takes (argparse exits on any other)."""
    commands = allocation_commands((ROOT / page).read_text())
    assert commands
    for command in commands:
        words = shlex.split(command)
        assert words[:3] == [".venv/bin/python", "-m", "allocation"], command
        _parser().parse_args(words[3:])


def test_the_getting_started_page_is_linked_from_the_readme():
    assert "(docs/getting-started.md)" in README
