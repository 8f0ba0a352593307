"""`shards --changed-since REF`: which shards' slices a change reaches (cli/shard_changes.py), on real
git repositories holding the real program, as `plan --against` is tested (tests/test_plan_diff.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from allocation.errors import FleetError
from cli.revision import plan_at_revision
from cli.shard_changes import PROGRAM, ShardChanges, since
from cli.shard_comment import ARTIFACT, MAX_COMMENT
from cli.stackfile import StackFile, stack_document, stack_values
from records.pipeline import deployment_of
from tests.support.git_repos import PROJECT, SHARDED_FLEET as FLEET, copy_program, git
from tests.support.workflows import link_venv, run_script, step_script
from views.report import plan_json



@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with the program and the fleet `test` deployed as two shards, committed."""
    root = tmp_path / "repo"
    root.mkdir()
    copy_program(root)
    (root / "Pulumi.yaml").write_text(PROJECT)
    (root / "Pulumi.test.yaml").write_text(FLEET)
    git(tmp_path, "init", "--quiet", "--initial-branch=main", str(root))
    git(root, "add", ".")
    git(root, "commit", "--quiet", "-m", "base")
    return root


def edit(repo: Path, old: str, new: str) -> None:
    path = repo / "Pulumi.test.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    git(repo, "commit", "--quiet", "-am", "head")


def changes(repo: Path, ref: str = "HEAD~1") -> ShardChanges:
    """What `shards --changed-since ref` computes, with the program run in-process for the new side."""
    stack_file = StackFile("test", repo / "Pulumi.test.yaml")
    new = plan_json(deployment_of("test", stack_values(stack_file, root=repo)))
    old = plan_at_revision(repo, ref, "test", None)
    return since(repo, ref, "test", old, new, stack_document(stack_file.path))


def test_a_service_edit_changes_only_the_shard_of_its_host(repo: Path):
    edit(repo, "{name: on-c, model: /models/x,", "{name: on-c, model: /models/y,")
    got = changes(repo)
    assert (got.changed, got.unchanged, got.emptied, got.every) == ((1,), (0,), (), "")


def test_a_new_host_changes_only_its_new_shard_though_every_shard_reads_the_edited_file(repo: Path):
    edit(repo, "    - {name: d, address: 192.0.2.4}\n", "    - {name: d, address: 192.0.2.4}\n    - {name: e, address: 192.0.2.5}\n")
    got = changes(repo)
    assert (got.changed, got.unchanged) == ((2,), (0, 1))


def test_a_comment_or_a_respelling_of_the_same_values_changes_no_shard(repo: Path):
    edit(repo, "  ascend-fleet:shards: {size: 2}\n", "  # two hosts a shard\n  ascend-fleet:shards:\n    size: 2\n")
    got = changes(repo)
    assert (got.changed, got.unchanged) == ((), (0, 1))


def test_how_a_host_is_reached_changes_its_shard_though_the_plan_json_does_not_print_it(repo: Path):
    edit(repo, "{name: b, address: 192.0.2.2}", "{name: b, address: 192.0.2.2, sshPort: 2222}")
    assert changes(repo).changed == (0,)


def test_a_routers_own_setting_changes_the_shard_of_its_replicas_and_router_only(repo: Path):
    replicated = "    - {name: r, model: /models/r, memoryFraction: 0.4, replicas: 2, replicaPins: [{host: c}, {host: d}], router: {policy: round_robin}}\n"
    (repo / "Pulumi.test.yaml").write_text(FLEET + replicated)
    git(repo, "commit", "--quiet", "-am", "a replicated service in shard 1")
    edit(repo, "policy: round_robin", "policy: random")
    got = changes(repo)
    assert (got.changed, got.unchanged) == ((1,), (0,))


def test_pinning_hosts_to_the_shards_they_are_in_changes_no_shard(repo: Path):
    edit(repo, "{name: a, address: 192.0.2.1}", "{name: a, address: 192.0.2.1, shard: 0}")
    assert changes(repo).changed == ()


def test_a_fleet_wide_setting_changes_every_shard(repo: Path):
    edit(repo, "  ascend-fleet:shards: {size: 2}\n", "  ascend-fleet:shards: {size: 2}\n  ascend-fleet:defaults: {shmSizeMiB: 64}\n")
    got = changes(repo)
    assert (got.changed, got.unchanged) == ((0, 1), ())


