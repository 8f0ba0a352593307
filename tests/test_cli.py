"""`python -m allocation`'s commands, called in-process through `main`; one subprocess smoke test per command."""

from __future__ import annotations

import json

import pytest

from tests.goldens import STACKS, fleets, outputs
from tests.support.cli import spawn
from tests.support.stacks import SEED_UNPINNED
from tests.support.stacks import STACKS as STACK_FILES

GOLDEN_FLEETS = fleets()


def test_the_goldens_hold_every_stack_file_of_the_repository():
    assert sorted(STACKS) == sorted(STACK_FILES)


def test_plan_prints_for_every_stack_and_format_what_the_goldens_pin(cli):
    """The command prints the plan the goldens hold byte for byte (tests/test_goldens.py), and a newline."""
    for stack in STACKS:
        for fmt in ("json", "table", "markdown"):
            result = cli("plan", "--stack", stack, "--format", fmt)
            assert result.returncode == 0, result.stderr
            assert result.stdout == outputs(GOLDEN_FLEETS[stack])[fmt] + "\n", f"{stack} {fmt}"


@pytest.mark.parametrize("stack", STACK_FILES)
def test_make_plan_warns_of_nothing_for_a_committed_stack_and_says_in_notes_where_its_figures_come_from(cli, stack):
    result = cli("plan", "--stack", stack)
    assert result.returncode == 0 and result.stderr == ""
    assert "warning" not in result.stdout and "\nnotes\n\n  note: host " in result.stdout


SHARED_BEFORE_0_15 = (
    "config:\n"
    "  ascend-fleet:hosts:\n    - name: h1\n      address: 10.0.0.1\n"
    "  ascend-fleet:defaults:\n    image: quay.io/ascend/vllm-ascend:v0.11.0\n"
    "  ascend-fleet:services:\n"
    "    - name: a\n      model: /a\n      memoryFraction: 0.1\n      devices: [0]\n"
    "    - name: b\n      model: /b\n      memoryFraction: 0.5\n      devices: [0]\n"
)
"""Two services on card 0 of a vLLM-Ascend 0.11 host without profiles: one warning (b's running total)
and one note (neither is sized)."""


@pytest.mark.parametrize("fmt", ["table", "markdown", "json"])
def test_plan_prints_each_warning_and_each_note_once(cli, tmp_path, fmt):
    """Table and markdown end with the notes, then the warnings (a pull request's reader sees them there) and
    print none on stderr; the JSON carries them under `notes` and `warnings`, and stderr says each warning
    once for its reader, never a note."""
    path = tmp_path / "Pulumi.shared.yaml"
    path.write_text(SHARED_BEFORE_0_15)
    [warning] = json.loads(cli("plan", "--config", str(path), "--format", "json").stdout)["warnings"]
    assert warning.startswith("host h1 card 0: image: b: vLLM-Ascend 0.11 counts the memory")
    note = "host h1: profile: a, b not sized (no profile): their KV caches are not checked; python -m allocation profile writes them"
    result = cli("plan", "--config", str(path), "--format", fmt)
    assert result.returncode == 0, result.stderr
    if fmt == "json":
        doc = json.loads(result.stdout)
        assert (doc["warnings"], doc["notes"]) == ([warning], [note])
        assert result.stderr.splitlines() == [f"warning: {warning}"]
        return
    assert result.stderr == ""
    printed = " ".join(result.stdout.split())
    for line in (warning, note):
        assert printed.count(" ".join(line.split())) == 1, line
    heading = {"table": ("\nnotes\n", "\nwarnings\n"), "markdown": ("\n### Notes\n", "\n### Warnings\n")}[fmt]
    notes_at, warnings_at = (result.stdout.index(h) for h in heading)
    assert notes_at < result.stdout.index("host h1: profile: a, b") < warnings_at < result.stdout.index("host h1 card 0: image")


def test_plan_against_says_each_warning_on_stderr_and_no_note_anywhere(cli, tmp_path, monkeypatch):
    """The diff has no warnings section: stderr says each warning of the new plan once; a note is no change."""
    monkeypatch.setattr("cli.revision.plan_at_revision", lambda *args, **kwargs: None)  # a stack new at HEAD
    path = tmp_path / "Pulumi.shared.yaml"
    path.write_text(SHARED_BEFORE_0_15)
    result = cli("plan", "--config", str(path), "--against", "HEAD")
    assert result.returncode == 0, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("warning: host h1 card 0: image: b: vLLM-Ascend 0.11 counts the memory")
    assert "not sized" not in result.stdout + result.stderr


