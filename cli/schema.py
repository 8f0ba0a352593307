"""`python -m allocation schema`: write, or with `--check` compare, what the config model generates.

Three files come from one source: the stack file's JSON Schema (`allocation/schema.py`, from the
config model), the reference rendered from that schema (`views/reference.py`), and the plan JSON's
schema (`views/plan_schema.py`). All are committed; the suite fails while any differs from what this
command writes, and `--check` says the same in CI or before a commit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from allocation.errors import ConfigError
from allocation.schema import stack_schema
from cli.safe_write import write_file
from cli.stackfile import PROJECT_ROOT
from views.plan_schema import plan_schema
from views.reference import reference

STACK_SCHEMA = Path("schema") / "stack.schema.json"
PLAN_SCHEMA = Path("schema") / "plan.schema.json"
REFERENCE = Path("docs") / "configuration.md"
SCHEMA_LINE = f"# yaml-language-server: $schema=./{STACK_SCHEMA.as_posix()}"
"""The first line of every committed stack file: the YAML language server (editors) reads it."""


def _json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def generated() -> dict[Path, str]:
    """Every generated file, by its path in the repository, with the text it must hold."""
    stack = stack_schema()
    return {STACK_SCHEMA: _json(stack), PLAN_SCHEMA: _json(plan_schema()), REFERENCE: reference(stack)}


def stale(root: Path = PROJECT_ROOT) -> list[Path]:
    """The generated files that are missing or differ from what the model writes now."""
    out = []
    for path, text in generated().items():
        target = root / path
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            out.append(path)
    return out


def run(check: bool, root: Path = PROJECT_ROOT) -> str:
    """Write every generated file (only those that changed), or with `check` raise naming the stale ones."""
    behind = stale(root)
    if check:
        if behind:
            raise ConfigError(
                f"{', '.join(map(str, behind))} differ from what the config model generates: "
                "run `python -m allocation schema` and commit the result"
            )
        return f"up to date: {', '.join(str(p) for p in generated())}"
    texts = generated()
    for path in behind:
        (root / path).parent.mkdir(exist_ok=True)
        write_file(root / path, texts[path].encode("utf-8"))
    return f"wrote {', '.join(map(str, behind))}" if behind else "nothing to write: every file is up to date"
