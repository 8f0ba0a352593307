"""`make plan` fits a 120-column terminal and the pull-request markdown a GitHub comment; `--wide` keeps one table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli.stackfile import load_fleet
from views.report import WIDTH, render_plan
from tests.support.stacks import fleet, host, service
from tests.support.pipeline import deployment_of

ROOT = Path(__file__).resolve().parent.parent
STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in ROOT.glob("Pulumi.*.yaml"))


def _deployment(stack: str):
    return deployment_of(load_fleet(stack)[0])


@pytest.mark.parametrize("stack", STACKS)
def test_every_line_of_every_committed_stacks_plan_fits_120_columns(cli, stack):
    result = cli("plan", "--stack", stack)
    assert result.returncode == 0, result.stderr
    long = [line for line in result.stdout.splitlines() if len(line) > WIDTH]
    assert WIDTH == 120 and not long, "\n".join(long)


def test_the_port_windows_and_the_capacity_are_two_tables_per_host_with_the_same_rows():
    text = render_plan(_deployment("prod"), "table")
    windows = next(line for line in text.splitlines() if "VLLM_PORT" in line)
    capacity = next(line for line in text.splitlines() if "weights/card" in line)
    assert windows != capacity and "weights/card" not in windows
    after = text.split(capacity)[1].split("\n\n")[0].split()
    assert {"bge-m3", "qwen-long", "qwen-vl", "23.22", "1.63"} <= set(after)


def _warned():
    """Two services on card 0 of a vLLM-Ascend 0.11 host: a long warning (b's running total), and a note."""
    services = [service("a", 1, 0.1, devices=[0]), service("b", 1, 0.5, devices=[0])]
    return deployment_of(fleet([host("npu-a")], services, defaults={"image": "quay.io/ascend/vllm-ascend:v0.11.0"}))


@pytest.mark.parametrize("kind", ["note", "warning"])
def test_a_long_note_or_warning_wraps_under_its_first_line_and_reads_the_same_words(kind):
    deployment = _deployment("prod") if kind == "note" else _warned()
    said = getattr(deployment.plan, f"{kind}s")
    text = render_plan(deployment, "table").split(f"\n{kind}s\n\n")[1].split("\n\n")[0]
    assert said and any(len(line) > WIDTH - 10 for line in said)
    assert text.split() == [word for line in said for word in f"{kind}: {line}".split()]
    assert text.count(f"\n  {kind}: ") == len(said) - 1


@pytest.mark.parametrize("stack", STACKS)
def test_wide_keeps_the_single_table_with_capacity_beside_the_windows(cli, stack):
    result = cli("plan", "--stack", stack, "--wide")
    assert result.returncode == 0, result.stderr
    assert result.stdout == render_plan(_deployment(stack), "table", wide=True) + "\n"
    if stack == "prod":
        assert any("VLLM_PORT" in line and "weights/card" in line for line in result.stdout.splitlines())
        assert max(map(len, result.stdout.splitlines())) > WIDTH


def _md_widths(markdown: str) -> list[int]:
    """The width of each markdown table laid out as the terminal table is (its widest cell per column, unescaped,
    two spaces between): GitHub wraps a cell's text at spaces, so a table that fits 120 such columns shows in a
    comment without scrolling, and one of 200 (today's `--wide`) does not."""
    out = []
    for block in markdown.split("\n\n"):
        rows = [line for line in block.splitlines() if line.startswith("|") and not line.startswith("|---")]
        if rows:
            cells = [[re.sub(r"\\(.)", r"\1", c).strip() for c in re.split(r"(?<!\\)\|", r)[1:-1]] for r in rows]
            out.append(sum(max(len(r[i]) for r in cells) + 2 for i in range(len(cells[0]))))
    return out


@pytest.mark.parametrize("stack", ["prod", "staging"])
def test_the_pull_request_markdown_has_no_table_wider_than_a_comment(stack):
    widths = _md_widths(render_plan(_deployment(stack), "markdown"))
    assert widths and max(widths) <= WIDTH, widths


def test_wide_markdown_keeps_the_single_table():
    assert max(_md_widths(render_plan(_deployment("prod"), "markdown", wide=True))) > WIDTH


def test_a_host_title_longer_than_the_width_wraps_with_every_name_kept():
    old = [f"old-compose-container-{i}" for i in range(8)]
    deployment = deployment_of(fleet([host("npu-a", replaces=old)], [service("chat")]))
    text = render_plan(deployment, "table")
    assert max(map(len, text.splitlines())) <= WIDTH
    assert all(name in text for name in old)
    assert any(len(line) > WIDTH for line in render_plan(deployment, "table", wide=True).splitlines())
