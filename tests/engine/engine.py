"""Driving the real Pulumi CLI against a stack of this program, and reading what the engine reports.

The suite runs `pulumi` as a subprocess, the commands an operator and the workflows type
(`pulumi up`, `preview --json`, `refresh`, `destroy`), rather than through the Automation
API: the Automation API runs the same CLI underneath, and a failing step is easier to read
as the command line and its own output than as an exception of a wrapper. Every command
writes the engine's event log (`--event-log`, one JSON event per line); `Outcome` reads it.

The project is a copy of the program in a temporary folder (its stack file and the
passphrase salt must not land in the repository), with a local file backend, a
passphrase secrets provider and no plugin downloads: the plugins are the ones on PATH
(ambient plugins) or installed beforehand with `pulumi plugin install`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sim.host import SimHost
from tests.support.sim_stacks import prod_values_on_the_simulated_host
from views.diff import diff_plans

REPO = Path(__file__).resolve().parents[2]
PROGRAM = ("Pulumi.yaml", "__main__.py", "allocation", "records", "views", "components", "ops", "cli")
PASSPHRASE = "ascend-fleet engine tests"
NAMESPACE = "ascend-fleet"
CONTAINER = "docker:index/container:Container"

# Steps that put a new resource in an old one's place (delete_before_replace runs them as
# delete-replaced, then create-replacement; a preview shows `replace`).
REPLACE_OPS = frozenset({"replace", "create-replacement", "delete-replaced", "discard-replaced"})


class EngineFailed(AssertionError):
    """A pulumi command that should have succeeded did not; the message carries its output."""


@dataclass
class Outcome:
    """What one pulumi command did, from its exit code, its output and its event log."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    events: list[dict[str, Any]]
    seconds: float

    @property
    def ops(self) -> dict[str, set[str]]:
        """URN -> the step operations the engine reported for it. A refresh announces every resource
        as `refresh` (resourcePreEvent) and says what it found in resOutputsEvent (`same`, `update`,
        `delete`), so both events count."""
        out: dict[str, set[str]] = {}
        for event in self.events:
            for kind in ("resourcePreEvent", "resOutputsEvent"):
                meta = (event.get(kind) or {}).get("metadata")
                if meta:
                    out.setdefault(meta["urn"], set()).add(meta["op"])
        return out

    def urns(self, *ops: str, type_: str | None = CONTAINER) -> set[str]:
        """URNs of resources (of `type_`, default containers) with any of these step operations."""
        return {
            urn for urn, done in self.ops.items()
            if done & set(ops) and (type_ is None or urn_type(urn) == type_)
        }  # fmt: skip

    def positions(self, kind: str) -> dict[str, int]:
        """URN -> the place in the event log of its first `kind` event (`resourcePreEvent`: its step
        starts; `resOutputsEvent`: its step is done): the order the engine ran the steps in."""
        out: dict[str, int] = {}
        for i, event in enumerate(self.events):
            meta = (event.get(kind) or {}).get("metadata")
            if meta:
                out.setdefault(meta["urn"], i)
        return out

    def changed(self) -> dict[str, set[str]]:
        """Every resource with a step other than `same` (a refresh's own `refresh` and a `read` change nothing)."""
        return {urn: ops for urn, ops in self.ops.items() if ops - {"same", "read", "refresh"}}

    @property
    def summary(self) -> dict[str, int]:
        """The engine's closing count of resource changes (summaryEvent.resourceChanges)."""
        for event in self.events:
            if "summaryEvent" in event:
                return dict(event["summaryEvent"].get("resourceChanges") or {})
        return {}

    def diagnostics(self, severity: str = "error") -> list[str]:
        """Messages the engine, the program or a provider reported with this severity."""
        return [
            e["diagnosticEvent"]["message"] for e in self.events
            if "diagnosticEvent" in e and e["diagnosticEvent"].get("severity") == severity
        ]  # fmt: skip

    def diffs(self) -> dict[str, set[str]]:
        """URN -> the properties whose difference the engine reported (a refresh: what drifted)."""
        out: dict[str, set[str]] = {}
        for event in self.events:
            for kind in ("resourcePreEvent", "resOutputsEvent"):
                meta = (event.get(kind) or {}).get("metadata") or {}
                if meta.get("diffs"):
                    out.setdefault(meta["urn"], set()).update(meta["diffs"])
        return out

    def explain(self) -> str:
        return (
            f"$ {' '.join(self.argv)}  (exit {self.returncode}, {self.seconds:.0f}s)\n"
            f"--- stdout (last 6000 chars)\n{self.stdout[-6000:]}\n--- stderr (last 3000 chars)\n{self.stderr[-3000:]}"
        )


