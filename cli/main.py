"""`python -m allocation`: plan, pin, check and export a stack's fleet, without Pulumi.

`plan`, `pin`, `render` and `endpoints` need no credentials and touch no host. Every
FleetError becomes one readable paragraph on stderr and exit code 1; usage
errors exit 2. What reaches hosts (`doctor`, `status`, `logs`, `profile`, `calibrate`) lives in `ops/`, the formats
`render` writes in `views/exports/`; both are dispatched to from here.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

from records.deployment import Deployment
from records.pipeline import deployment_of, plan_of
from allocation.config import ModelProfile
from allocation.config_errors import field_aliases
from allocation.errors import ConfigError, FleetError, printable
from allocation.version import VERSION
from views.report import FORMATS, plan_json, render_plan
from cli.stackfile import PROJECT_ROOT, StackFile, locate, stack_document, stack_values

DASHBOARD = "grafana-dashboard.json"

MAX_ERROR = 4000

STACKS_HELP = (
    "print the stacks this repository declares (each Pulumi.<stack>.yaml but the shard files) as JSON, one row per "
    "stack a deploy runs: [{fleet, stack, parallel, local}]; the workflows plan, preview, deploy and check for drift "
    "what it lists"
)


def _stack_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--stack", help="stack name: reads Pulumi.<NAME>.yaml at the project root (default prod)")
    group.add_argument("--config", metavar="PATH", help="any stack file, e.g. /tmp/Pulumi.test.yaml")
    parser.add_argument(
        "--stack-name", metavar="NAME",
        help="with --config: the stack to plan the file as (default: NAME of a Pulumi.<NAME>.yaml, else the file name)",
    )  # fmt: skip


def _profile_description() -> str:
    """What `profile` reads and writes; the keys are the config model's, so the text cannot fall behind."""
    keys = ", ".join(k for k in field_aliases(ModelProfile) if k != "unverified")
    return (
        "Reads the model folder each service's model names (a replicated service once, on its first "
        "replica's host): its config.json (the language model's fields under text_config for a "
        "vision-language model) and the weights' bytes as stored (metadata.total_size of "
        "model.safetensors.index.json, else the header of every *.safetensors file). The folders are read "
        "on each service's host over SSH, one round trip per host as doctor connects, or on this machine "
        "for a unix:// Docker host, or under --models-root DIR here. Writes: replaces the profile: key of "
        f"every service in the stack file (the keys it can hold: {keys}; a hand-written unverified note "
        "goes with the old profile), changing no other byte of the file; when any model cannot be read, "
        "every failure is listed and nothing is written. plan then sizes each KV cache and every "
        "memoryFraction: auto from the profiles."
    )


CALIBRATE_DESCRIPTION = (
    "Reads, on each host over SSH (one round trip per host, as doctor connects), every container that runs "
    "vllm serve, running or stopped, the compose containers a host replaces included: the lines vLLM-Ascend "
    "logged at its last start (weights, peak activation and non-torch memory, NPU graph memory and KV cache per "
    "card). Each server is matched to the planned service of its host by model and served model name, and taken "
    "only when it ran at the planned tensorParallelSize, capturing graphs as the plan does. Writes, changing no "
    "other byte of the stack file: each measured service's measured: (the figures, the container, the line and "
    "its date) and graphMemoryGiB. A log line that is not whole, as vLLM-Ascend writes it, is refused with the "
    "container and the line, and nothing is written. plan then takes the weights and the runtime overhead from "
    "the measurement and says which figures are measured and which are estimates."
)


def _shard_parsers(sub: argparse._SubParsersAction) -> None:
    """`shards` and `move-host`: the commands of a fleet deployed as shards (docs/shards.md)."""
    shards = sub.add_parser("shards", help="a fleet deployed as shards: write one stack file per shard beside the fleet's")
    _stack_args(shards)
    only = shards.add_mutually_exclusive_group()
    only.add_argument("--check", action="store_true", help="write nothing; exit 1 naming every shard file that is not current")
    only.add_argument(
        "--matrix", action="store_true",
        help="write nothing; print the stacks a deploy runs as JSON ([{stack, parallel}]: each shard, or the stack "
        "itself when it is not deployed as shards), parallel being a --parallel at which no container waits",
    )  # fmt: skip
    only.add_argument(
        "--changed-since", metavar="REF",
        help="write nothing; print the --matrix rows of the shards whose slice (what the shard's program deploys) "
        "differs from the one at git revision REF, and on stderr which shards are unchanged",
    )  # fmt: skip
    shards.add_argument(
        "--comment", metavar="DIR", type=Path,
        help="with --changed-since: print the pull-request comment instead: plan --against REF, then each changed "
        "shard's preview read from DIR/<shard stack>.json (pulumi preview --json) and .log, then the unchanged shards, "
        "cut to fit GitHub's limit on a comment",
    )  # fmt: skip
    shards.add_argument(
        "--whole-comment", metavar="FILE", type=Path,
        help="with --comment: also write the whole comment, nothing cut, to FILE (the pull-request workflow uploads it "
        "as the artifact the comment names where it cuts)",
    )  # fmt: skip

    move = sub.add_parser(
        "move-host", help="a fleet deployed as shards: move a host's resources to another shard's stack, re-creating nothing"
    )
    _stack_args(move)
    move.add_argument("host", help="the host to move")
    move.add_argument("--to", type=int, required=True, metavar="K", help="the shard it moves to")


