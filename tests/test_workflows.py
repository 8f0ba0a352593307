"""The GitHub Actions workflows are code: schema-checked, audited, and held to our rules.

Every file in `.github/workflows/` must pass GitHub's workflow schema
(`check-jsonschema --builtin-schema vendor.github-workflows`, vendored, offline) and
`zizmor --offline` with no finding of medium severity or above, even under the
`auditor` persona. On top of that, the invariants the tools do not enforce: actions
pinned to full commit SHAs with the version in a comment, least privilege, no
expression expanded inside a shell script, secrets only through `env:`, prod behind an
approval environment, one deploy of a stack at a time.

The last tests run the same checks on a deliberately broken workflow, so a check that
silently stopped checking would be noticed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from ruamel.yaml import YAML

from cli.shard_comment import ARTIFACT
from tests.conftest import CI_TOOLS, require_binary

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_DIR = REPO / ".github" / "workflows"
WORKFLOWS = sorted([*WORKFLOW_DIR.glob("*.yml"), *WORKFLOW_DIR.glob("*.yaml")])
BIN = Path(sys.executable).parent
SEVERITIES = ["unknown", "informational", "low", "medium", "high"]
SHA = re.compile(r"^[0-9a-f]{40}$")
SECRET_REF = re.compile(r"^\$\{\{\s*secrets\.[A-Za-z0-9_]+\s*\}\}$")
PULUMI_VERSION_FILE = ".pulumi.version"
"""The Pulumi CLI's version, read by every pulumi/actions step (`pulumi-version-file`, pulumi/actions
v7.0.0 src/config.ts: the file's text, trimmed) and named by docs/getting-started.md."""
SAME_REPO = "github.event.pull_request.head.repo.full_name == github.repository"
"""The one test of a pull request from the repository itself: a fork's gets no secrets."""
# Permissions a job may be granted for writing, and why.
ALLOWED_WRITES = {"pull-requests"}  # PR comments: the allocation diff and the preview


def load(path: Path) -> dict[str, Any]:
    # ruamel reads YAML 1.2, where `on:` is the string "on", not the boolean True.
    return YAML(typ="safe").load(path.read_text())


def tool(name: str) -> str:
    exe = BIN / name
    if not exe.exists():
        pytest.fail(f"{name} is not installed next to {sys.executable}; run `make .venv/.installed-dev`")
    return str(exe)


def ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


# --- the checks, as functions returning problems, so they can be tested too ---


def schema_problems(path: Path) -> list[str]:
    result = subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return [] if result.returncode == 0 else [(result.stdout + result.stderr).strip()]


