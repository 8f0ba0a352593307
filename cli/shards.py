"""`python -m allocation shards`: cut a fleet deployed as shards into one stack file per shard.

Each shard's file is the fleet's file, byte for byte, with one key added: `ascend-fleet:shardOf`,
naming the fleet, the shard and the fleet's hash. Pulumi reads every shard's config exactly as it
reads the fleet's (comments, spellings, project defaults and an `encryptionsalt` included), so
every shard plans the same fleet and deploys its hosts' slice; the hash makes a shard file that
was edited by hand, or cut from another version of the fleet, refuse to deploy.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Sequence

from allocation.config import NAMESPACE, FleetConfig, parse_fleet
from allocation.errors import ConfigError
from allocation.names import shard_stack
from allocation.plan import Plan
from cli.stackfile import StackFile, locate, stack_values

# A line ends in CRLF, CR or LF, as YAML reads it (YAML 1.2, 5.4 "Line Break Characters") and so
# `plan`: the fleet's file is cut whatever its line ends, and what is added ends as its lines do.
CONFIG_LINE = re.compile(r"(?:\A|(?<=[\r\n]))config:[ \t]*(?:#[^\r\n]*)?(\r\n|\r|\n)")
KEY_LINE = re.compile(r"(?<=[\r\n])([ \t]+)[^\s#]")


HOST_SLOTS = 8
"""`--parallel` slots per host besides its containers: its docker provider, host check, takeover,
device-share and start-order steps and images, each a step that ends in seconds."""


def deploy_matrix(stack: str, plan: Plan) -> list[dict[str, object]]:
    """The stacks a deploy runs, each with its `--parallel`: a slot for every container it deploys
    (services, members of multi-host services, routers, NPU exporters), which holds its slot until
    healthy, and `HOST_SLOTS` per host in use, so no container waits for a slot. A group's members
    (all in one shard, allocation.placement) each wait until the whole group serves, so with fewer
    slots than members none would ever turn healthy. The shards of a fleet deployed as shards (its
    own stack is never deployed), else the stack itself. Every stack that holds a host is run,
    even with no container left: its `up` deletes what its last services left behind, with
    `HOST_SLOTS` for each of its hosts."""
    exporter = 1 if plan.fleet.metrics.npu_exporter is not None else 0
    routers = Counter(rp.host_name for rp in plan.routers)
    slots: Counter[int | None] = Counter()
    hosts: Counter[int | None] = Counter()
    for hp in plan.hosts:
        # One key, None, for a stack not deployed as shards (so one row); shard indexes otherwise.
        key = hp.shard if plan.fleet.shards is not None else None
        hosts[key] += 1
        containers = len(hp.services) + len(hp.members) + routers[hp.host.name]
        if containers:
            slots[key] += containers + exporter + HOST_SLOTS
    return [
        {"stack": stack if k is None else shard_stack(stack, k), "parallel": slots[k] or HOST_SLOTS * n}
        for k, n in sorted(hosts.items())
    ]


def preview_matrix(stack: str, plan: Plan, shards: Sequence[int]) -> list[dict[str, object]]:
    """`deploy_matrix`'s rows of the given shards, in its order."""
    wanted = {shard_stack(stack, k) for k in shards}
    return [row for row in deploy_matrix(stack, plan) if row["stack"] in wanted]


def require_fleet(stack_file: StackFile, fleet: FleetConfig) -> None:
    """A ConfigError unless the file is a fleet deployed as shards, and the fleet's own file."""
    if fleet.shards is None:
        raise ConfigError(
            f"{stack_file.path}: stack {stack_file.stack} sets no ascend-fleet:shards, so it is deployed as one "
            "stack; add `ascend-fleet:shards: {size: 50}` to deploy it as shards"
        )
    if fleet.shard_of is not None:
        raise ConfigError(
            f"{stack_file.path} is shard {fleet.shard_of.index} of fleet {fleet.shard_of.fleet}: cut the fleet's "
            f"own file (--stack {fleet.shard_of.fleet})"
        )


def shard_files(stack_file: StackFile, text: str, plan: Plan) -> dict[str, str]:
    """File name -> text, one per shard that holds a host of the plan."""
    fleet = plan.fleet
    require_fleet(stack_file, fleet)
    return {
        f"Pulumi.{shard_stack(stack_file.stack, k)}.yaml": _shard_text(stack_file, text, fleet, k)
        for k in sorted({hp.shard for hp in plan.hosts if hp.shard is not None})
    }


def _shard_text(stack_file: StackFile, text: str, fleet: FleetConfig, index: int) -> str:
    """The fleet's text with `shardOf` as the first key of its `config:` block, a comment above it
    (the file's first line, the schema's, stays first)."""
    config = CONFIG_LINE.search(text)
    key = KEY_LINE.search(text, config.end()) if config else None
    if key is None:
        raise ConfigError(
            f"{stack_file.path}: no block `config:` mapping with indented keys to add ascend-fleet:shardOf to; "
            "write the stack's config as a block mapping (one key per line)"
        )
    cut = json.dumps({"fleet": stack_file.stack, "index": index, "fleetHash": fleet.shard_hash(stack_file.stack, index)})
    newline = config.group(1)
    line = f"{key.group(1)}{NAMESPACE}:shardOf: {cut}{newline}"
    header = (
        f"# Shard {index} of fleet {stack_file.stack}, written by `python -m allocation shards --stack "
        f"{stack_file.stack}`: edit Pulumi.{stack_file.stack}.yaml and run it again, never this file.{newline}"
    )
    start, end = config.start(), config.end()
    return text[:start] + header + text[start:end] + line + text[end:]


def not_current(folder: Path, name: str, text: str) -> str | None:
    """Why the shard file `name` in `folder` is not the cut's `text`, or None when it is: missing,
    refused by the program as `pulumi up` on its stack would refuse it, or merely behind the fleet."""
    path = folder / name
    if not path.is_file():
        return f"{name} is missing"
    if path.read_bytes() == text.encode():
        return None
    try:
        stack_file = locate(None, str(path))
        parse_fleet(stack_file.stack, stack_values(stack_file))
    except ConfigError as err:
        return f"{name} differs from the fleet's cut, and its stack would refuse it: {err}"
    return f"{name} differs from the fleet's cut"


def stale(folder: Path, fleet: str, files: dict[str, str]) -> list[str]:
    """Shard files of this fleet in `folder` that the cut no longer writes (their shard has no hosts)."""
    pattern = re.compile(rf"Pulumi\.{re.escape(fleet)}-shard-[0-9]+\.yaml\Z")
    return sorted(p.name for p in folder.iterdir() if pattern.fullmatch(p.name) and p.name not in files)