def _shard_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shard", type=int, metavar="K", help="a fleet deployed as shards: shard K's hosts only (a shard's stack: its own)"
    )


def _live_parsers(sub: argparse._SubParsersAction) -> None:
    """`status`, `logs` and `endpoints`: what runs where, a container's log, the URLs clients use."""
    status = sub.add_parser(
        "status",
        help="what runs where: each host's planned containers with their cards, state and health, uptime, image and "
        "endpoint, and each router's workers (exit 0 all running and healthy, 1 not, 2 a host not read)",
    )  # fmt: skip
    _stack_args(status)
    status.add_argument("services", nargs="*", metavar="SERVICE", help="only these services' containers (a replicated one's replicas and router)")
    status.add_argument("--format", choices=("table", "json"), default="table")
    _shard_arg(status)

    logs = sub.add_parser("logs", help="the last lines of a planned container's log, read on its host over SSH")
    _stack_args(logs)
    logs.add_argument("service", metavar="SERVICE", help="a service, or a replica, router, member, prefill or decode instance or proxy by its name (bge-m3-2, bge-m3-router, deepseek-r1-node1, qwen-pd-prefill, qwen-pd-proxy)")
    logs.add_argument("--replica", type=int, metavar="N", help="replica N (from 1) of a replicated SERVICE")
    logs.add_argument("--tail", type=int, default=100, metavar="N", help="the last N lines, 1 to 10000 (default 100)")
    logs.add_argument(
        "--since", metavar="WHEN",
        help="only lines since WHEN: a duration back from the host's clock (10m, 1h30m), a Unix time or a date (2026-01-01T13:23:37Z)",
    )  # fmt: skip

    endpoints = sub.add_parser("endpoints", help="the URLs clients use: each service's, a replicated service's router's")
    _stack_args(endpoints)
    endpoints.add_argument("--format", choices=("table", "json"), default="table")
    _shard_arg(endpoints)


def _sizing_parsers(sub: argparse._SubParsersAction) -> None:
    """`profile` and `calibrate`: the commands that read what sizes a model into the stack file."""
    profile = sub.add_parser(
        "profile",
        help="read each service's model folder and write its profile into the stack file",
        description=_profile_description(),
    )
    _stack_args(profile)
    profile.add_argument("--models-root", metavar="DIR", type=Path, help="read /path/of/model under DIR here, not on the hosts")

    calibrate = sub.add_parser(
        "calibrate",
        help="read what each host's vLLM containers logged at start into the stack file (measured: and graphMemoryGiB)",
        description=CALIBRATE_DESCRIPTION,
    )
    _stack_args(calibrate)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m allocation", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="print the traceback of an unexpected error")
    parser.add_argument("--version", action="version", version=f"ascend-fleet {VERSION}")
    sub = parser.add_subparsers(dest="command", required=True)

    plan = sub.add_parser("plan", help="show the allocation of a stack")
    _stack_args(plan)
    plan.add_argument("--format", choices=FORMATS, default="table")
    plan.add_argument(
        "--wide", action="store_true", help="table and markdown: one table per host, capacity beside the port windows"
    )
    plan.add_argument("--against", metavar="REF", help="show what changes against the plan at a git revision")

    pin = sub.add_parser("pin", help="write the current plan into the stack file as pins")
    _stack_args(pin)

    doctor = sub.add_parser("doctor", help="check the live hosts of a stack against the plan (exit 1 on findings)")
    _stack_args(doctor)
    doctor.add_argument("--format", choices=("table", "json"), default="table")
    _shard_arg(doctor)
    doctor.add_argument(
        "--kubeconfig", metavar="PATH", help="target kubernetes: the cluster's kubeconfig (default $KUBECONFIG, then ~/.kube/config)"
    )

    _live_parsers(sub)
    _shard_parsers(sub)
    sub.add_parser("stacks", help=STACKS_HELP, description=STACKS_HELP)

    _sizing_parsers(sub)

    render = sub.add_parser(
        "render",
        help="the planned containers as a compose file, docker run script or Kubernetes objects; or Prometheus and Grafana files",
    )
    _stack_args(render)
    render.add_argument("--format", choices=("compose", "docker-run", "prometheus", "kubernetes"), required=True)
    render.add_argument(
        "--output",
        metavar="DIR",
        help="compose (one file per host), prometheus, or kubernetes (one file per object): the directory to write the files to",
    )

    schema = sub.add_parser(
        "schema",
        help="write schema/stack.schema.json, schema/plan.schema.json and docs/configuration.md from the config model",
        description="Reads the config model (allocation/config.py) and the plan JSON's shape; writes the stack "
        "file's JSON Schema, the plan JSON's schema and docs/configuration.md in the repository. No stack file "
        "is read and no host is touched.",
    )
    schema.add_argument("--check", action="store_true", help="write nothing; exit 1 naming every file that differs")
    return parser


