"""The README gives the two commands; the docs it points to keep what other tests cannot check by behaviour.
(Every config key in docs/configuration.md: tests/test_schema.py, over the generated reference.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from cli.main import _parser, main
from cli.shards import HOST_SLOTS, deploy_matrix
from records.pipeline import plan_of
from tests.support.stacks import host, service

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


def test_the_commands_page_shows_make_plan_on_prod_as_it_prints_today(capsys):
    page = (ROOT / "docs" / "commands.md").read_text()
    shown = page.split("`make plan` on prod:\n\n```\n", 1)[1].split("```", 1)[0]
    assert main(["plan", "--stack", "prod"]) == 0
    assert shown == capsys.readouterr().out


def test_the_commands_pages_markdown_example_is_lines_of_prods_markdown_today(capsys):
    page = (ROOT / "docs" / "commands.md").read_text()
    shown = page.split("needs no horizontal scrolling:\n\n```\n", 1)[1].split("```", 1)[0]
    assert main(["plan", "--stack", "prod", "--format", "markdown"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line for line in shown.splitlines() if line] and all(line in printed for line in shown.splitlines() if line)


def test_the_shards_pages_parallel_rule_is_the_one_deploy_matrix_counts():
    """50 hosts of 4 containers, no exporter: one slot per container and HOST_SLOTS per host."""
    page = " ".join((ROOT / "docs" / "shards.md").read_text().split())
    hosts = [host(f"h{i:02d}", address=f"192.0.2.{i + 1}") for i in range(50)]
    services = [service(f"s{i:02d}-{c}", 1, 0.2, host=f"h{i:02d}") for i in range(50) for c in range(4)]
    [row] = deploy_matrix("prod", plan_of("prod", {"hosts": hosts, "services": services}))
    assert row["parallel"] == 50 * (4 + HOST_SLOTS) == 600
    assert f"{HOST_SLOTS} for every host that runs one" in page and "50 x (4 + 8) = 600" in page
    assert "pulumi up --stack prod-shard-0 --parallel 600" in page


def test_the_everyday_commands_show_what_runs_where():
    assert {"status", "logs", "endpoints"} <= {shlex.split(c)[3] for c in allocation_commands(README)}
