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


def project_imports(path: Path) -> set[str]:
    """The project modules a file imports, by full name (a package's `from p import m` names p.m)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
    modules = set(GRAPH_NODES)
    return {name for name in found if name in modules}


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