def _locate(args: argparse.Namespace) -> StackFile:
    """The stack file the arguments name; one line on stderr when its stack name is a guess."""
    stack_file = locate(args.stack, args.config, stack_name=args.stack_name)
    if stack_file.guessed:
        print(
            f"note: {printable(stack_file.path.name)} is not named Pulumi.<stack>.yaml, so it is planned as stack "
            f"{stack_file.stack}; --stack-name NAME chooses another",
            file=sys.stderr,
        )
    return stack_file


def _deployment(args: argparse.Namespace) -> tuple[Deployment, StackFile]:
    stack_file = _locate(args)
    return deployment_of(stack_file.stack, stack_values(stack_file)), stack_file


def _plan(args: argparse.Namespace) -> int:
    deployment, stack_file = _deployment(args)
    # Each warning once: the table and the markdown end with them (a pull request's reader sees them
    # there); the JSON carries them under `warnings` for a program and on stderr for its reader, and
    # the diff of `--against` has them on stderr only. Notes (where a figure comes from) are no call to
    # act: the table's and the markdown's own section before the warnings, the JSON's `notes`, never stderr.
    if args.against is not None or args.format == "json":
        for warning in deployment.plan.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    if args.against is None:
        print(render_plan(deployment, args.format, wide=args.wide))
        return 0
    from cli.revision import plan_at_revision
    from views.diff import diff_plans, render_diff

    config = Path(args.config).absolute() if args.config else None  # a link keeps its name: the stack's
    as_named = None if args.stack_name is None else f"Pulumi.{args.stack_name}.yaml"  # the old side: the same stack
    old = plan_at_revision(PROJECT_ROOT, args.against, stack_file.stack if config is None else None, config, as_named)
    print(render_diff(diff_plans(old, plan_json(deployment), against=args.against), args.format))
    return 0


def _pin(args: argparse.Namespace) -> int:
    from cli.pin import pin_stack_file, pinned_line
    from cli.stack_editor import read_bytes

    stack_file = _locate(args)
    read = read_bytes(stack_file.path)  # the pins are written only if the file still holds these bytes
    deployment = deployment_of(stack_file.stack, stack_values(stack_file, data=read))
    for hd in deployment.hosts:  # once pinned, the newcomer looks as if it ran: say it now
        for held in hd.held_cards:
            print(f"host {hd.name}: must stop: {held.text()}")
    print(pinned_line(stack_file.path, pin_stack_file(stack_file.path, deployment.plan, read)))
    return 0


# Every command but `plan` imports its modules when run: the Grafana SDK alone takes 0.12 s to import,
# and `plan` (run in every pull request, and by every shard, on fleets of thousands of services) needs
# none of them; `plan --against` imports the diff when asked.


