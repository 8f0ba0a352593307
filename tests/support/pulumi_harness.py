"""Run the real `__main__.py` under Pulumi's official mocks and record what the engine would see.

Each run happens in a fresh `contextvars.Context`: the Pulumi SDK keeps its
settings, root stack and config in context variables, so a fresh context is a
fresh program, and several stacks can run one after another in one process.
The program is started the way the Python language host starts it
(`run_in_stack(lambda: runpy.run_path(...))`), so stack exports are registered
as stack outputs. The monitor is `pulumi.runtime.mocks.MockMonitor` with every
request also recorded: the `RegisterResourceRequest` fields the SDK sends
(parent, provider, dependencies, deleteBeforeReplace) are the resource options
as the engine receives them, not a reimplementation of them.
"""

from __future__ import annotations

import contextvars
import gc
import hashlib
import json
import logging
import os
import re
import runpy
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pulumi
from pulumi.runtime import mocks as pulumi_mocks, rpc, settings
from pulumi.runtime.stack import run_in_stack
from pulumi.runtime.sync_await import _sync_await

PROJECT_ROOT = Path(__file__).resolve().parents[2]
MAIN = PROJECT_ROOT / "__main__.py"
PROJECT = "ascend-fleet"
NAMESPACE = "ascend-fleet"
SECRET_SIG = rpc._special_secret_sig
SIG_KEY = rpc._special_sig_key
FAKE_PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "ZmFrZS1rZXktZm9yLWFzY2VuZC1mbGVldC10ZXN0cy1vbmx5LW5vdC1hLXJlYWwta2V5\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)

# The sshd(8) man page's example ed25519 key shape; any valid public key line would do.
TEST_HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
CONTAINER = "docker:index/container:Container"
PROVIDER = "pulumi:providers:docker"
REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"
REMOTE_COMMAND = "command:remote:Command"
LOCAL_COMMAND = "command:local:Command"
MODEL_SERVICE = "ascend-fleet:index:ModelService"
ROUTER = "ascend-fleet:index:Router"
ASCEND_HOST = "ascend-fleet:index:AscendHost"
STACK_IN_URN = re.compile(r"urn:pulumi:[^:]+::|(?<=pulumi:pulumi:Stack::ascend-fleet-)[A-Za-z0-9_.-]+")

if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))


# The last line of records.router.build_script: the built image's id, by tag.
IMAGE_BUILT = re.compile(r"docker image inspect -f '\{\{\.Id\}\}' (\S+)\n?$")


