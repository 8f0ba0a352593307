"""Moving one host's resources from a shard stack to another, re-creating nothing (docs/shards.md).

`pulumi state move` cannot do it for this program. It moves the named resources and their children,
but it skips every provider among the children and copies it instead (pulumi/pulumi
`pkg/cmd/pulumi/state/state_move.go`: `ChildrenOf`, "if strings.HasPrefix(string(dep.Type),
providerPrefix) { continue }"; the copies are appended to the destination before the moved
resources). A host's docker provider is a child of its `AscendHost`, so the copy lands before its
parent and pulumi v3.274.0 refuses its own result ("failed to verify integrity of destination
snapshot: child resource ...sim02-docker's parent ...sim02 comes after it"); and were it accepted,
the source would keep a copy of the provider that its next `up` deletes.

`move_host` does the move on the two stacks' exported deployments (`pulumi stack export`): the
host's top-level resources and all their descendants, providers included, leave the source and are
appended to the destination in the source's order, their URNs and every reference to them (parent,
dependencies, property dependencies, provider) rewritten to the destination stack. A provider they
use that stays behind (the `command` default provider) is the destination's own when it has one of
the same URN, else a copy. It refuses, naming them, resources that already exist in the destination
and resources staying behind that depend on moved ones. `run` exports both stacks, imports the
destination first and then the source, so a failure half-way leaves the resources tracked (twice at
worst, as `pulumi state move` does), never lost.
"""

from __future__ import annotations

import copy
import json
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from allocation.errors import ConfigError
from records.deployment import Deployment

ROOT_TYPE = "pulumi:pulumi:Stack"
PROVIDER_PREFIX = "pulumi:providers:"


def _refs(res: dict[str, Any]) -> set[str]:
    """The URNs a resource refers to (parent, provider, dependencies, property dependencies)."""
    out = set(res.get("dependencies") or ())
    for deps in (res.get("propertyDependencies") or {}).values():
        out.update(deps)
    if res.get("parent"):
        out.add(res["parent"])
    if res.get("provider"):
        out.add(res["provider"].rsplit("::", 1)[0])
    return out


def _moved(resources: list[dict[str, Any]], roots: set[str]) -> set[str]:
    """URNs of the top-level resources named `roots` and all their descendants."""
    root_stack = next(r["urn"] for r in resources if r["type"] == ROOT_TYPE)
    moved = {r["urn"] for r in resources if r.get("parent") == root_stack and r["urn"].rsplit("::", 1)[1] in roots}
    for r in resources:  # parents come before their children in a snapshot
        if r.get("parent") in moved:
            moved.add(r["urn"])
    return moved


