"""`--config` with a file not named `Pulumi.<stack>.yaml` says which stack it plans the file as, and
`--stack-name` chooses it: the stack name reaches every container's labels, so it must not be a
silent guess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.stacks import SEED_UNPINNED
from tests.support.cli import spawn

ROOT = Path(__file__).resolve().parent.parent


def said(stderr: str) -> list[str]:
    """stderr's lines but the plan's warnings (the seed's card 0 gets one about graph memory)."""
    return [line for line in stderr.splitlines() if not line.startswith("warning: ")]


def stack_file(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_text(SEED_UNPINNED)
    return path


def test_a_file_not_named_for_a_stack_is_planned_as_its_name_and_one_line_on_stderr_says_so(cli, tmp_path):
    result = cli("plan", "--config", str(stack_file(tmp_path, "fleet.yaml")), "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["stack"] == "fleet"
    assert said(result.stderr) == [
        "note: fleet.yaml is not named Pulumi.<stack>.yaml, so it is planned as stack fleet; "
        "--stack-name NAME chooses another"
    ], result.stderr


@pytest.mark.parametrize("name", ["Pulumi.t.yaml", "Pulumi.t.yml"])
def test_a_file_named_for_its_stack_gets_no_note(cli, tmp_path, name):
    result = cli("plan", "--config", str(stack_file(tmp_path, name)), "--format", "json")
    assert result.returncode == 0 and said(result.stderr) == [], result.stderr
    assert json.loads(result.stdout)["stack"] == "t"


@pytest.mark.parametrize("name", ["fleet.yaml", "Pulumi.t.yaml"])
def test_stack_name_chooses_the_stack_and_its_containers_labels(cli, tmp_path, name):
    result = cli("plan", "--config", str(stack_file(tmp_path, name)), "--stack-name", "blue", "--format", "json")
    assert result.returncode == 0 and said(result.stderr) == [], result.stderr
    plan = json.loads(result.stdout)
    assert plan["stack"] == "blue"
    labels = plan["hosts"][0]["services"][0]["container"]["labels"]
    assert "blue" in labels.values(), labels


@pytest.mark.parametrize("bad", ["my fleet", "-x", "a/b", "x" * 101, ""])
def test_a_stack_name_that_is_not_one_is_refused_in_one_paragraph(cli, tmp_path, bad):
    result = cli("plan", "--config", str(stack_file(tmp_path, "fleet.yaml")), f"--stack-name={bad}")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(f"error: --stack-name {bad!r} is not a stack name: letters, digits") and result.stderr.count("\n") == 1


def test_a_file_whose_name_is_no_stack_name_asks_for_stack_name(cli, tmp_path):
    result = cli("plan", "--config", str(stack_file(tmp_path, "my fleet.yaml")))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "'my fleet', the stack name its name gives, is not a stack name" in result.stderr and "--stack-name NAME" in result.stderr, result.stderr


def test_stack_name_without_config_is_a_usage_error():
    result = spawn("plan", "--stack", "prod", "--stack-name", "blue")
    assert result.returncode == 2 and "--stack-name" in result.stderr and "--config" in result.stderr


def test_pin_takes_the_stack_name_too(cli, tmp_path):
    path = stack_file(tmp_path, "fleet.yaml")
    result = cli("pin", "--config", str(path), "--stack-name", "blue")
    assert result.returncode == 0 and said(result.stderr) == [], result.stderr
    assert "devices: [0, 1, 2, 3]" in path.read_text()


def test_plan_against_plans_the_old_file_under_the_chosen_stack_name_too(cli):
    result = cli("plan", "--config", str(ROOT / "Pulumi.prod.yaml"), "--stack-name", "blue", "--against", "HEAD",
                 "--format", "markdown")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "stack `blue` vs `HEAD`" in result.stdout and "No allocation changes." in result.stdout, result.stdout
