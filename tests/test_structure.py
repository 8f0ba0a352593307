"""The promises the layout makes: a pure planner, one table of windows, short functions, a true README."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from allocation.windows import KINDS, ROUTER_KINDS

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("allocation", "records", "views", "cli", "components", "ops", "sim")
PURE_PACKAGES = ("allocation", "records", "views")
# What the planner, its records and views may import: the standard library's pure parts, pydantic
# (and its core, whose PydanticCustomError names an error's type), themselves (which of them may
# import which: tests/test_layers.py).
PURE_IMPORTS = {
    "__future__", "allocation", "base64", "binascii", "bisect", "collections", "dataclasses", "decimal", "difflib",
    "functools",
    "hashlib", "hmac", "ipaddress", "json", "math", "orjson",
    "pydantic", "pydantic_core", "re", "records", "shlex", "textwrap", "types", "typing", "unicodedata", "views",
}  # fmt: skip
EXPORTS = "views.exports"
EXPORT_IMPORTS = {"io", "ruamel", "grafana_foundation_sdk"}
"""What the exports may import besides: in-memory text and the emitters made for their formats (YAML, Grafana's SDK)."""
MAX_FUNCTION_LINES = 60


def source_files(*, tests: bool = False) -> list[Path]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")] + [ROOT / "__main__.py"]
    return sorted(files + (list((ROOT / "tests").rglob("*.py")) if tests else []))


def pure_modules() -> list[str]:
    """Every module of the planner, its records and views, in subpackages too (the diff, the
    exports), but `allocation.__main__`, which only forwards to `cli`."""
    paths = [p.relative_to(ROOT).with_suffix("") for pkg in PURE_PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    return sorted(".".join(p.parts) for p in paths if p.stem != "__main__")


def is_export(module: str) -> bool:
    return module.startswith(EXPORTS + ".")


@pytest.mark.parametrize("module", pure_modules())
def test_every_planner_record_and_view_module_imports_only_pure_modules(module):
    tree = ast.parse((ROOT / module.replace(".", "/")).with_suffix(".py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert {m.split(".")[0] for m in imported} <= PURE_IMPORTS | (EXPORT_IMPORTS if is_export(module) else set())


def loaded_by(modules: list[str], bad: tuple[str, ...]) -> list[str]:
    """The modules of the `bad` packages that importing `modules` loads, in a fresh interpreter."""
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {bad!r})))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


HOST_REACHING = ("pulumi", "pulumi_docker", "pulumi_command", "subprocess", "cli", "ops", "components")


def test_importing_the_planner_records_and_views_loads_no_pulumi_process_or_higher_layer():
    assert loaded_by([m for m in pure_modules() if not is_export(m)], (*HOST_REACHING, "ruamel")) == []


def test_importing_the_exports_loads_no_pulumi_process_or_host_reaching_code():
    exports = [m for m in pure_modules() if is_export(m)]
    assert {"views.exports.render", "views.exports.prometheus", "views.exports.dashboard"} <= set(exports)
    assert loaded_by(exports, HOST_REACHING) == []


def test_each_windows_env_label_and_key_is_written_once_in_the_code_in_the_table():
    """A router's windows too: adding a window of a service or a router is adding a row."""
    names = {f'"{name}"' for k in (*KINDS, *ROUTER_KINDS) for name in (k.key, k.env, k.label) if name}
    found: dict[str, set[str]] = {name: set() for name in names}
    for path in source_files():
        text = path.read_text()
        found = {name: where | ({str(path.relative_to(ROOT))} if name in text else set()) for name, where in found.items()}
    assert found == {name: {"allocation/windows.py"} for name in names}


def test_no_function_outside_the_tests_is_longer_than_sixty_lines():
    long = []
    for path in source_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


def test_the_readme_layout_table_names_every_top_level_folder_and_only_those():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Layout") :].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([^`]+)` \|", table, flags=re.M))
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    folders = {line.split("/")[0] for line in tracked.splitlines() if "/" in line} - {".ci"}  # beside the test command
    assert {path.split("/")[0] for path in listed} == folders | {"__main__.py"}
    assert all((ROOT / path).exists() for path in listed)


def imported_modules(tree: ast.Module) -> set[str]:
    """Every module an import statement names, `from tests import test_x` included as `tests.test_x`."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return found


def test_no_test_module_imports_another_test_module():
    """What tests share lives in tests/support/ (stacks, the pipeline, the Pulumi harness, the fakes):
    a test module is read on its own, and a change to one never breaks another's imports."""
    offenders = []
    for path in sorted([*(ROOT / "tests").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")]):
        for module in imported_modules(ast.parse(path.read_text(encoding="utf-8"))):
            if module.split(".")[0] == "tests" and module.rsplit(".", 1)[-1].startswith("test_"):
                offenders.append(f"{path.relative_to(ROOT)} imports {module}")
    assert offenders == [], "move what they share into tests/support/:\n" + "\n".join(offenders)
