"""One home for names (allocation/names.py): the names a service implies are built there and nowhere
else, and what an entry of the plan is, is said by its `kind`, never read back from its name.

The structural test reads every program module's syntax tree (as tests/test_layers.py reads its
imports) for the three rules the names module owns: the router's `-router` suffix, a replica's
`<name>-<index>`, and whether a service is replicated (`replicas` compared with 1)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from allocation import names

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("allocation", "records", "views", "cli", "ops", "components", "sim", "benchmarks")
HOME = ROOT / "allocation" / "names.py"
INDEX_WORDS = ("i", "n", "index", "number", "replica", "idx")


def program_files() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))] + [ROOT / "__main__.py"]


def _last_word(node: ast.expr) -> str:
    """`i` for `i`, `index` for `self.index`: the name a value is read under."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def naming_rules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each naming rule written in `tree`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("-router"):
            found.append((node.lineno, f"the router suffix {node.value!r}"))
        if isinstance(node, ast.JoinedStr):
            parts = node.values
            for before, dash, after in zip(parts, parts[1:], parts[2:]):
                if (
                    isinstance(before, ast.FormattedValue)
                    and isinstance(dash, ast.Constant) and dash.value == "-"
                    and isinstance(after, ast.FormattedValue) and _last_word(after.value) in INDEX_WORDS
                ):  # fmt: skip
                    found.append((node.lineno, "a replica name <name>-<index>"))
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_last_word(s) == "replicas" for s in sides) and any(
                isinstance(s, ast.Constant) and s.value == 1 for s in sides
            ):
                found.append((node.lineno, "whether a service is replicated (replicas compared with 1)"))
    return found


@pytest.mark.parametrize("path", program_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_but_the_names_module_builds_or_reads_a_name_a_service_implies(path: Path):
    if path == HOME:
        return
    rules = naming_rules(ast.parse(path.read_text()))
    where = "; ".join(f"{path.relative_to(ROOT)}:{line}: {what}" for line, what in rules)
    assert not rules, f"{where}: ask allocation/names.py instead"


def test_the_structural_test_finds_each_rule_it_guards():
    """The three rules as they were written before the names module, each found (the test can fail)."""
    written = (
        'f"{s.name}-router"\n'
        'n.endswith("-router")\n'
        'f"{name}-{i}"\n'
        'f"{p}-{self.index}"\n'
        "s.replicas == 1\n"
        "self.replicas > 1\n"
    )
    assert sorted(line for line, _ in naming_rules(ast.parse(written))) == [1, 2, 3, 4, 5, 6]
    assert naming_rules(ast.parse('f"{name}-{image}"\n"vllm-router"\nlen(x) > 1\n')) == []


def test_the_names_module_itself_holds_the_rules_the_structural_test_looks_for():
    """Else the structural test would pass for a module it cannot read."""
    assert len(naming_rules(ast.parse(HOME.read_text()))) >= 2


def test_a_replicated_service_implies_its_replicas_and_its_router_and_one_of_its_own_only_itself():
    assert names.implied_names("bge", 3) == ["bge", "bge-1", "bge-2", "bge-3", "bge-router"]
    assert names.implied_names("bge", 1) == ["bge"]
    assert names.container_names("bge", 2) == ["bge-1", "bge-2"] and names.container_names("bge", 1) == ["bge"]
    assert [names.instance_kind(i) for i in names.instance_indexes(1)] == [names.SERVICE]
    assert [names.instance_kind(i) for i in names.instance_indexes(2)] == [names.REPLICA, names.REPLICA]


def test_a_rename_back_keeps_the_first_name_and_aliases_only_the_names_the_resource_no_longer_has():
    assert names.original_name("a", ["a", "b"]) == "a"
    assert names.earlier_names("a", ["a", "b"]) == ["b"]
    assert names.earlier_names("c", ["a", "b", "a"]) == ["a", "b"], "a name listed twice is one alias"
    assert names.previous_instance_names(["a", "b"], 2) == ("a-2", "b-2")
    assert names.previous_router_names(["a", "b"]) == ("a-router", "b-router")


@pytest.mark.parametrize(
    ("previous", "back"), [(["a", "b"], True), (["a"], False), (["b", "a"], False), (["b"], False), (None, False)]
)
def test_a_rename_back_lists_the_current_name_first_and_a_name_it_had_since(previous, back):
    assert names.renamed_back("a", previous) is back