def steps_started(log: Path) -> set[str]:
    """The names of the resources whose step has started, by an event log written so far (its last
    line may still be half-written)."""
    lines = log.read_text().splitlines(keepends=True) if log.exists() else []
    events = [json.loads(line) for line in lines if line.endswith("\n") and line.strip()]
    return {urn_name(e["resourcePreEvent"]["metadata"]["urn"]) for e in events if "resourcePreEvent" in e}


def urn_type(urn: str) -> str:
    """The resource type of a URN (`urn:pulumi:stack::project::parent$type::name`)."""
    return urn.split("::")[2].split("$")[-1]


def urn_name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


@dataclass
class Project:
    """A temporary copy of the program with one stack, a file backend and a passphrase."""

    root: Path
    stack: str
    env: dict[str, str]
    history: list[Outcome] = field(default_factory=list)

    @classmethod
    def create(cls, workdir: Path, stack: str, values: dict[str, Any], base_env: dict[str, str]) -> Project:
        root = workdir / "project"
        root.mkdir(parents=True)
        for name in PROGRAM:
            source = REPO / name
            if source.is_dir():
                shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, root / name)
        # Pulumi.yaml's `virtualenv: .venv`: the repository's environment, as `make` builds it.
        (root / ".venv").symlink_to((REPO / ".venv").resolve())
        state = workdir / "state"
        state.mkdir()
        env = {
            **base_env,
            "PULUMI_BACKEND_URL": state.as_uri(),
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "PULUMI_SKIP_UPDATE_CHECK": "1",
            # Use the plugins on PATH or already installed; never download one.
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_SKIP_CONFIRMATIONS": "1",
            # `--event-log` exists only with the debug commands on (pulumi v3.274.0
            # pkg/cmd/pulumi/operations/up.go:1023); the Automation API turns them on the same way.
            "PULUMI_DEBUG_COMMANDS": "true",
            "NO_COLOR": "1",
        }
        env.pop("PULUMI_IGNORE_AMBIENT_PLUGINS", None)
        env.pop("PULUMI_ACCESS_TOKEN", None)
        project = cls(root=root, stack=stack, env=env)
        project.cli("stack", "init", stack, "--secrets-provider", "passphrase")
        project.write_values(values)
        return project

    @property
    def stack_file(self) -> Path:
        return self.root / f"Pulumi.{self.stack}.yaml"

    def values(self) -> dict[str, Any]:
        """The stack file's `ascend-fleet:` values, namespace stripped."""
        config = (yaml.safe_load(self.stack_file.read_text()) or {}).get("config") or {}
        return {k.removeprefix(f"{NAMESPACE}:"): v for k, v in config.items() if k.startswith(f"{NAMESPACE}:")}

    def write_values(self, values: dict[str, Any]) -> None:
        """Replace the stack file's `ascend-fleet:` config, keeping what `stack init` wrote (the salt)."""
        doc = yaml.safe_load(self.stack_file.read_text()) if self.stack_file.exists() else {}
        doc = doc or {}
        doc["config"] = {f"{NAMESPACE}:{k}": v for k, v in values.items()}
        self.stack_file.write_text(yaml.safe_dump(doc, sort_keys=False))

    def edit(self, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Apply `change` to the stack's values in place, write them, return the old values."""
        old = self.values()
        new = json.loads(json.dumps(old))
        change(new)
        self.write_values(new)
        return old

    def cli(self, *args: str, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A pulumi command without an event log (stack init, outputs)."""
        proc = subprocess.run(
            ["pulumi", *args, "--non-interactive"], cwd=self.root, env=self.env,
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise EngineFailed(
                f"$ pulumi {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
            )
        return proc

    def run(self, command: str, *args: str, expect_success: bool = True, timeout: float = 1200) -> Outcome:
        """`pulumi COMMAND --stack S --yes ARGS` with an event log; fail with its output unless
        it exited as expected."""
        log = self.event_log(command)
        argv = ["pulumi", command, "--stack", self.stack, "--non-interactive", "--event-log", str(log), *args]
        if command in ("up", "refresh", "destroy"):
            argv.append("--yes")
        started = time.monotonic()
        proc = subprocess.run(
            argv, cwd=self.root, env=self.env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
        seconds = time.monotonic() - started
        events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []
        outcome = Outcome(argv, proc.returncode, proc.stdout, proc.stderr, events, seconds)
        self.history.append(outcome)
        if expect_success and proc.returncode != 0:
            raise EngineFailed(outcome.explain())
        if not expect_success and proc.returncode == 0:
            raise EngineFailed("expected a failure, but it succeeded\n" + outcome.explain())
        return outcome

    def event_log(self, command: str) -> Path:
        """Where the next `run` of `command` writes its event log. The CLI writes each event there as
        it happens (the Automation API reads it so: `_watch_logs` in pulumi/pulumi
        sdk/python/lib/pulumi/automation/_stack.py), so a test may read it while the command runs
        (`steps_started`)."""
        return self.root.parent / f"events-{len(self.history)}-{command}.jsonl"

    def preview_json(self, *args: str) -> dict[str, Any]:
        """`pulumi preview --json`: the engine's plan as one JSON document (steps, changeSummary)."""
        proc = self.cli("preview", "--stack", self.stack, "--json", *args, check=False)
        try:
            doc = json.loads(proc.stdout)
        except json.JSONDecodeError:
            raise EngineFailed(
                f"pulumi preview --json printed no JSON (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
            ) from None
        if proc.returncode != 0:
            diagnostics = json.dumps(doc.get("diagnostics"), indent=1)[-4000:]
            raise EngineFailed(f"pulumi preview --json exited {proc.returncode}:\n{diagnostics}\n{proc.stderr[-3000:]}")
        return doc

    def outputs(self) -> dict[str, Any]:
        return json.loads(self.cli("stack", "output", "--stack", self.stack, "--json", "--show-secrets").stdout)


def preview_steps(doc: dict[str, Any]) -> dict[str, str]:
    """URN -> op of every step of a `preview --json` document."""
    return {step["urn"]: step["op"] for step in doc.get("steps") or ()}


@dataclass(frozen=True)
class ContainerChanges:
    """What an engine plan does to the stack's containers, by container name."""

    created: frozenset[str]
    deleted: frozenset[str]
    replaced: frozenset[str]
    updated: frozenset[str]


def container_changes(doc: dict[str, Any]) -> ContainerChanges:
    """The containers a `preview --json` creates, deletes, replaces or updates in place."""
    by_op: dict[str, set[str]] = {}
    for urn, op in preview_steps(doc).items():
        if urn_type(urn) == CONTAINER:
            by_op.setdefault("replace" if op in REPLACE_OPS else op, set()).add(container_name(urn))
    return ContainerChanges(
        *(frozenset(by_op.get(op, ())) for op in ("create", "delete", "replace", "update"))
    )


def container_name(urn: str) -> str:
    """`qwen-vl` of `...$docker:index/container:Container::qwen-vl-container`."""
    return urn_name(urn).removesuffix("-container")


def apply_and_preview(
    project: Project, change: Callable[[dict[str, Any]], None]
) -> tuple[dict[str, Any], ContainerChanges]:
    """Edit the stack file, preview: (the old values, what the engine would do to the containers)."""
    old = project.edit(change)
    return old, container_changes(project.preview_json())


def missing_tools(pulumi: str | None, plugin_list: Iterable[dict[str, Any]]) -> list[str]:
    """Which of the CLI, the Python language host and the two resource plugins cannot be found.

    The language host and the plugins count when they are on PATH, next to the CLI (where the
    official tarball puts the language hosts), or installed (`pulumi plugin ls --json`)."""
    if pulumi is None:
        return ["pulumi (the Pulumi CLI, on PATH)"]
    beside = Path(pulumi).resolve().parent
    installed = {(p.get("kind"), p.get("name")) for p in plugin_list}
    wanted = {
        "pulumi-language-python": ("language", "python"),
        "pulumi-resource-docker": ("resource", "docker"),
        "pulumi-resource-command": ("resource", "command"),
    }
    missing = []
    for binary, key in wanted.items():
        found = shutil.which(binary) or ((beside / binary) if (beside / binary).exists() else None)
        if found is None and key not in installed:
            missing.append(f"{binary} (on PATH, or `pulumi plugin install {key[0]} {key[1]} VERSION`)")
        # The language host runs the program through this script beside it (the CLI's tarball has both).
        executor = Path(found).parent / "pulumi-language-python-exec" if found and key[0] == "language" else None
        if executor is not None and not executor.exists():
            missing.append(f"{executor} (the language host's executor script, shipped beside it)")
    return missing


def installed_plugins(pulumi: str) -> list[dict[str, Any]]:
    proc = subprocess.run([pulumi, "plugin", "ls", "--json"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "1"}, stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        return json.loads(proc.stdout) or [] if proc.returncode == 0 else []
    except json.JSONDecodeError:
        return []


def sim_stack_values(host: SimHost) -> dict[str, Any]:
    values = prod_values_on_the_simulated_host(host)
    values["defaults"] = {
        **values["defaults"],
        "startTimeoutSeconds": START_TIMEOUT,
        "stopGraceSeconds": 10,
        "shmSizeMiB": 64,
    }
    return values


def stack_has_resources(project: Project) -> bool:
    proc = project.cli("stack", "export", "--stack", project.stack, check=False)
    return proc.returncode == 0 and len(json.loads(proc.stdout).get("deployment", {}).get("resources") or []) > 1


def inspect(host: SimHost, name: str) -> dict[str, Any]:
    return json.loads(host.docker("inspect", name).stdout)[0]


def health(host: SimHost, name: str) -> str | None:
    proc = host.docker("inspect", "-f", "{{json .State}}", name, check=False)
    if proc.returncode != 0:
        return None
    state = json.loads(proc.stdout)
    return (state.get("Health") or {}).get("Status") if state.get("Running") else state.get("Status")


def plan_of(project: Project, values: dict[str, Any]) -> dict[str, Any]:
    """`python -m allocation plan --format json` of these values, in the project copy."""
    path = project.root.parent / f"Pulumi.{STACK}.yaml"  # same stem: the plan JSON names the stack
    path.write_text(json.dumps({"config": {f"ascend-fleet:{k}": v for k, v in values.items()}}))
    proc = subprocess.run(
        [sys.executable, "-m", "allocation", "plan", "--config", str(path), "--format", "json"],
        cwd=project.root, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def doctor_findings(project: Project) -> list[dict[str, Any]]:
    """Every finding of `python -m allocation doctor` on the stack's file, as its JSON lists them."""
    proc = subprocess.run(
        [sys.executable, "-m", "allocation", "doctor", "--config", str(project.stack_file), "--format", "json"],
        cwd=project.root, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    return [finding for host in json.loads(proc.stdout)["hosts"] for finding in host["findings"]]


@contextlib.contextmanager
def destroyed_after(project: Project, host: SimHost) -> Iterator[Project]:
    """The project, its stack destroyed and the simulated host reset when the block ends."""
    try:
        yield project
    finally:
        project.cli("destroy", "--stack", project.stack, "--yes", check=False)
        host.reset()


def assert_preview_changes_no_container(project: Project) -> None:
    """A `preview` of the stack as it stands creates, deletes, replaces and updates no container."""
    changes = container_changes(project.preview_json())
    assert (changes.created, changes.deleted, changes.replaced, changes.updated) == (frozenset(),) * 4, changes


def assert_doctor_clean(project: Project) -> None:
    """`doctor` on the stack finds nothing; each finding shown when it does."""
    findings = doctor_findings(project)
    assert findings == [], "\n".join(f"{f['kind']} ({f.get('service')}): {f['message']}" for f in findings)


def plan_diff(old: dict[str, Any], new: dict[str, Any]) -> tuple[set[str], set[str], set[str], set[str]]:
    """(added, removed, re-created, updated in place) services as the plan diff that `plan --against`
    prints reports them (views.diff); a capacity-only change touches no container."""
    diff = diff_plans(old, new)
    added = {s.name for s in diff.services if s.added}
    removed = {s.name for s in diff.services if s.removed}
    recreated = {s.name for s in diff.services if s.recreated}
    in_place = {s.name for s in diff.services if s.in_place and not s.recreated}
    return added, removed, recreated, in_place


def get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, resp.read()


STACK = "engine"


START_TIMEOUT = 150  # seconds: generous, on a loaded 2-core machine