def fake_image_id(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


class Mocks(pulumi.runtime.Mocks):
    """Resources echo their inputs; RemoteImage gets a deterministic image id; a container's id follows
    its docker name."""

    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[Optional[str], dict]:
        state = dict(args.inputs)
        if args.typ == REMOTE_IMAGE:
            name = args.inputs["name"]
            state["imageId"] = fake_image_id(name)
            state["repoDigest"] = f"{name.rsplit(':', 1)[0]}@{fake_image_id(name)}"
        if args.typ in (REMOTE_COMMAND, LOCAL_COMMAND):
            state.update(stdout="ok", stderr="")
            built = IMAGE_BUILT.search(args.inputs.get("create", ""))
            if built:  # the router image build prints the image id last, as `docker image inspect` would
                state.update(stdout=f"Successfully built\n{fake_image_id(built.group(1))}\n")
        if args.typ == CONTAINER:
            # Docker's id lives as long as the container, whose name a rename keeps (previousNames); the
            # engine keeps an aliased resource's id. `<name>-container-id`, as for any resource, otherwise.
            return f"{args.inputs['name']}-container-id", state
        return f"{args.name}-id", state

    def call(self, args: pulumi_mocks.MockCallArgs) -> tuple[dict, Optional[list]]:
        return {}, None


@dataclass(frozen=True)
class Registration:
    """One RegisterResource request, as the engine would receive it."""

    urn: str
    type: str
    name: str
    parent: str
    provider: str
    custom: bool
    dependencies: tuple[str, ...]
    delete_before_replace: bool
    custom_timeouts: dict[str, str]
    """create/update/delete as the engine receives them; empty strings when unset."""
    replace_on_changes: tuple[str, ...]
    error_hooks: tuple[str, ...]
    """Names of the error hooks bound to the resource (ResourceOptions.hooks.on_error)."""
    inputs: dict
    """Deserialized with secrets kept as `{sig: secret, value: ...}` wrappers."""
    aliases: tuple[dict, ...] = ()
    """The aliases the SDK sent, each `{"urn"}` or an alias spec `{"name", "type", "parentUrn", "noParent"}`
    (empty strings: the resource's own; the engine computes the old URN from them)."""

    @property
    def provider_urn(self) -> str:
        return self.provider.rsplit("::", 1)[0] if self.provider else ""


@dataclass
class Run:
    registrations: list[Registration] = field(default_factory=list)
    outputs: dict[str, dict] = field(default_factory=dict)
    """RegisterResourceOutputs per URN (components and the stack), secrets wrapped."""
    logs: list[str] = field(default_factory=list)
    stack_urn: str = ""

    def of_type(self, typ: str) -> list[Registration]:
        return [r for r in self.registrations if r.type == typ]

    def by_name(self, typ: str) -> dict[str, Registration]:
        return {r.name: r for r in self.of_type(typ)}

    def by_urn(self) -> dict[str, Registration]:
        return {r.urn: r for r in self.registrations}

    @property
    def stack_outputs(self) -> dict:
        return self.outputs.get(self.stack_urn, {})

    def containers(self) -> dict[str, dict]:
        """Container name -> its inputs, for comparing runs."""
        return {r.inputs["name"]: r.inputs for r in self.of_type(CONTAINER)}

    def registered(self) -> list[str]:
        """Each registration as the engine would get it, sorted, the stack's name taken out of every
        URN: the runs of a fleet's shards together against one stack's run (docs/shards.md)."""
        out = []
        for r in self.registrations:
            fields = [r.type, r.name, r.parent, r.provider, r.custom, sorted(r.dependencies), r.inputs, list(r.aliases)]
            out.append(STACK_IN_URN.sub("STACK", json.dumps(fields, sort_keys=True, default=str)))
        return sorted(out)


class RecordingMonitor(pulumi_mocks.MockMonitor):
    def __init__(self, mocks: pulumi.runtime.Mocks, run: Run) -> None:
        super().__init__(mocks)
        self._run = run
        self._lock = threading.Lock()

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        if request.type == "pulumi:pulumi:Stack":
            self._run.stack_urn = response.urn
            return response
        reg = Registration(
            urn=response.urn,
            type=request.type,
            name=request.name,
            parent=request.parent,
            provider=request.provider,
            custom=request.custom,
            dependencies=tuple(request.dependencies),
            delete_before_replace=request.deleteBeforeReplace,
            custom_timeouts={
                "create": request.customTimeouts.create,
                "update": request.customTimeouts.update,
                "delete": request.customTimeouts.delete,
            },
            replace_on_changes=tuple(request.replaceOnChanges),
            error_hooks=tuple(request.hooks.on_error) if request.HasField("hooks") else (),
            inputs=rpc.deserialize_properties(request.object, keep_unknowns=True),
            aliases=tuple(_alias(a) for a in request.aliases),
        )
        with self._lock:
            self._run.registrations.append(reg)
        return response

    def RegisterResourceOutputs(self, request):
        outputs = rpc.deserialize_properties(request.outputs, keep_unknowns=True)
        with self._lock:
            self._run.outputs[request.urn] = outputs
        return super().RegisterResourceOutputs(request)


def _alias(alias) -> dict:
    if alias.WhichOneof("alias") == "urn":
        return {"urn": alias.urn}
    spec = alias.spec
    return {"name": spec.name, "type": spec.type, "parentUrn": spec.parentUrn, "noParent": spec.noParent}


class _ListHandler(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(record.getMessage())


def config_from_values(values: dict[str, Any], private_key: Optional[str] = FAKE_PRIVATE_KEY) -> tuple[dict, list]:
    """The engine's view of a stack's config: `ascend-fleet:*` keys, values JSON-encoded
    (plain strings as they are), the private key as a secret."""
    config = {
        f"{NAMESPACE}:{key}": value if isinstance(value, str) else json.dumps(value)
        for key, value in values.items()
    }
    secret_keys = []
    if private_key is not None:
        config[f"{NAMESPACE}:sshPrivateKey"] = private_key
        secret_keys.append(f"{NAMESPACE}:sshPrivateKey")
    return config, secret_keys


_STACK_SENTINEL = object()


def _run_in_context(stack: str, config: dict, secret_keys: list, run: Run, main: Path) -> None:
    pulumi.runtime.set_all_config(config, secret_keys)
    logger = logging.getLogger(f"ascend-fleet-harness-{id(run)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(_ListHandler(run.logs))
    # set_mocks makes a root stack for test-style programs unless one exists; the
    # language host's run_in_stack below makes the program's own, so hold its place.
    settings.ROOT.set(_STACK_SENTINEL)  # type: ignore[arg-type]
    pulumi.runtime.set_mocks(
        Mocks(), project=PROJECT, stack=stack, preview=False, logger=logger,
        monitor=RecordingMonitor(Mocks(), run),
    )  # fmt: skip
    settings.ROOT.set(None)
    _sync_await(run_in_stack(lambda: runpy.run_path(str(main), run_name="__main__")))


def known_hosts_of(values: dict[str, Any]) -> str:
    """A known_hosts file naming every host of the values with TEST_HOST_KEY, as a CI runner's would."""
    lines = []
    for h in values.get("hosts", ()):
        port = h.get("sshPort", 22)
        name = h["address"] if port == 22 else f"[{h['address']}]:{port}"
        lines.append(f"{name} {TEST_HOST_KEY}")
    return "\n".join(lines) + "\n"


def run_program(
    stack: str,
    values: dict[str, Any],
    private_key: Optional[str] = FAKE_PRIVATE_KEY,
    known_hosts: Optional[str] = None,
    main: Path = MAIN,
) -> Run:
    """Run `__main__.py` (or another program, `main`) for one stack whose `ascend-fleet:` values
    (namespace stripped) are given; raise what the program raises (e.g. pulumi.RunError). The program runs
    with a HOME whose ~/.ssh/known_hosts is `known_hosts` (default: every host of the values)."""
    config, secret_keys = config_from_values(values, private_key)
    run = Run()
    with tempfile.TemporaryDirectory(prefix="ascend-fleet-home-") as home:
        (Path(home) / ".ssh").mkdir()
        (Path(home) / ".ssh/known_hosts").write_text(known_hosts_of(values) if known_hosts is None else known_hosts)
        saved = os.environ.get("HOME")
        os.environ["HOME"] = home
        # The program may tune the collector for its process (__main__.py does); the language
        # host's process ends with the program, so here each run gets the test process's back.
        thresholds = gc.get_threshold()
        try:
            contextvars.Context().run(_run_in_context, stack, config, secret_keys, run, main)
        finally:
            gc.set_threshold(*thresholds)
            os.environ["HOME"] = saved if saved is not None else ""
    return run


def is_secret_wrapper(value: Any) -> bool:
    return isinstance(value, dict) and value.get(SIG_KEY) == SECRET_SIG


def plain_occurrences(value: Any, needle: str, path: str = "") -> list[str]:
    """Paths where `needle` occurs in `value` outside any secret wrapper."""
    if is_secret_wrapper(value):
        return []
    if isinstance(value, str):
        return [path or "<value>"] if needle in value else []
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in plain_occurrences(v, needle, f"{path}.{k}")]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in plain_occurrences(v, needle, f"{path}[{i}]")]
    return []


def unwrap(value: Any) -> Any:
    """The value with secret wrappers replaced by what they hold."""
    if is_secret_wrapper(value):
        return unwrap(value.get("value"))
    if isinstance(value, dict):
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value


def project_config_problems(project: dict[str, Any]) -> list[str]:
    """Config entries of a Pulumi.yaml that the real CLI refuses before it runs anything.

    The mocks never read Pulumi.yaml; the CLI validates it against its project schema, where
    each `config:` entry is a string, an integer, a boolean, an array, or a declaration object
    (`value:`, `default:`, `type:`, ...): `sdk/go/common/workspace/project.json`, property
    `config.additionalProperties.oneOf` (pulumi v3.259.0; still so in the 3.274 CLI, which
    printed "#/config/memoryBudget: expected integer, but got number" for `memoryBudget: 0.95`).
    """
    declaration_keys = {"type", "items", "description", "secret", "default", "value"}
    problems = []
    for key, value in (project.get("config") or {}).items():
        if isinstance(value, (str, int, list)):  # bool is an int; a float is not
            continue
        if isinstance(value, dict) and set(value) <= declaration_keys:
            continue
        problems.append(f"config {key}: {value!r} is not a string, integer, boolean, array or declaration (`value:`)")
    return problems