def _render(args: argparse.Namespace) -> int:
    from cli.safe_write import write_set
    from views.exports import dashboard, prometheus
    from views.exports.render import compose_files, render

    if args.format == "docker-run" and args.output is not None:
        raise ConfigError(
            "render --format docker-run prints to standard output; --output is for --format compose or prometheus: "
            "redirect the output to a file instead"
        )
    one_stream = args.format in ("docker-run", "kubernetes") or (args.format == "compose" and args.output is None)
    if not one_stream and (args.output is None or not str(args.output)):
        raise ConfigError(f"render --format {args.format} writes several files: give the directory with --output DIR")
    deployment = _deployment(args)[0]
    if args.format == "kubernetes":  # a multi-host or disaggregated service stops it, nothing written (views.exports.kubernetes)
        return _render_kubernetes(args, deployment)
    if one_stream:
        print(render(deployment, args.format), end="")  # one stream, every host: as it always was
        return 0
    if args.format == "compose":
        files = compose_files(deployment)
    else:
        files = prometheus.files(deployment) | {DASHBOARD: dashboard.render(deployment)}
    write_set(Path(args.output), files)
    print(f"wrote {', '.join(sorted(files))} to {args.output}")
    return 0


def _render_kubernetes(args: argparse.Namespace, deployment: Deployment) -> int:
    """One YAML stream on standard output, or one file per object in --output DIR; either way the
    cards the scheduler does not account for (no DRA) are named on standard error too."""
    from cli.safe_write import write_set
    from views.exports import kubernetes_yaml
    from views.exports.kubernetes import manifests

    for line in kubernetes_yaml.unaccounted(manifests(deployment)):
        print(f"warning: unaccounted by the scheduler: {line}", file=sys.stderr)
    if args.output is None:
        print(kubernetes_yaml.stream(deployment), end="")
        return 0
    files = kubernetes_yaml.files(deployment)
    write_set(Path(args.output), files)
    print(f"wrote {len(files)} files to {args.output}")
    return 0


def _scoped(args: argparse.Namespace) -> Deployment:
    """The stack's deployment, or the shard's that `--shard K` names or the stack file is."""
    deployment = _deployment(args)[0]
    fleet = deployment.plan.fleet
    index = args.shard if args.shard is not None or fleet.shard_of is None else fleet.shard_of.index
    if index is None:
        return deployment
    if fleet.shards is None:
        raise ConfigError(f"{args.command} --shard {index}: stack {deployment.stack} is not deployed as shards (no ascend-fleet:shards)")
    return deployment.shard(index)


def _doctor(args: argparse.Namespace) -> int:
    from ops import doctor

    deployment = _scoped(args)
    fleet = deployment.plan.fleet
    if args.kubeconfig is not None and fleet.target != "kubernetes":
        raise ConfigError(f"doctor --kubeconfig: stack {deployment.stack} targets {fleet.target}, not kubernetes; its hosts are read over SSH")
    if fleet.target == "kubernetes":
        text, code = _doctor_kubernetes(deployment, args)
    else:
        text, code = doctor.run(deployment, args.format)
    print(text)
    return code


def _over_ssh(deployment: Deployment, command: str, instead: str) -> None:
    """`status` and `logs` read hosts over SSH: on the kubernetes target, one paragraph saying what to run."""
    fleet = deployment.plan.fleet
    if fleet.target == "kubernetes":
        raise ConfigError(
            f"{command}: stack {deployment.stack} targets kubernetes, whose containers run in pods that the cluster "
            f"reports, not on hosts read over SSH: run {instead} (namespace {fleet.kubernetes.namespace}); doctor "
            f"--stack {deployment.stack} checks them against the plan through the cluster's API"
        )


def _status(args: argparse.Namespace) -> int:
    from ops import doctor
    from ops.requested import services_named

    deployment = _scoped(args)
    services = services_named(deployment, args.services) if args.services else None
    _over_ssh(deployment, "status", f"kubectl get pods -o wide -n {deployment.plan.fleet.kubernetes.namespace} -l ascend-fleet/instance")
    text, code = doctor.run_status(deployment, args.format, services=services)
    print(text)
    return code


def _logs(args: argparse.Namespace) -> int:
    from ops import logs
    from ops.requested import target

    deployment = _deployment(args)[0]
    since = None if args.since is None else logs.checked_since(args.since)
    lines = logs.checked_tail(args.tail)
    where = target(deployment, args.service, args.replica)
    _over_ssh(deployment, "logs", f"kubectl logs -n {deployment.plan.fleet.kubernetes.namespace} deployment/{where.name}")
    shown, cut = logs.read(where, lines, since)
    if cut:
        print(f"note: the last {lines} lines of {where.container} are more than {logs.LOG_BYTES} bytes: their start is left out", file=sys.stderr)
    if not shown:
        print(f"note: the log of {where.container} on host {where.host.name} has no lines" + (f" since {since}" if since else ""), file=sys.stderr)
    if shown:
        print("\n".join(shown))
    return 0


