"""The workflows follow the repository's stack files: the stacks that pull-request.yml plans and
previews, deploy.yml deploys and drift.yml checks are listed by `python -m allocation stacks` (every
Pulumi.<stack>.yaml but the shard files; a fleet deployed as shards by its shard stacks), never by a
list of their own. Each listing script runs here as its step runs it, in a git repository holding the
real program, the committed stacks, a new stack file and a new fleet deployed as shards."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli.main import main
from tests.support.git_repos import REPO, SHARDED_FLEET as FLEET, copy_program, git
from tests.support.workflows import link_venv, load, outputs, run_script, step_script

COMMITTED = ("dev", "prod", "staging")


def allocation(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "allocation", *args], cwd=repo, capture_output=True, text=True, timeout=300)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The program and the committed stacks at origin/main; on top, as a pull request adds them, a new
    stack `newstack` (staging's hosts and services) and a fleet `fleet` deployed as two shards, its
    shard files cut by `shards`."""
    root = tmp_path / "repo"
    root.mkdir()
    copy_program(root)
    for name in ("Pulumi.yaml", *(f"Pulumi.{s}.yaml" for s in COMMITTED)):
        shutil.copy(REPO / name, root / name)
    link_venv(root)
    git(tmp_path, "init", "--quiet", "--initial-branch=main", str(root))
    git(root, "add", ".")
    git(root, "commit", "--quiet", "-m", "base")
    git(root, "update-ref", "refs/remotes/origin/main", "HEAD")
    shutil.copy(REPO / "Pulumi.staging.yaml", root / "Pulumi.newstack.yaml")
    (root / "Pulumi.fleet.yaml").write_text(FLEET)
    assert allocation(root, "shards", "--stack", "fleet").returncode == 0
    git(root, "add", ".")
    git(root, "commit", "--quiet", "-m", "a new stack and a new fleet deployed as shards")
    return root


def step_outputs(repo: Path, workflow: str, job: str, step: str, **env: str) -> dict[str, str]:
    """What the step writes to $GITHUB_OUTPUT, run in `repo`."""
    path = repo.parent / "github_output"
    path.unlink(missing_ok=True)
    proc = run_script(repo, step_script(workflow, job, step), GITHUB_OUTPUT=str(path), **env)
    assert proc.returncode == 0, proc.stderr
    return outputs(path)


def stacks_of(matrix: str) -> list[str]:
    return [row["stack"] for row in json.loads(matrix)]


def test_stacks_lists_every_stack_file_but_the_shard_files_each_fleet_by_its_shards(repo: Path):
    listed = allocation(repo, "stacks")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["fleet"], r["stack"], r["local"]) for r in rows] == [
        ("dev", "dev", True), ("fleet", "fleet-shard-0", False), ("fleet", "fleet-shard-1", False),
        ("newstack", "newstack", False), ("prod", "prod", False), ("staging", "staging", False),
    ]  # fmt: skip
    shard = json.loads(allocation(repo, "shards", "--stack", "fleet", "--matrix").stdout)
    assert [{"stack": r["stack"], "parallel": r["parallel"]} for r in rows if r["fleet"] == "fleet"] == shard


def test_the_committed_stacks_are_listed_by_the_command_in_process(capsys):
    assert main(["stacks"]) == 0
    assert [row["fleet"] for row in json.loads(capsys.readouterr().out)] == sorted(
        p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in REPO.glob("Pulumi.*.yaml")
    )


def test_a_pull_request_plans_the_new_stack_and_previews_the_new_fleet_shard_by_shard(repo: Path):
    touched = step_outputs(repo, "pull-request.yml", "changes", "Which stacks does this pull request touch?", BASE_REF="main")
    assert json.loads(touched["stacks"]) == [{"stack": "newstack", "local": False}]
    assert json.loads(touched["fleets"]) == ["fleet"]
    shards = step_outputs(
        repo, "pull-request.yml", "shard-changes", "Changed shards and their --parallel", BASE_REF="main", FLEETS=touched["fleets"]
    )
    assert stacks_of(shards["matrix"]) == ["fleet-shard-0", "fleet-shard-1"]


def test_a_program_change_plans_every_stack_the_local_one_marked_so_it_gets_no_preview(repo: Path):
    (repo / "allocation" / "plan.py").write_text((repo / "allocation" / "plan.py").read_text() + "\n# edited\n")
    git(repo, "commit", "--quiet", "-am", "the planner edited")
    touched = step_outputs(repo, "pull-request.yml", "changes", "Which stacks does this pull request touch?", BASE_REF="main")
    assert json.loads(touched["stacks"]) == [
        {"stack": s, "local": s == "dev"} for s in ("dev", "newstack", "prod", "staging")
    ]
    assert json.loads(touched["fleets"]) == ["fleet"]


def test_an_edited_shard_file_touches_its_fleet(repo: Path):
    git(repo, "update-ref", "refs/remotes/origin/main", "HEAD")
    shard = repo / "Pulumi.fleet-shard-1.yaml"
    shard.write_text(shard.read_text() + "# edited by hand\n")
    git(repo, "commit", "--quiet", "-am", "a shard file edited")
    touched = step_outputs(repo, "pull-request.yml", "changes", "Which stacks does this pull request touch?", BASE_REF="main")
    assert touched == {"stacks": "[]", "fleets": '["fleet"]'}