def test_a_shard_whose_hosts_are_all_gone_is_named_emptied(repo: Path):
    text = (repo / "Pulumi.test.yaml").read_text()
    kept = [line for line in text.splitlines(keepends=True) if "name: c" not in line and "name: d" not in line and "host: c" not in line and "host: d" not in line]
    (repo / "Pulumi.test.yaml").write_text("".join(kept))
    git(repo, "commit", "--quiet", "-am", "head")
    got = changes(repo)
    assert (got.changed, got.unchanged, got.emptied) == ((), (0,), (1,))


def test_a_program_change_changes_every_shard_without_comparing_slices(repo: Path):
    (repo / "records" / "NOTE.txt").write_text("a change of the program\n")
    git(repo, "add", ".")
    git(repo, "commit", "--quiet", "-m", "head")
    got = changes(repo)
    assert (got.changed, got.unchanged) == ((0, 1), ())
    assert got.every.startswith("the program changed since HEAD~1")


def test_a_fleet_not_deployed_as_shards_at_the_revision_changes_every_shard(repo: Path):
    edit(repo, "  ascend-fleet:shards: {size: 2}\n", "")
    (repo / "Pulumi.test.yaml").write_text(FLEET)
    git(repo, "commit", "--quiet", "-am", "sharded now")
    got = changes(repo)
    assert got.changed == (0, 1) and got.every == "stack test was not deployed as shards at HEAD~1"


def test_the_program_paths_are_those_the_pull_request_workflow_watches():
    text = (Path(__file__).resolve().parents[1] / ".github" / "workflows" / "pull-request.yml").read_text()
    [line] = [line for line in text.splitlines() if line.strip().startswith("shared=(")]
    assert tuple(line.strip().removeprefix("shared=(").removesuffix(")").split()) == PROGRAM


# --- the command ------------------------------------------------------------


def run(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "allocation", "shards", *args],
        cwd=repo, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(repo)},
    )  # fmt: skip


def test_the_command_prints_the_matrix_rows_of_the_changed_shards_and_names_the_unchanged(repo: Path):
    edit(repo, "{name: on-c, model: /models/x,", "{name: on-c, model: /models/y,")
    proc = run(repo, "--stack", "test", "--changed-since", "HEAD~1")
    assert proc.returncode == 0, proc.stderr
    [row] = json.loads(proc.stdout)
    assert set(row) == {"stack", "parallel"} and row["stack"] == "test-shard-1" and row["parallel"] > 1
    assert "shards of fleet test unchanged since HEAD~1: 0" in proc.stderr


def test_the_comment_has_the_restart_list_first_then_the_changed_shards_preview_then_the_unchanged(repo: Path, tmp_path: Path):
    edit(repo, "{name: on-c, model: /models/x,", "{name: on-c, model: /models/y,")
    previews = tmp_path / "previews"
    previews.mkdir()
    digest = {"steps": [{"op": "replace", "urn": "urn:pulumi:test-shard-1::ascend-fleet::docker:index/container:Container::on-c"}], "changeSummary": {"replace": 1, "same": 9}}
    (previews / "test-shard-1.json").write_text(json.dumps(digest))
    proc = run(repo, "--stack", "test", "--changed-since", "HEAD~1", "--comment", str(previews))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.index("on-c") < text.index("#### test-shard-1: 1 to replace, 9 unchanged") < text.index("docker:index/container:Container on-c")
    assert "Will restart" in text.split("### Shard previews")[0]
    assert "**Unchanged**, not previewed: shards 0" in text


def test_the_printed_comment_is_cut_naming_the_artifact_and_the_whole_one_goes_to_its_file(repo: Path, tmp_path: Path):
    edit(repo, "{name: on-c, model: /models/x,", "{name: on-c, model: /models/y,")
    previews = tmp_path / "previews"
    previews.mkdir()
    urn = "urn:pulumi:test-shard-1::ascend-fleet::docker:index/container:Container::c{:04d}-" + "x" * 300
    digest = {"steps": [{"op": "create", "urn": urn.format(i)} for i in range(1000)], "changeSummary": {"create": 1000}}
    (previews / "test-shard-1.json").write_text(json.dumps(digest))
    whole = tmp_path / "comments" / "test.md"
    whole.parent.mkdir()
    proc = run(repo, "--stack", "test", "--changed-since", "HEAD~1", "--comment", str(previews), "--whole-comment", str(whole))
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout) <= MAX_COMMENT and f"test.md in the artifact {ARTIFACT} of this workflow run" in proc.stdout
    assert all(f"c{i:04d}-" in whole.read_text() for i in range(1000)) and whole.read_text().startswith(proc.stdout[:500])