def _endpoints(args: argparse.Namespace) -> int:
    from views.endpoints import render

    print(render(_scoped(args), args.format))
    return 0


def _doctor_kubernetes(deployment: Deployment, args: argparse.Namespace) -> tuple[str, int]:
    from ops import doctor, kube_api

    try:
        return doctor.run_kubernetes(deployment, kube_api.kubeconfig_path(args.kubeconfig), args.format)
    except kube_api.KubeError as exc:
        raise ConfigError(f"doctor --stack {deployment.stack} (target kubernetes): {exc}") from None


def _profile(args: argparse.Namespace) -> int:
    from cli.stack_editor import read_bytes, set_service_keys
    from ops.models import profiles, unsized_values

    stack_file = _locate(args)
    read = read_bytes(stack_file.path)  # the profiles are written only if the file still holds these bytes
    deployment = deployment_of(stack_file.stack, unsized_values(stack_values(stack_file, data=read)))
    changed = set_service_keys(stack_file.path, profiles(deployment, args.models_root), read=read, command="profile")
    print(f"profiled {stack_file.path}: {', '.join(changed) if changed else 'nothing new'}")
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from cli.stack_editor import read_bytes, set_service_keys
    from ops.calibrate import calibrate, summary
    from ops.models import unsized_values

    stack_file = _locate(args)
    read = read_bytes(stack_file.path)  # the figures are written only if the file still holds these bytes
    deployment = deployment_of(stack_file.stack, unsized_values(stack_values(stack_file, data=read)))
    found = calibrate(deployment)
    changed = set_service_keys(stack_file.path, found.keys, read=read, command="calibrate")
    print(f"calibrated {stack_file.path}: {', '.join(changed) if changed else 'nothing new'}")
    for line in summary(found):
        print(f"  {line}")
    return 0


def _schema(args: argparse.Namespace) -> int:
    from cli import schema

    print(schema.run(args.check))
    return 0


def _shards(args: argparse.Namespace) -> int:
    from cli.safe_write import write_set
    from cli.shards import deploy_matrix, not_current, shard_files, stale
    from cli.stack_editor import read_bytes

    if args.comment is not None and args.changed_since is None:
        raise ConfigError("shards --comment DIR assembles the comment of a pull request: give --changed-since REF too")
    if args.whole_comment is not None and args.comment is None:
        raise ConfigError("shards --whole-comment FILE writes the comment of a pull request uncut: give --changed-since REF --comment DIR too")
    if args.changed_since is not None:
        return _changed_shards(args)
    stack_file = _locate(args)
    read = read_bytes(stack_file.path)
    plan = plan_of(stack_file.stack, stack_values(stack_file, data=read))
    if args.matrix:
        print(json.dumps(deploy_matrix(stack_file.stack, plan)))
        return 0
    files = shard_files(stack_file, read.decode("utf-8-sig"), plan)
    folder = stack_file.path.parent
    gone = stale(folder, stack_file.stack, files)
    if args.check:
        differ = [why for n, text in files.items() if (why := not_current(folder, n, text))]
        if differ or gone:
            print(
                f"shard files of fleet {stack_file.stack} are not current: "
                + "; ".join(differ + [f"{n} holds no host now" for n in gone])
                + f"; run python -m allocation shards --stack {stack_file.stack}",
                file=sys.stderr,
            )
            return 1
        print(f"shard files of fleet {stack_file.stack} are current: {', '.join(files)}")
        return 0
    write_set(folder, files)
    print(f"wrote {', '.join(files)} to {folder}")
    if gone:
        print(
            f"warning: {', '.join(gone)}: no host of fleet {stack_file.stack} is in these shards now; destroy their "
            "stacks (pulumi destroy) and delete the files",
            file=sys.stderr,
        )
    return 0


def _stacks(args: argparse.Namespace) -> int:
    from cli.stacks import rows

    print(json.dumps(rows(PROJECT_ROOT)))
    return 0


