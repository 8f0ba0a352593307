"""The packages are layers: the planner core, the deployment records built from its plan, the views
of a plan, then the programs around them. A module imports only from its own layer or lower ones, and
no set of modules imports itself in a circle, so each layer can be read (and tested) without the ones
above it. The one documented exception: `allocation/__main__.py`, which forwards `python -m allocation`
to `cli` because old revisions (cli/revision.py) are planned by that command."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {"allocation": 0, "records": 1, "views": 2, "cli": 3, "ops": 3, "components": 3, "sim": 3}
FORWARDERS = {"allocation.__main__"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path) -> set[str]:
    """Every name a file imports, by full name: modules, and `m.name` for `from m import name`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
    return found


def project_imports(path: Path) -> set[str]:
    """The project modules a file imports, by full name (a package's `from p import m` names p.m)."""
    modules = set(GRAPH_NODES)
    return {name for name in imported_names(path) if name in modules}


GRAPH_NODES = {module_name(p): p for pkg in LAYERS for p in sorted((ROOT / pkg).rglob("*.py"))}
GRAPH = {name: project_imports(path) - {name} for name, path in GRAPH_NODES.items()}


def layer(module: str) -> int:
    return LAYERS[module.split(".")[0]]


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_a_module_imports_nothing_from_a_higher_layer(module):
    if module in FORWARDERS:
        return
    higher = sorted(m for m in GRAPH[module] if layer(m) > layer(module))
    assert not higher, f"{module} (layer {layer(module)}) imports {higher} from a higher layer"


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of the graph, or None (depth-first search, three colours)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_modules_import_each_other_in_a_circle():
    without_forwarders = {m: deps for m, deps in GRAPH.items() if m not in FORWARDERS}
    assert cycle(without_forwarders) is None, " -> ".join(cycle(without_forwarders))


def test_the_cycle_finder_finds_a_circle_it_is_given():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_the_graph_sees_every_layer_and_their_imports():
    assert {m.split(".")[0] for m in GRAPH} == set(LAYERS)
    assert "allocation.plan" in GRAPH["records.deployment"]
    assert "records.deployment" in GRAPH["views.report"]
    assert {"records.deployment", "records.ssh_argv"} <= GRAPH["views.exports.render"]


def closure(graph: dict[str, set[str]], roots: set[str]) -> set[str]:
    """The roots and every module they import, directly or not."""
    seen, todo = set(), list(roots)
    while todo:
        if (node := todo.pop()) not in seen:
            seen.add(node)
            todo += graph.get(node, ())
    return seen


def test_every_ops_module_reaches_hosts_or_serves_a_module_that_does():
    """`ops/` is what reaches hosts (a module that runs a process, a script over `ops.ssh`, or opens a
    connection: `ops.kube_api` reads a cluster's API) and
    the parsers of what hosts answer; an output written from the plan alone is a view
    (`views/exports/`), and would be imported here only by the command line."""
    ops = {m for m in GRAPH if m.split(".")[0] == "ops" and m != "ops"}
    reaching = {m for m in ops if {"subprocess", "urllib.request"} & imported_names(GRAPH_NODES[m]) or "ops.ssh" in GRAPH[m]}
    assert {"ops.ssh", "ops.doctor", "ops.models", "ops.kube_api"} <= reaching
    assert sorted(ops - closure(GRAPH, reaching)) == []


PIPELINE = {"allocation.planner.plan_fleet", "records.deployment.deploy", "records.deployment.untrusted_hosts"}


def test_the_program_and_the_command_line_build_the_pipeline_in_one_place():
    """Parse, plan, deploy and the trust check: `records.pipeline`, which the Pulumi program and the
    command line both call, so neither builds a deployment its own way."""
    above = [m for m in GRAPH if layer(m) == LAYERS["cli"]]
    builders = {m: sorted(imported_names(GRAPH_NODES[m]) & PIPELINE) for m in above}
    assert {m: names for m, names in builders.items() if names} == {}
    assert "records.pipeline" in GRAPH["cli.main"] and "records.pipeline" in GRAPH["components.stack_config"]
