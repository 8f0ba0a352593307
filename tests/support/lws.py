"""LeaderWorkerSet's CRD, fetched at test time by scripts/fetch-lws-crd.sh (from the Go module proxy, into a
cache outside the repository: neither the CRD nor the module's source is committed), and a strict validator of
its `openAPIV3Schema`.

Without the proxy the tests that need it are skipped with the script's words; in CI
(ASCEND_FLEET_REQUIRE_SIMHOST=1) they fail instead, as a missing actionlint does (tests/conftest.py
`require_binary`). tests/kube reads the same file and fails instead of skipping with ASCEND_FLEET_REQUIRE_KUBE=1.
"""

from __future__ import annotations

import copy
import functools
import subprocess
from pathlib import Path
from typing import Any, Callable

import jsonschema
import pytest
import yaml

from tests.conftest import REQUIRED

ROOT = Path(__file__).resolve().parents[2]
FETCH = ROOT / "scripts" / "fetch-lws-crd.sh"
LWS_VERSION = "v1"


@functools.cache
def _fetched() -> tuple[str | None, str]:
    """(the CRD file's path, or None, and the script's error output)."""
    result = subprocess.run([str(FETCH)], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        return None, result.stderr.strip() or f"exited {result.returncode}"
    return result.stdout.strip().splitlines()[-1], ""


def _suite_unavailable(message: str) -> None:
    if REQUIRED:
        pytest.fail(f"{message} (ASCEND_FLEET_REQUIRE_SIMHOST=1: CI requires it)", pytrace=False)
    pytest.skip(message)


def crd_path(unavailable: Callable[[str], None] = _suite_unavailable) -> Path:
    """The fetched CRD's path; without it `unavailable` skips the test, or fails it where CI requires it."""
    path, error = _fetched()
    if path is None:
        unavailable(f"LeaderWorkerSet's CRD could not be fetched ({FETCH.relative_to(ROOT)}): {error}")
    return Path(path)


def crd(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def strict(schema: Any) -> Any:
    """The schema with `additionalProperties: false` on every object that lists its properties and keeps no
    unknown fields: the API server prunes an unknown field of a structural schema silently (or refuses it with
    `fieldValidation=Strict`), so a misspelt field must fail here."""
    out = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(out)
    return out


def validator(path: Path) -> jsonschema.protocols.Validator:
    """A validator of LeaderWorkerSet objects against the CRD's served version's `openAPIV3Schema`."""
    (version,) = [v for v in crd(path)["spec"]["versions"] if v["name"] == LWS_VERSION]
    return jsonschema.Draft7Validator(strict(version["schema"]["openAPIV3Schema"]))