def test_a_stack_file_anywhere_on_disk_can_be_planned(cli, tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "config:\n"
        "  ascend-fleet:hosts:\n    - name: h1\n      address: 10.0.0.1\n"
        "  ascend-fleet:services:\n    - name: m\n      model: /m\n"
    )
    result = cli("plan", "--config", str(path), "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["hosts"][0]["services"][0]["apiPort"] == 8000


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("config:\n  ascend-fleet:hosts: [\n", "not valid YAML"),
        ("config:\n  ascend-fleet:hosts: []\n", "ascend-fleet:hosts: List should have at least 1 item"),
        ("config:\n  hosts: []\n", "config key 'hosts' has no namespace"),
    ],
)
def test_bad_input_exits_non_zero_with_one_message_and_no_traceback(cli, tmp_path, content, expected):
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(content)
    result = cli("plan", "--config", str(path))
    assert result.returncode == 1
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1


def test_an_unknown_stack_lists_the_stacks_that_exist(cli):
    result = cli("plan", "--stack", "nope")
    assert result.returncode == 1
    assert "no stack file Pulumi.nope.yaml" in result.stderr and "prod" in result.stderr


def test_pin_writes_the_plan_back_keeping_comments_and_key_order(cli, tmp_path):
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(SEED_UNPINNED)
    before = json.loads(cli("plan", "--config", str(path), "--format", "json").stdout)

    result = cli("pin", "--config", str(path))
    assert result.returncode == 0, result.stderr
    text = path.read_text()
    assert "# A comment the operator wrote, which pin must keep." in text
    assert "address: 192.0.2.10   # the rack's first host" in text
    assert "model: /m/qwen        # weights" in text
    assert text.index("name: qwen") < text.index("name: bge")
    assert "devices: [0, 1, 2, 3]" in text
    assert json.loads(cli("plan", "--config", str(path), "--format", "json").stdout)["hosts"] == before["hosts"]

    # Pinned, the existing services stay put when a larger service arrives first in the order.
    path.write_text(text + "    - name: aaa-big\n      model: /m/big\n      tensorParallelSize: 4\n      memoryFraction: 0.9\n")
    after = json.loads(cli("plan", "--config", str(path), "--format", "json").stdout)
    old = {s["name"]: s for s in before["hosts"][0]["services"]}
    new = {s["name"]: s for s in after["hosts"][0]["services"]}
    assert all(new[name] == old[name] for name in old)
    assert cli("pin", "--config", str(path)).stdout.strip().endswith("aaa-big")


def test_pin_leaves_the_file_untouched_when_the_fleet_does_not_fit(cli, tmp_path):
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(SEED_UNPINNED.replace("memoryFraction: 0.1", "memoryFraction: 0.1\n      tensorParallelSize: 16"))
    original = path.read_text()
    result = cli("pin", "--config", str(path))
    assert result.returncode == 1 and "service bge, which needs 16 cards" in result.stderr
    assert path.read_text() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Pulumi.t.yaml"]


# ---- the real entry point, once per command -------------------------------------------


def test_python_m_allocation_plan_prints_the_plan_of_the_default_stack():
    result = spawn("plan", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["stack"] == "prod"


def test_python_m_allocation_pin_rewrites_a_stack_file(tmp_path):
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(SEED_UNPINNED)
    result = spawn("pin", "--config", str(path))
    assert result.returncode == 0, result.stderr
    assert "devices: [0, 1, 2, 3]" in path.read_text()


def test_python_m_allocation_render_prints_a_script():
    result = spawn("render", "--format", "docker-run")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("#!/bin/sh\n") and "docker run" in result.stdout


def test_python_m_allocation_doctor_reports_an_unreachable_host_and_exits_one(tmp_path):
    path = tmp_path / "Pulumi.t.yaml"
    # Port 1 on loopback refuses at once: the host is unreachable without waiting.
    path.write_text(SEED_UNPINNED.replace("address: 192.0.2.10", "address: 127.0.0.1\n      sshPort: 1"))
    result = spawn("doctor", "--config", str(path), "--format", "json")
    assert result.returncode == 1, result.stderr
    [host] = json.loads(result.stdout)["hosts"]
    assert [f["kind"] for f in host["findings"]] == ["unreachable"]


def test_a_usage_error_exits_two():
    result = spawn("plan", "--format", "yaml")
    assert result.returncode == 2 and "invalid choice" in result.stderr