def move_host(
    source: dict[str, Any], dest: dict[str, Any], roots: Iterable[str], source_stack: str, dest_stack: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two deployments after moving the top-level resources named `roots` (and their
    descendants) from `source` to `dest`; the inputs are left untouched."""
    source, dest = copy.deepcopy(source), copy.deepcopy(dest)
    src, dst = source.get("resources") or [], dest.setdefault("resources", [])
    moved = _moved(src, set(roots))
    if not moved:
        raise ConfigError(f"stack {source_stack} holds none of {', '.join(sorted(roots))}: nothing to move")
    old, new = f"urn:pulumi:{source_stack}::", f"urn:pulumi:{dest_stack}::"
    dest_urns = {r["urn"]: r for r in dst}
    clash = sorted(u.replace(old, new, 1) for u in moved if u.replace(old, new, 1) in dest_urns)
    staying = [r for r in src if r["urn"] not in moved]
    needs = sorted(r["urn"] for r in staying if _refs(r) & moved)
    if clash or needs:
        raise ConfigError(
            f"moving {', '.join(sorted(roots))} from {source_stack} to {dest_stack}: "
            + "; ".join([f"{u} already exists in {dest_stack}" for u in clash] + [f"{u} stays and depends on a moved resource" for u in needs])
        )
    dest_root = next(r["urn"] for r in dst if r["type"] == ROOT_TYPE) if dst else f"{new}pulumi:pulumi:Stack::{dest_stack}"
    by_urn = {r["urn"]: r for r in src}
    rename: dict[str, str] = {u: u.replace(old, new, 1) for u in moved}
    provider_ref: dict[str, str] = {}
    for ref in sorted({r["provider"] for r in src if r["urn"] in moved and r.get("provider")}):
        urn, _, ident = ref.rpartition("::")
        if urn in moved:
            continue
        there = dest_urns.get(urn.replace(old, new, 1))
        if there is None:  # a copy of the provider; the source keeps its own for what stays
            there = dict(by_urn[urn], urn=urn.replace(old, new, 1), parent=dest_root)
            dst.append(there)
        provider_ref[ref] = f"{there['urn']}::{there.get('id', ident)}"
    for r in (r for r in src if r["urn"] in moved):
        dst.append(_rewritten(r, rename, provider_ref, dest_root))
    source["resources"] = staying
    return source, dest


def _rewritten(r: dict[str, Any], rename: dict[str, str], provider_ref: dict[str, str], dest_root: str) -> dict[str, Any]:
    out = dict(r, urn=rename[r["urn"]], parent=rename.get(r.get("parent", ""), dest_root))
    if r.get("dependencies"):
        out["dependencies"] = [rename[d] for d in r["dependencies"]]
    if r.get("propertyDependencies"):
        out["propertyDependencies"] = {k: [rename[d] for d in v] for k, v in r["propertyDependencies"].items()}
    if r.get("provider"):
        urn, _, ident = r["provider"].rpartition("::")
        out["provider"] = f"{rename[urn]}::{ident}" if urn in rename else provider_ref[r["provider"]]
    return out


def host_roots(deployment: Deployment, host: str) -> set[str]:
    """The names of a host's top-level components (components.fleet `build`): its AscendHost, its
    services' ModelServices, the routers it runs and its NPU exporter. A replicated service moves
    with all its hosts or not at all: refused here, naming it."""
    hd = next((hd for hd in deployment.hosts if hd.name == host), None)
    if hd is None:
        raise ConfigError(f"stack {deployment.stack} has no host {host}")
    routers = [rd for rd in deployment.routers if rd.plan.host_name == host]
    replicated = sorted({sd.plan.service.name for sd in hd.services if sd.plan.service.replicated} | {rd.plan.service.name for rd in routers})
    if replicated:
        raise ConfigError(
            f"host {host} runs replicated service(s) {', '.join(replicated)}, whose replicas and router live in one "
            "shard: move every host of the service together by hand (docs/shards.md), or move none"
        )
    return {host, *(sd.name for sd in hd.services), *([f"{host}-npu-exporter"] if hd.exporter is not None else [])}


def _pulumi(args: list[str], cwd: Path) -> str:
    proc = subprocess.run(["pulumi", *args, "--non-interactive"], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ConfigError(f"pulumi {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def run(project: Path, roots: Iterable[str], source_stack: str, dest_stack: str) -> list[str]:
    """Export both stacks, move, import the destination, then the source; the URNs moved."""
    exported = {s: json.loads(_pulumi(["stack", "export", "--stack", s, "--show-secrets"], project)) for s in (source_stack, dest_stack)}
    src, dst = move_host(exported[source_stack]["deployment"], exported[dest_stack]["deployment"], roots, source_stack, dest_stack)
    with tempfile.TemporaryDirectory(prefix="ascend-fleet-move-") as tmp:
        for stack, deployment in ((dest_stack, dst), (source_stack, src)):
            path = Path(tmp) / f"{stack}.json"
            path.write_text(json.dumps({**exported[stack], "deployment": deployment}))
            _pulumi(["stack", "import", "--stack", stack, "--file", str(path)], project)
    before = {r["urn"] for r in exported[dest_stack]["deployment"].get("resources") or ()}
    return sorted(r["urn"] for r in dst["resources"] if r["urn"] not in before)