def zizmor_findings(path: Path, persona: str = "auditor", min_severity: str = "medium") -> list[str]:
    result = subprocess.run(
        [tool("zizmor"), "--offline", "--no-progress", "--strict-collection", "--persona", persona,
         "--format", "json", str(path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    try:
        findings = json.loads(result.stdout)
    except json.JSONDecodeError:
        return [f"zizmor did not audit {path.name} (exit {result.returncode}): {result.stderr.strip()[-2000:]}"]
    floor = SEVERITIES.index(min_severity)
    out = []
    for f in findings:
        severity = f["determinations"]["severity"].lower()
        if SEVERITIES.index(severity) < floor:
            continue
        where = f["locations"][0]["concrete"]["location"]["start_point"]
        out.append(f"{path.name}:{where['row'] + 1}: {f['ident']} ({severity}): {f['desc']}")
    return out


def walk(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from walk(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, (*path, i))


def jobs(wf: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return wf.get("jobs") or {}


def steps(wf: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, job in jobs(wf).items():
        for step in job.get("steps") or ():
            yield name, step


def pinning_problems(text: str) -> list[str]:
    """Every remote `uses:` is `owner/repo[/path]@<40-hex sha> # <version>`."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"^\s*(?:-\s+)?uses:\s*['\"]?([^'\"\s#]+)['\"]?\s*(#\s*(\S.*))?$", line)
        if not m:
            continue
        ref, comment = m.group(1), m.group(3)
        if ref.startswith("./"):
            continue
        if ref.startswith("docker://"):
            if "@sha256:" not in ref:
                out.append(f"line {n}: {ref} is not pinned to an image digest")
            continue
        _, _, version = ref.partition("@")
        if not SHA.match(version):
            out.append(f"line {n}: {ref} is not pinned to a full commit SHA")
        elif not comment:
            out.append(f"line {n}: {ref} has no `# vX.Y.Z` comment naming the pinned version")
    return out


def permission_problems(wf: dict[str, Any]) -> list[str]:
    out = []
    top = wf.get("permissions")
    if top is None:
        out.append("no top-level `permissions:` (the default token is read-write in many repositories)")
    elif isinstance(top, str):
        out.append(f"top-level permissions is `{top}`; use {{}} or `contents: read`")
    elif any(v == "write" for v in top.values()):
        out.append(f"top-level permissions grant write ({top}); grant it to the job that needs it")
    for name, job in jobs(wf).items():
        perms = job.get("permissions")
        if perms is None and "uses" not in job:
            out.append(f"job {name} does not declare its permissions")
        elif isinstance(perms, str):
            out.append(f"job {name} has permissions `{perms}`")
        elif perms:
            for scope, level in perms.items():
                if level == "write" and scope not in ALLOWED_WRITES:
                    out.append(f"job {name} may write {scope}, which no job here needs")
    return out


def script_problems(wf: dict[str, Any]) -> list[str]:
    """Expressions are expanded before the shell runs: in a script they are code injection
    waiting for a branch name or PR title. Everything reaches scripts through env:."""
    return [
        f"job {job} step {step.get('name') or step.get('uses') or '?'}: `${{{{ }}}}` inside run:"
        for job, step in steps(wf)
        if "${{" in str(step.get("run", ""))
    ]


def secret_problems(wf: dict[str, Any]) -> list[str]:
    out = []
    for path, value in walk(wf):
        if not isinstance(value, str) or "secrets." not in value:
            continue
        where = ".".join(str(p) for p in path)
        if len(path) < 2 or path[-2] != "env":
            out.append(f"{where}: secrets may only be read into an env: variable")
        elif not SECRET_REF.match(value.strip()):
            out.append(f"{where}: `{value}` should be exactly ${{{{ secrets.NAME }}}}")
    if "secrets: inherit" in json.dumps(wf) or any(
        job.get("secrets") == "inherit" for job in jobs(wf).values()
    ):
        out.append("a job passes `secrets: inherit`")
    return out


def checkout_problems(wf: dict[str, Any]) -> list[str]:
    return [
        f"job {job}: actions/checkout without persist-credentials: false"
        for job, step in steps(wf)
        if str(step.get("uses", "")).startswith("actions/checkout@")
        and (step.get("with") or {}).get("persist-credentials") is not False
    ]


def all_rule_problems(path: Path) -> list[str]:
    wf = load(path)
    return [
        *pinning_problems(path.read_text()),
        *permission_problems(wf),
        *script_problems(wf),
        *secret_problems(wf),
        *checkout_problems(wf),
    ]


def environment_name(job: dict[str, Any]) -> str | None:
    env = job.get("environment")
    return env.get("name") if isinstance(env, dict) else env


def pulumi_steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in job.get("steps") or () if str(s.get("uses", "")).startswith("pulumi/actions@")]


# --- every workflow ---------------------------------------------------------


def test_the_four_workflows_exist():
    assert {"pull-request.yml", "deploy.yml", "drift.yml", "engine.yml"} <= {p.name for p in WORKFLOWS}


@pytest.mark.parametrize("path", WORKFLOWS, ids=ids(WORKFLOWS))
def test_the_workflow_matches_githubs_workflow_schema(path: Path):
    assert schema_problems(path) == []


@pytest.mark.parametrize("path", WORKFLOWS, ids=ids(WORKFLOWS))
def test_zizmor_finds_nothing_of_medium_severity_or_above_even_as_an_auditor(path: Path):
    assert zizmor_findings(path, persona="auditor", min_severity="medium") == []


@pytest.mark.parametrize("path", WORKFLOWS, ids=ids(WORKFLOWS))
def test_zizmor_finds_nothing_at_all_with_its_default_persona(path: Path):
    assert zizmor_findings(path, persona="regular", min_severity="unknown") == []


@pytest.mark.parametrize("path", WORKFLOWS, ids=ids(WORKFLOWS))
def test_every_action_is_pinned_to_a_commit_sha_with_its_version_in_a_comment(path: Path):
    assert pinning_problems(path.read_text()) == []


@pytest.mark.parametrize("path", WORKFLOWS, ids=ids(WORKFLOWS))
def test_permissions_are_empty_at_the_top_and_granted_per_job_never_write_all(path: Path):
    assert permission_problems(load(path)) == []
    assert "write-all" not in path.read_text()


@pytest.mark.parametrize("path", WORKFLOWS, ids=ids(WORKFLOWS))
def test_no_expression_is_expanded_inside_a_shell_script(path: Path):
    assert script_problems(load(path)) == []


@pytest.mark.parametrize("path", WORKFLOWS, ids=ids(WORKFLOWS))
def test_secrets_reach_steps_only_through_env(path: Path):
    assert secret_problems(load(path)) == []


@pytest.mark.parametrize("path", WORKFLOWS, ids=ids(WORKFLOWS))
def test_checkout_never_leaves_the_token_in_the_git_config(path: Path):
    assert checkout_problems(load(path)) == []


@pytest.mark.parametrize("path", WORKFLOWS, ids=ids(WORKFLOWS))
def test_every_job_has_a_timeout(path: Path):
    assert [n for n, job in jobs(load(path)).items() if "timeout-minutes" not in job and "uses" not in job] == []


def test_each_action_is_pinned_to_the_same_commit_in_every_workflow():
    pins: dict[str, set[str]] = {}
    for path in WORKFLOWS:
        for ref in re.findall(r"uses:\s*([\w.-]+/[\w./-]+)@([0-9a-f]{40})", path.read_text()):
            pins.setdefault(ref[0], set()).add(ref[1])
    assert {action: shas for action, shas in pins.items() if len(shas) > 1} == {}


def test_no_workflow_runs_untrusted_pull_request_code_with_secrets():
    for path in WORKFLOWS:
        triggers = load(path)["on"]
        names = [triggers] if isinstance(triggers, str) else list(triggers)
        assert "pull_request_target" not in names, path.name
        assert "workflow_run" not in names, path.name


def actionlint_problems(path: Path) -> list[str]:
    """actionlint's findings (expressions, contexts, `needs`, matrix and output names, and shellcheck on
    every `run:` script), one per line."""
    shellcheck = require_binary("shellcheck", "shellcheck")
    actionlint = require_binary("actionlint", "actionlint", build="scripts/build-ci-tools.sh", where=CI_TOOLS)
    result = subprocess.run(
        [actionlint, "-no-color", "-oneline", "-shellcheck", shellcheck, str(path)],
        capture_output=True, text=True, timeout=120, cwd=path.parent,
    )  # fmt: skip
    return result.stdout.splitlines() or ([] if result.returncode == 0 else [result.stderr.strip()])


@pytest.mark.parametrize("path", WORKFLOWS, ids=ids(WORKFLOWS))
def test_actionlint_with_shellcheck_finds_nothing(path: Path):
    assert actionlint_problems(path) == []


def test_actionlint_catches_a_script_that_reuses_an_array_as_a_string_and_an_unknown_output(tmp_path: Path):
    path = tmp_path / "lint.yml"
    path.write_text(
        "name: lint\non: push\npermissions: {}\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n"
        "      - run: |\n          xs=(a b)\n          xs=\"$(echo c)\"\n          echo \"$xs\"\n"
        "  b:\n    needs: a\n    runs-on: ubuntu-24.04\n    if: needs.a.outputs.missing != ''\n    steps:\n      - run: 'true'\n"
    )
    problems = "\n".join(actionlint_problems(path))
    assert "SC2178" in problems and 'property "missing" is not defined' in problems


def test_every_pulumi_step_installs_the_cli_version_of_the_one_file_the_sdk_pin_and_the_docs_agree_on():
    version = (REPO / PULUMI_VERSION_FILE).read_text().strip()
    steps_seen = [s for path in WORKFLOWS for _, s in steps(load(path)) if str(s.get("uses", "")).startswith("pulumi/actions@")]
    assert steps_seen and all(s["with"]["pulumi-version-file"] == PULUMI_VERSION_FILE for s in steps_seen)
    assert all("pulumi-version" not in s["with"] for s in steps_seen)
    assert version == pinned_versions()["pulumi"], "the CLI and the Python SDK of requirements.txt are one version"
    guide = (REPO / "docs" / "getting-started.md").read_text()
    assert f"--version {version}" in guide and f"pulumi-v{version}-linux-x64.tar.gz" in guide


def test_the_getting_started_page_names_the_plugin_versions_requirements_txt_pins():
    guide = " ".join((REPO / "docs" / "getting-started.md").read_text().split())
    pins = pinned_versions()
    assert f"docker {pins['pulumi-docker']}, command {pins['pulumi-command']}" in guide
    assert f"pulumi plugin install resource docker {pins['pulumi-docker']}" in guide
    assert f"pulumi plugin install resource command {pins['pulumi-command']}" in guide
    assert f"expected to have version >={pins['pulumi-docker']}" in guide


def fork_runs(job: dict[str, Any], step: dict[str, Any]) -> bool:
    """Whether a fork's pull request runs the step: unless its job or itself is conditioned on the
    pull request coming from this repository (directly, or through the job's `SAME_REPO` env)."""
    same_repo_env = (job.get("env") or {}).get("SAME_REPO") == f"${{{{ {SAME_REPO} }}}}"
    for condition in (str(job.get("if", "")), str(step.get("if", ""))):
        if SAME_REPO in condition or (same_repo_env and "env.SAME_REPO == 'true'" in condition):
            return False
    return True


def secret_steps(wf: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Every step that reads a secret (secrets reach steps only through env:), with its job."""
    for name, job in jobs(wf).items():
        for step in job.get("steps") or ():
            if "secrets." in json.dumps(step.get("env") or {}):
                yield name, job, step


@pytest.mark.parametrize("path", WORKFLOWS, ids=ids(WORKFLOWS))
def test_a_forks_pull_request_runs_no_step_that_needs_a_secret(path: Path):
    wf = load(path)
    if "pull_request" not in wf["on"]:
        return
    assert [f"{n}: {s.get('name') or s.get('uses')}" for n, job, s in secret_steps(wf) if fork_runs(job, s)] == []


def test_a_forks_pull_request_is_told_once_what_is_skipped_and_why():
    wf = load(WORKFLOW_DIR / "pull-request.yml")
    [notice] = [s for _, s in steps(wf) if "::notice title=Pull request from a fork::" in str(s.get("run", ""))]
    assert notice["if"] == SAME_REPO.replace("==", "!=")
    assert "SSH agent" in notice["run"] and "pulumi preview" in notice["run"] and "job summaries" in notice["run"]


def test_the_fork_check_sees_a_secret_step_without_the_guard():
    job = {"env": {"SAME_REPO": f"${{{{ {SAME_REPO} }}}}"}}
    assert fork_runs(job, {"env": {"K": "${{ secrets.K }}"}})
    assert not fork_runs(job, {"if": "env.SAME_REPO == 'true' && !matrix.local"})
    assert not fork_runs({"if": f"x && {SAME_REPO}"}, {})
    assert fork_runs({}, {"if": "env.SAME_REPO == 'true'"}), "SAME_REPO must be the job's own test"


# --- pull-request.yml -------------------------------------------------------


def test_pull_requests_to_main_run_the_tests_with_the_simulated_hosts_required():
    wf = load(WORKFLOW_DIR / "pull-request.yml")
    assert wf["on"]["pull_request"]["branches"] == ["main"]
    test_job = jobs(wf)["test"]
    scripts = "\n".join(str(s.get("run", "")) for s in test_job["steps"])
    # .ci/run installs sshd, busybox-static and iproute2, starts dockerd, runs `make test`.
    assert ".ci/run" in scripts or "make test" in scripts
    assert "ASCEND_FLEET_REQUIRE_SIMHOST=1" in scripts
    assert scripts.count("sudo ") == 1 and "LD_LIBRARY_PATH" in scripts


def test_pull_requests_post_the_allocation_diff_and_preview_only_the_touched_stacks():
    wf = load(WORKFLOW_DIR / "pull-request.yml")
    plan = jobs(wf)["plan"]
    assert plan["needs"] == "changes"
    assert plan["strategy"]["matrix"] == {"include": "${{ fromJSON(needs.changes.outputs.stacks) }}"}
    scripts = "\n".join(str(s.get("run", "")) for s in plan["steps"])
    assert '--against "origin/${BASE_REF}"' in scripts and "--format markdown" in scripts
    checkout = next(s for s in plan["steps"] if str(s.get("uses", "")).startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == 0, "plan --against needs the base branch's history"
    [install, preview] = pulumi_steps(plan)
    assert "command" not in install["with"] and preview["with"]["command"] == "preview"
    assert preview["with"]["comment-on-pr"] is True
    assert preview["with"]["stack-name"] == "${{ matrix.stack }}"
    assert "!matrix.local" in preview["if"], "a local stack (the dev laptop) gets the diff, no preview"
    assert "steps.known.outputs.known == 'true'" in preview["if"], "a stack the backend has never seen: a notice, no preview"
    assert plan["permissions"] == {"contents": "read", "pull-requests": "write"}
    changes = "\n".join(str(s.get("run", "")) for s in jobs(wf)["changes"]["steps"])
    for path in ("Pulumi.yaml", "allocation", "records", "views", "components", "ops", "cli", "__main__.py", "requirements.txt", "Pulumi.${fleet}.yaml"):
        assert path in changes, f"a change to {path} must trigger the plan"
    assert "-m allocation stacks" in changes, "the stacks are the repository's stack files"


def test_a_fleet_deployed_as_shards_is_not_previewed_as_one_stack_but_listed_apart():
    changes = jobs(load(WORKFLOW_DIR / "pull-request.yml"))["changes"]
    assert changes["outputs"]["fleets"] == "${{ steps.stacks.outputs.fleets }}"
    script = "\n".join(str(s.get("run", "")) for s in changes["steps"])
    assert "select(.stack == .fleet" in script and "select(.stack != .fleet" in script and 'echo "fleets=${fleets}"' in script


def test_only_the_changed_shards_are_previewed_each_into_an_artifact_with_read_only_permissions():
    wf = load(WORKFLOW_DIR / "pull-request.yml")
    listing, preview = jobs(wf)["shard-changes"], jobs(wf)["shard-preview"]
    assert listing["needs"] == "changes" and listing["if"] == "needs.changes.outputs.fleets != '[]'"
    script = "\n".join(str(s.get("run", "")) for s in listing["steps"])
    assert '--changed-since "origin/${BASE_REF}"' in script and "--check" in script
    assert next(s for s in listing["steps"] if "checkout" in str(s.get("uses")))["with"]["fetch-depth"] == 0
    assert listing["permissions"] == {"contents": "read"} and preview["permissions"] == {"contents": "read"}
    assert preview["strategy"]["matrix"]["include"] == "${{ fromJSON(needs.shard-changes.outputs.matrix) }}"
    assert preview["strategy"]["fail-fast"] is False and 1 <= preview["strategy"]["max-parallel"] <= 8
    assert "github.event.pull_request.head.repo.full_name == github.repository" in preview["if"], "forks get no secrets"
    assert environment_name(preview) == "preview"
    runs = "\n".join(str(s.get("run", "")) for s in preview["steps"])
    assert 'pulumi preview --stack "$STACK" --json --parallel "$PARALLEL"' in runs
    assert '> "previews/${STACK}.json" 2> "previews/${STACK}.log"' in runs
    assert all("command" not in s["with"] for s in pulumi_steps(preview)), "the action only installs the CLI"
    [upload] = [s for s in preview["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    assert upload["with"]["name"] == "preview-${{ matrix.stack }}" and upload["with"]["path"] == "previews/"
    assert upload["if"] == "${{ !cancelled() }}", "a failed preview's error output reaches the comment"


def test_one_comment_per_fleet_has_the_diff_and_the_previews_under_the_stacks_own_marker():
    wf = load(WORKFLOW_DIR / "pull-request.yml")
    job = jobs(wf)["shard-comment"]
    assert set(job["needs"]) == {"changes", "shard-changes", "shard-preview"}
    assert "!cancelled()" in job["if"] and "needs.shard-changes.result == 'success'" in job["if"]
    assert job["permissions"] == {"contents": "read", "pull-requests": "write"}
    [download] = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/download-artifact@")]
    assert download["with"] == {"pattern": "preview-*", "path": "previews", "merge-multiple": True}
    runs = "\n".join(str(s.get("run", "")) for s in job["steps"])
    assert '--changed-since "origin/${BASE_REF}" --comment previews' in runs
    plan_runs = "\n".join(str(s.get("run", "")) for s in jobs(wf)["plan"]["steps"])
    assert 'MARKER="<!-- ascend-fleet:allocation-diff:${fleet} -->"' in runs
    assert 'MARKER="<!-- ascend-fleet:allocation-diff:${STACK} -->"' in plan_runs, "one marker scheme: one comment per stack"
    assert '[ "$SAME_REPO" = true ] || continue' in runs, "a fork's token cannot comment: job summary only"
    assert not any(s.get("with", {}).get("comment-on-pr") for n in ("shard-preview", "shard-comment") for s in jobs(wf)[n]["steps"])


def test_the_whole_comment_of_each_fleet_is_uploaded_as_the_artifact_its_cuts_name():
    job = jobs(load(WORKFLOW_DIR / "pull-request.yml"))["shard-comment"]
    runs = "\n".join(str(s.get("run", "")) for s in job["steps"])
    assert '--comment previews --whole-comment "comments/${fleet}.md"' in runs and "mkdir -p previews comments" in runs
    [upload] = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    assert upload["with"] == {"name": ARTIFACT, "path": "comments/"} and upload["if"] == "${{ !cancelled() }}"
    names = [s.get("name") for s in job["steps"]]
    assert names.index(upload["name"]) > names.index("One comment per fleet")


# --- deploy.yml -------------------------------------------------------------


MATRIX_STACK = "${{ matrix.stack }}"


def test_deploys_go_to_staging_then_to_every_other_stack_behind_the_production_environment():
    wf = load(WORKFLOW_DIR / "deploy.yml")
    assert wf["on"]["push"]["branches"] == ["main"]
    staging, production = jobs(wf)["staging"], jobs(wf)["production"]
    assert staging["needs"] == "stacks" and production["needs"] == ["stacks", "staging"]
    assert "needs.staging.result == 'success'" in production["if"] and "!cancelled()" in production["if"]
    assert environment_name(staging) == "staging" and environment_name(production) == "production"
    for job in (staging, production):
        [up] = pulumi_steps(job)
        assert up["with"]["command"] == "up" and up["with"]["stack-name"] == MATRIX_STACK
    lister = "\n".join(str(s.get("run", "")) for s in jobs(wf)["stacks"]["steps"])
    assert "-m allocation stacks" in lister and '--check' in lister


def test_each_deploy_runs_its_stacks_shards_side_by_side_each_with_a_parallel_for_every_container():
    wf = load(WORKFLOW_DIR / "deploy.yml")
    for name in ("staging", "production"):
        job = jobs(wf)[name]
        assert 1 <= job["strategy"]["max-parallel"] <= 8 and job["strategy"]["fail-fast"] is False
        [up] = pulumi_steps(job)
        assert up["with"]["parallel"] == "${{ matrix.parallel }}"


def test_two_deploys_of_one_stack_never_overlap_and_never_cancel_each_other():
    """Every job that runs `pulumi up` holds the stack's one group; the deploy matrices never share a
    stack (tests/test_workflow_stacks.py runs their listing)."""
    for path in WORKFLOWS:
        for name, job in jobs(load(path)).items():
            if not [s for s in pulumi_steps(job) if s["with"].get("command") == "up"]:
                continue
            conc = job.get("concurrency")
            assert isinstance(conc, dict), f"{path.name} job {name} runs pulumi up without a concurrency group"
            assert conc.get("cancel-in-progress") is False, "cancelling a pulumi up leaves a stack half-updated"
            assert conc["group"] == f"deploy-{MATRIX_STACK}", "one group per stack, whichever job and run deploys it"


# --- drift.yml --------------------------------------------------------------


def test_drift_runs_daily_and_on_demand_for_the_listed_stacks():
    wf = load(WORKFLOW_DIR / "drift.yml")
    assert wf["on"]["schedule"][0]["cron"].split()[2:] == ["*", "*", "*"]
    assert "workflow_dispatch" in wf["on"]
    job = jobs(wf)["drift"]
    assert job["needs"] == "stacks" and job["strategy"]["matrix"] == {"include": "${{ fromJSON(needs.stacks.outputs.matrix) }}"}
    assert job["strategy"]["fail-fast"] is False
    assert job["concurrency"]["group"] == f"drift-{MATRIX_STACK}" and job["concurrency"]["cancel-in-progress"] is False


def test_drift_compares_with_the_hosts_without_writing_state_and_runs_doctor():
    job = jobs(load(WORKFLOW_DIR / "drift.yml"))["drift"]
    (pulumi,) = pulumi_steps(job)
    # `command: refresh` would write the refreshed state back before failing.
    assert pulumi["with"]["command"] == "preview"
    assert pulumi["with"]["refresh"] is True
    assert pulumi["with"]["expect-no-changes"] is True
    assert pulumi["with"]["stack-name"] == MATRIX_STACK and pulumi["with"]["parallel"] == "${{ matrix.parallel }}"
    doctor = next(s for s in job["steps"] if "allocation doctor" in str(s.get("run", "")))
    assert "--stack" in doctor["run"]
    assert "!cancelled()" in doctor["if"], "doctor must run even when pulumi found drift"


def test_ssh_keys_are_written_private_and_never_printed():
    for path in WORKFLOWS:
        for job, step in steps(load(path)):
            script = str(step.get("run", ""))
            if "SSH_PRIVATE_KEY" not in script:
                continue
            assert "umask 077" in script, f"{path.name} {job}"
            assert re.search(r"(echo|cat)\s+\"?\$SSH_PRIVATE_KEY", script) is None
            assert "set -x" not in script


# --- engine.yml -------------------------------------------------------------


def pinned_versions() -> dict[str, str]:
    """requirements.txt's `name==version` pins."""
    pins = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        name, sep, version = line.split("#")[0].strip().partition("==")
        if sep:
            pins[name.lower()] = version
    return pins


def test_the_engine_suite_runs_on_pull_requests_and_nightly_with_every_scenario_required():
    wf = load(WORKFLOW_DIR / "engine.yml")
    assert wf["on"]["pull_request"]["branches"] == ["main"]
    assert wf["on"]["schedule"][0]["cron"].split()[2:] == ["*", "*", "*"]
    (job,) = jobs(wf).values()
    scripts = "\n".join(str(s.get("run", "")) for s in job["steps"])
    assert ".ci/run test-engine" in scripts and "ASCEND_FLEET_REQUIRE_ENGINE=1" in scripts
    assert "secrets." not in json.dumps(load(WORKFLOW_DIR / "engine.yml")), "the suite needs no secret"


def test_the_engine_suite_installs_the_cli_and_plugin_versions_requirements_txt_pins():
    (job,) = jobs(load(WORKFLOW_DIR / "engine.yml")).values()
    (install,) = pulumi_steps(job)
    assert "command" not in install["with"], "without `command` the action only installs the CLI"
    pins = pinned_versions()
    assert install["with"] == {"pulumi-version-file": PULUMI_VERSION_FILE}
    assert (REPO / PULUMI_VERSION_FILE).read_text().strip() == pins["pulumi"]
    scripts = "\n".join(str(s.get("run", "")) for s in job["steps"])
    assert f"pulumi plugin install resource docker {pins['pulumi-docker']}" in scripts
    assert f"pulumi plugin install resource command {pins['pulumi-command']}" in scripts


# --- the checks themselves catch a broken workflow -------------------------

BROKEN = """\
name: broken
on: pull_request_target
permissions: write-all
jobs:
  build:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
        with:
          ref: ${{ github.event.pull_request.head.sha }}
      - run: echo "${{ github.event.pull_request.title }}" ${{ secrets.TOKEN }}
"""


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    path = tmp_path / ".github" / "workflows" / "broken.yml"
    path.parent.mkdir(parents=True)
    path.write_text(BROKEN)
    return path


def test_the_checks_reject_a_workflow_with_every_mistake_we_guard_against(broken: Path):
    idents = {line.split(": ")[1].split(" ")[0] for line in zizmor_findings(broken)}
    assert {"template-injection", "unpinned-uses", "dangerous-triggers"} <= idents
    problems = "\n".join(all_rule_problems(broken))
    assert "not pinned to a full commit SHA" in problems
    assert "top-level permissions is `write-all`" in problems
    assert "inside run:" in problems
    assert "secrets may only be read into an env: variable" in problems
    assert "persist-credentials" in problems
    assert "does not declare its permissions" in problems


def test_a_workflow_that_breaks_githubs_schema_is_rejected(tmp_path: Path):
    path = tmp_path / "typo.yml"
    path.write_text("name: typo\non: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    step:\n      - run: 'true'\n")
    assert schema_problems(path) != []
    assert zizmor_findings(path)[0].startswith("zizmor did not audit")


def test_a_pin_without_its_version_comment_is_rejected():
    text = "    steps:\n      - uses: actions/checkout@de0fac2e4500dabe0009e67214ff5f5447ce83dd\n"
    assert pinning_problems(text) == [
        "line 2: actions/checkout@de0fac2e4500dabe0009e67214ff5f5447ce83dd has no `# vX.Y.Z` comment naming the pinned version"
    ]


@pytest.mark.parametrize("name", ["deploy.yml", "drift.yml"])
def test_every_pulumi_job_runs_doctor_after_pulumi_so_a_failed_start_fails_the_job(name: str):
    for job_name, job in jobs(load(WORKFLOW_DIR / name)).items():
        runs = [str(s.get("run", "")) for s in job["steps"]]
        uses = [str(s.get("uses", "")) for s in job["steps"]]
        if not any(u.startswith("pulumi/actions@") for u in uses):
            continue
        pulumi_at = max(i for i, u in enumerate(uses) if u.startswith("pulumi/actions@"))
        doctor_at = [i for i, r in enumerate(runs) if "-m allocation doctor --stack" in r]
        assert doctor_at and doctor_at[-1] > pulumi_at, job_name
        assert "continue-on-error" not in job["steps"][doctor_at[-1]], job_name


@pytest.mark.parametrize("path", WORKFLOWS, ids=ids(WORKFLOWS))
def test_every_job_that_reaches_hosts_gives_all_ssh_clients_one_agent(path: Path):
    for job_name, job in jobs(load(path)).items():
        runs = " ".join(str(s.get("run", "")) for s in job["steps"])
        if "ASCEND_FLEET_SSH_PRIVATE_KEY" not in str(job):
            continue
        assert job["env"]["SSH_AUTH_SOCK"].startswith("/"), job_name
        assert 'ssh-agent -a "$SSH_AUTH_SOCK"' in runs and "ssh-add" in runs, job_name
        assert "IdentityFile" not in runs, "a key file would reach the system ssh only"
