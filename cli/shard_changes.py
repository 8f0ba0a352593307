"""Which shards of a fleet deployed as shards a change reaches, so a pull request previews only those.

A shard's `pulumi preview` is worth its minutes only when what the shard's program would deploy
differs between the base revision and now. Every shard plans the whole fleet, so a file diff says
nothing about one shard: adding a host to shard 3 edits the fleet's file that every shard reads, and
changes the `fleetHash` in every shard's file, yet shard 0 deploys the same resources as before.
So each shard's *slice* is compared, as the program at both revisions would build it:

- the plan JSON of its hosts (each with its services and NPU exporter: everything their containers
  receive) and of the routers on them;
- its hosts' own entries in the stack file, which say how they are reached (address, SSH, Docker
  host, host keys: the plan JSON does not print them), without their `shard:` pin (the plan says
  which shard holds a host; `pin` writes the pin without moving anything);
- every other value of the fleet's file (every namespace but the hosts and services of all shards,
  and `encryptionsalt` and the like). A shard's own file is the fleet's file plus
  `ascend-fleet:shardOf`, whose index is the shard's own and whose `fleetHash` the program checks
  and deploys nothing from; `shards --check` (run before, in the workflow) holds the shard files
  equal to that cut, so the fleet's file stands for every shard's.

Values, not bytes: a comment or a respelling of the same value reaches no program. The comparison
is sound only for one program: when the program changed between the revisions (`PROGRAM`, the paths
the pull-request workflow watches for every stack), every shard counts as changed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from allocation.config import NAMESPACE
from cli.revision import differs_from, file_at, resolve_revision
from cli.stackfile import stack_document

PROGRAM = ("Pulumi.yaml", "__main__.py", "requirements.txt", "allocation", "records", "views", "components", "ops", "cli")
"""What every stack is built from, as `.github/workflows/pull-request.yml` lists it (a test holds them equal)."""

HOSTS, SERVICES = f"{NAMESPACE}:hosts", f"{NAMESPACE}:services"


@dataclass(frozen=True)
class ShardChanges:
    """Shard indexes of a fleet, split by whether their slice differs from the one at `ref`."""

    ref: str
    changed: tuple[int, ...]
    """Shards that hold a host now and whose slice differs, or that did not exist at `ref`."""
    unchanged: tuple[int, ...]
    emptied: tuple[int, ...] = ()
    """Shards that held a host at `ref` and hold none now: their stacks are to be destroyed."""
    every: str = ""
    """Why every shard counts as changed without comparing slices; empty when slices were compared."""


def slices(plan: Mapping[str, Any], document: Any) -> dict[int, str]:
    """Shard index -> its slice as canonical JSON text, from a plan JSON and its stack file's values."""
    config = (document.get("config") if isinstance(document, dict) else None) or {}
    rest = {k: v for k, v in config.items() if k not in (HOSTS, SERVICES)}
    shared = {**{k: v for k, v in document.items() if k != "config"}, "config": rest} if isinstance(document, dict) else {}
    entries = {
        e.get("name"): {k: v for k, v in e.items() if k != "shard"}
        for e in (config.get(HOSTS) if isinstance(config.get(HOSTS), list) else ())
        if isinstance(e, dict)
    }
    held: dict[int, dict[str, Any]] = {}
    shard_of = {}
    for host in plan.get("hosts") or ():
        if host.get("shard") is None:
            continue
        shard_of[host["name"]] = host["shard"]
        part = held.setdefault(host["shard"], {"stackFile": shared, "entries": {}, "hosts": [], "routers": []})
        part["hosts"].append(host)
        part["entries"][host["name"]] = entries.get(host["name"])
    for router in plan.get("routers") or ():
        if router.get("host") in shard_of:
            held[shard_of[router["host"]]]["routers"].append(router)
    return {k: json.dumps(part, sort_keys=True, default=repr) for k, part in held.items()}


def compare(ref: str, old: Mapping[int, str], new: Mapping[int, str]) -> ShardChanges:
    """The shards of `new` whose slice is not the same in `old`, and those gone from `new`."""
    changed = tuple(k for k in sorted(new) if old.get(k) != new[k])
    return ShardChanges(ref, changed, tuple(k for k in sorted(new) if k not in changed), tuple(sorted(set(old) - set(new))))


def since(
    root: Path, ref: str, stack: str, old_plan: Mapping[str, Any] | None, new_plan: Mapping[str, Any], new_document: Any
) -> ShardChanges:
    """The shards of fleet `stack` (its file `Pulumi.<stack>.yaml` in `root`) that changed since git
    revision `ref`. `old_plan`: the fleet's plan JSON at `ref` as the code there printed it
    (`cli.revision.plan_at_revision`: None when the file did not exist there)."""
    commit = resolve_revision(root, ref, "--changed-since")
    new = slices(new_plan, new_document)

    def every(why: str) -> ShardChanges:
        return ShardChanges(ref, tuple(sorted(new)), (), every=why)

    if old_plan is None:
        return every(f"Pulumi.{stack}.yaml did not exist at {ref}")
    if differs_from(root, commit, PROGRAM):
        return every(f"the program changed since {ref} ({', '.join(PROGRAM)})")
    if not any("shard" in h for h in old_plan.get("hosts") or ()):
        return every(f"stack {stack} was not deployed as shards at {ref}")
    name = f"Pulumi.{stack}.yaml"
    data = file_at(root, commit, name)
    old_document = stack_document(Path(f"{ref}:{name}"), data)
    return compare(ref, slices(old_plan, old_document), new)