def _changed_shards(args: argparse.Namespace) -> int:
    """`shards --changed-since REF [--comment DIR]`: the preview matrix of the shards a change reaches,
    or the one comment that reports them (docs/shards.md, "Pull requests")."""
    from cli import shard_changes, shard_comment
    from cli.revision import plan_at_revision
    from cli.safe_write import write_file
    from cli.shards import preview_matrix, require_fleet, shard_stack
    from cli.stack_editor import read_bytes
    from views.diff import diff_plans, render_diff

    if args.config is not None:
        raise ConfigError(
            f"shards --changed-since reads the fleet's file at {args.changed_since} by its stack name: "
            "give --stack NAME (the file Pulumi.NAME.yaml at the project root), not --config"
        )
    stack_file = _locate(args)
    read = read_bytes(stack_file.path)
    deployment = deployment_of(stack_file.stack, stack_values(stack_file, data=read))
    require_fleet(stack_file, deployment.plan.fleet)
    new = plan_json(deployment)
    old = plan_at_revision(PROJECT_ROOT, args.changed_since, stack_file.stack, None, flag="--changed-since")
    changes = shard_changes.since(
        PROJECT_ROOT, args.changed_since, stack_file.stack, old, new, stack_document(stack_file.path, read)
    )
    if args.comment is not None:
        diff = render_diff(diff_plans(old, new, against=args.changed_since), "markdown")
        stacks = [shard_stack(stack_file.stack, k) for k in changes.changed]
        previews = {s: (_text_or_none(args.comment / f"{s}.json"), _text_or_none(args.comment / f"{s}.log")) for s in stacks}
        if args.whole_comment is not None:
            write_file(args.whole_comment, shard_comment.comment(stack_file.stack, changes, diff, previews, limit=None).encode())
        print(shard_comment.comment(stack_file.stack, changes, diff, previews), end="")
        return 0
    print(json.dumps(preview_matrix(stack_file.stack, deployment.plan, changes.changed)))
    unchanged = ", ".join(map(str, changes.unchanged)) or "none"
    print(f"shards of fleet {stack_file.stack} unchanged since {args.changed_since}: {unchanged}", file=sys.stderr)
    return 0


def _text_or_none(path: Path) -> str | None:
    """A preview job's file, None when it uploaded none (its job failed or was skipped)."""
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None


def _move_host(args: argparse.Namespace) -> int:
    from cli.shards import shard_stack
    from ops import state_move

    deployment, stack_file = _deployment(args)
    fleet = deployment.plan.fleet
    if fleet.shards is None or fleet.shard_of is not None:
        raise ConfigError(f"move-host: name the fleet's own stack file (ascend-fleet:shards), not {stack_file.path.name}")
    hd = next((hd for hd in deployment.hosts if hd.name == args.host), None)
    roots = state_move.host_roots(deployment, args.host)
    assert hd is not None and hd.plan.shard is not None
    if hd.plan.shard == args.to:
        raise ConfigError(f"move-host: host {args.host} is already in shard {args.to}")
    source, dest = shard_stack(stack_file.stack, hd.plan.shard), shard_stack(stack_file.stack, args.to)
    moved = state_move.run(stack_file.path.parent, roots, source, dest)
    print(f"moved {len(moved)} resources of host {args.host} from {source} to {dest}; now pin it (shard: {args.to}) "
          f"in {stack_file.path.name} and run python -m allocation shards --stack {stack_file.stack}")  # fmt: skip
    return 0


COMMANDS = {
    "plan": _plan, "pin": _pin, "doctor": _doctor, "render": _render, "profile": _profile, "calibrate": _calibrate, "schema": _schema,
    "shards": _shards, "stacks": _stacks, "move-host": _move_host, "status": _status, "logs": _logs, "endpoints": _endpoints,
}  # fmt: skip


def _paragraph(text: str) -> str:
    """One line, of a length a terminal and a CI log can show."""
    text = printable(" ".join(text.split()))
    return text if len(text) <= MAX_ERROR else text[: MAX_ERROR - 30] + f" ... ({len(text)} characters)"


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if getattr(args, "stack_name", None) is not None and args.config is None:  # `schema` reads no stack
        parser.error("--stack-name names the stack of a --config file; without --config the file is Pulumi.<stack>.yaml")
    try:
        return COMMANDS[args.command](args)
    except FleetError as err:
        print(f"error: {_paragraph(str(err))}", file=sys.stderr)
    except OSError as err:
        where = f"{err.filename}: " if err.filename else ""
        print(f"error: {_paragraph(where + (err.strerror or str(err)))}", file=sys.stderr)
    except Exception as err:  # noqa: BLE001 - the last line of defence: one paragraph, not a traceback
        if args.debug:
            traceback.print_exc()
        detail = f"{type(err).__name__}: {err}"
        print(
            f"error: unexpected {_paragraph(detail)}. This is a bug in ascend-fleet; "
            "run again with --debug for the traceback and report it.",
            file=sys.stderr,
        )
    return 1