def one_paragraph(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    return proc.stderr


def test_an_unknown_revision_is_one_paragraph_naming_it(repo: Path):
    assert "unknown git revision 'no-such-branch'" in one_paragraph(run(repo, "--stack", "test", "--changed-since", "no-such-branch"))
    with pytest.raises(FleetError, match="unknown git revision"):
        changes(repo, "no-such-branch")


@pytest.mark.parametrize("ref", ["no-such-branch", "HEAD~1..HEAD", "^HEAD", "-HEAD"])
def test_a_revision_that_names_no_commit_is_named_by_the_flag_it_was_given_with(repo: Path, ref: str):
    error = one_paragraph(run(repo, "--stack", "test", f"--changed-since={ref}"))
    assert "--changed-since" in error and "--against" not in error, error
    with pytest.raises(FleetError, match="--changed-since") as info:
        since(repo, ref, "test", {}, {}, {})
    assert "--against" not in str(info.value)


def test_a_stack_not_deployed_as_shards_is_one_paragraph_naming_its_file(repo: Path):
    (repo / "Pulumi.one.yaml").write_text(FLEET.replace("  ascend-fleet:shards: {size: 2}\n", ""))
    error = one_paragraph(run(repo, "--stack", "one", "--changed-since", "HEAD"))
    assert "Pulumi.one.yaml: stack one sets no ascend-fleet:shards" in error


def test_a_shards_own_file_and_a_config_path_are_refused_in_one_paragraph(repo: Path):
    assert run(repo, "--stack", "test").returncode == 0
    error = one_paragraph(run(repo, "--stack", "test-shard-0", "--changed-since", "HEAD"))
    assert "is shard 0 of fleet test: cut the fleet's own file (--stack test)" in error
    assert "give --stack NAME" in one_paragraph(run(repo, "--config", str(repo / "Pulumi.test.yaml"), "--changed-since", "HEAD"))
    assert "give --changed-since REF too" in one_paragraph(run(repo, "--stack", "test", "--comment", "x"))
    assert "give --changed-since REF --comment DIR too" in one_paragraph(run(repo, "--stack", "test", "--whole-comment", "x"))
    both = run(repo, "--stack", "test", "--matrix", "--changed-since", "HEAD")
    assert both.returncode == 2 and "not allowed with argument --matrix" in both.stderr


# --- the workflow's scripts, run as the pull-request workflow runs them -------


def test_the_workflow_lists_the_changed_shards_of_every_fleet_and_writes_one_comment_each(repo: Path, tmp_path: Path):
    link_venv(repo)
    (repo / "Pulumi.prod.yaml").write_text(FLEET)
    git(repo, "add", "Pulumi.test.yaml", "Pulumi.prod.yaml")
    git(repo, "commit", "--quiet", "-m", "prod")
    git(repo, "update-ref", "refs/remotes/origin/main", "HEAD")
    edit(repo, "{name: on-c, model: /models/x,", "{name: on-c, model: /models/y,")
    for fleet in ("test", "prod"):
        assert run(repo, "--stack", fleet).returncode == 0  # the shard files, cut as the pull request commits them
    output, summary = tmp_path / "output", tmp_path / "summary"
    fleets = json.dumps(["test", "prod"])
    listing = run_script(repo, step_script("pull-request.yml", "shard-changes", "Changed shards and their --parallel"),
                         BASE_REF="main", FLEETS=fleets, GITHUB_OUTPUT=str(output))  # fmt: skip
    assert listing.returncode == 0, listing.stderr
    [line] = output.read_text().splitlines()
    assert [row["stack"] for row in json.loads(line.removeprefix("matrix="))] == ["test-shard-1"]
    posting = run_script(repo, step_script("pull-request.yml", "shard-comment", "One comment per fleet"),
                         BASE_REF="main", FLEETS=fleets, SAME_REPO="false", GITHUB_STEP_SUMMARY=str(summary))  # fmt: skip
    assert posting.returncode == 0, posting.stderr
    assert "#### test-shard-1: no preview" in (repo / "comment-test.md").read_text()
    assert "**Changed**: none" in (repo / "comment-prod.md").read_text()
    assert (repo / "comments" / "test.md").read_text() == (repo / "comment-test.md").read_text(), "a comment with nothing to cut is whole"
    assert summary.read_text().count("### Shard previews of fleet") == 2