def test_deploy_runs_staging_then_every_other_stack_and_shard_and_never_the_local_one(repo: Path):
    lists = step_outputs(repo, "deploy.yml", "stacks", "Stacks, shard stacks and their --parallel")
    assert stacks_of(lists["staging"]) == ["staging"]
    assert stacks_of(lists["production"]) == ["fleet-shard-0", "fleet-shard-1", "newstack", "prod"]
    rows = {r["stack"]: r["parallel"] for r in json.loads(allocation(repo, "stacks").stdout)}
    assert all(row["parallel"] == rows[row["stack"]] for row in json.loads(lists["production"]))


def test_deploy_refuses_shard_files_not_cut_from_the_fleet_as_it_is(repo: Path):
    (repo / "Pulumi.fleet.yaml").write_text(FLEET.replace("{name: on-c, model: /models/x,", "{name: on-c, model: /models/y,"))
    proc = run_script(repo, step_script("deploy.yml", "stacks", "Stacks, shard stacks and their --parallel"),
                      GITHUB_OUTPUT=str(repo.parent / "github_output"))  # fmt: skip
    assert proc.returncode == 1 and "shard files of fleet fleet are not current" in proc.stderr
    assert not (repo.parent / "github_output").exists()


def test_drift_checks_every_stack_and_each_shard_of_a_fleet_but_never_the_local_one(repo: Path):
    lists = step_outputs(repo, "drift.yml", "stacks", "Stacks, shard stacks and their --parallel")
    assert stacks_of(lists["matrix"]) == ["fleet-shard-0", "fleet-shard-1", "newstack", "prod", "staging"]


def test_a_broken_stack_file_fails_the_listing_with_the_planners_paragraph(repo: Path):
    (repo / "Pulumi.newstack.yaml").write_text("config:\n  ascend-fleet:hosts: 3\n")
    proc = run_script(repo, step_script("drift.yml", "stacks", "Stacks, shard stacks and their --parallel"),
                      GITHUB_OUTPUT=str(repo.parent / "github_output"))  # fmt: skip
    assert proc.returncode != 0 and "error: " in proc.stderr and "Traceback" not in proc.stderr
    assert not (repo.parent / "github_output").exists()


def test_only_deploy_creates_stacks_and_only_those_its_listing_holds():
    """`upsert` (pulumi/actions v7.0.0 action.yml: "Create the stack if it currently does not exist";
    src/main.ts: LocalWorkspace.createOrSelectStack) on the deploys alone, whose matrices are the listing's."""
    for name in ("pull-request.yml", "deploy.yml", "drift.yml", "engine.yml"):
        for job_name, job in load(name)["jobs"].items():
            for step in job.get("steps") or ():
                if not str(step.get("uses", "")).startswith("pulumi/actions@"):
                    continue
                if name == "deploy.yml":
                    assert step["with"]["upsert"] is True and step["with"]["stack-name"] == "${{ matrix.stack }}"
                    assert job["strategy"]["matrix"] == {"include": f"${{{{ fromJSON(needs.stacks.outputs.{job_name}) }}}}"}
                else:
                    assert "upsert" not in step.get("with", {}), f"{name} {job_name} must never create a stack"


def fake_pulumi(folder: Path, stacks: list[str]) -> str:
    """A PATH whose `pulumi` answers `stack ls --json` with `stacks` and fails any other command."""
    folder.mkdir()
    listing = json.dumps([{"name": s, "current": False} for s in stacks])
    script = folder / "pulumi"
    script.write_text(f"#!/bin/sh\n[ \"$*\" = 'stack ls --json' ] || exit 9\nprintf '%s\\n' '{listing}'\n")
    script.chmod(0o755)
    return f"{folder}:{os.environ['PATH']}"


@pytest.mark.parametrize(("stack", "known"), [("prod", "true"), ("newstack", "false")])
def test_a_stack_the_backend_lacks_gets_a_notice_not_a_preview(tmp_path: Path, stack: str, known: str):
    output = tmp_path / "output"
    path = fake_pulumi(tmp_path / "bin", ["organization/ascend-fleet/prod", "staging"])
    script = step_script("pull-request.yml", "plan", "Does the backend hold the stack?")
    proc = run_script(tmp_path, script, PATH=path, STACK=stack, GITHUB_OUTPUT=str(output))
    assert proc.returncode == 0, proc.stderr
    assert outputs(output) == {"known": known}
    assert ("::notice title=New stack newstack::" in proc.stdout) == (known == "false")


def test_a_new_shard_is_named_in_its_log_and_not_previewed(tmp_path: Path):
    script = step_script("pull-request.yml", "shard-preview", "pulumi preview --json")
    path = fake_pulumi(tmp_path / "bin", ["fleet-shard-0"])
    proc = run_script(tmp_path, script, PATH=path, STACK="fleet-shard-1", PARALLEL="12")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "previews" / "fleet-shard-1.json").exists()
    assert "holds no stack fleet-shard-1 yet" in (tmp_path / "previews" / "fleet-shard-1.log").read_text()
