"""`python -m allocation stacks`: the stacks this repository declares, as the rows the workflows run.

The workflows (`.github/workflows/`) list what to plan, preview, deploy and check for drift from here,
never from a list of their own: a stack is declared by its file, `Pulumi.<stack>.yaml` at the project
root, so a new stack file is planned, previewed, deployed and drift-checked from its first pull request
on. A shard's file (`ascend-fleet:shardOf`, written by `shards`) declares no stack of its own: its
fleet's rows name it, as `shards --matrix` does.
"""

from __future__ import annotations

from pathlib import Path

from cli.shards import deploy_matrix
from cli.stackfile import StackFile, stack_values
from records.pipeline import plan_of


def declared(root: Path) -> list[StackFile]:
    """Every `Pulumi.<stack>.yaml` in `root` but the shard files, in name order: the files `--stack`
    reads (`cli.stackfile.locate`)."""
    paths = sorted(root.glob("Pulumi.*.yaml"))
    files = [StackFile(stack=p.name.removeprefix("Pulumi.").removesuffix(".yaml"), path=p) for p in paths]
    return [f for f in files if "shardOf" not in stack_values(f, root)]


def rows(root: Path) -> list[dict[str, object]]:
    """Per declared stack, its `shards --matrix` rows (each shard of a fleet deployed as shards, else
    the stack itself, with its `--parallel`), each naming its `fleet` (the declared stack) and whether
    it is `local`: every host's Docker daemon is a socket of the machine that runs pulumi (`dockerHost:
    unix://...`, as the dev stack's laptop), which no CI runner is, so the workflows plan it but
    never preview, deploy or drift-check it."""
    out: list[dict[str, object]] = []
    for stack_file in declared(root):
        plan = plan_of(stack_file.stack, stack_values(stack_file, root))
        local = bool(plan.fleet.hosts) and all(h.is_local() for h in plan.fleet.hosts)
        out += [{"fleet": stack_file.stack, **row, "local": local} for row in deploy_matrix(stack_file.stack, plan)]
    return out
