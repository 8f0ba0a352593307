"""Reading a stack's values from Pulumi.<stack>.yaml and the project's Pulumi.yaml, as Pulumi does."""

from __future__ import annotations

import contextvars
import json
from decimal import Decimal
from pathlib import Path

import pytest

from allocation.config import parse_fleet
from allocation.errors import ConfigError
from cli.stackfile import StackFile, stack_values
from components.stack_config import fleet_values

PROJECT = """\
name: ascend-fleet
runtime:
  name: python
config:
  ascend-fleet:defaults:
    value:
      image: a
      env:
        X: "1"
  ascend-fleet:memoryBudget: 0.9
"""

STACK = """\
config:
  ascend-fleet:defaults:
    image: b
"""


def test_a_stack_file_key_replaces_the_whole_project_value_of_that_key(tmp_path: Path):
    (tmp_path / "Pulumi.yaml").write_text(PROJECT)
    (tmp_path / "Pulumi.test.yaml").write_text(STACK)
    values = stack_values(StackFile("test", tmp_path / "Pulumi.test.yaml"), root=tmp_path)
    # Not merged into the project's defaults: the project's env is gone with them.
    assert values["defaults"] == {"image": "b"}
    # Keys the stack file does not set keep the project's value.
    assert values["memoryBudget"] == 0.9


@pytest.mark.parametrize(
    ("key", "written", "passed", "read"),
    [
        ("pullTimeoutMinutes", '"90"', "90", 90),  # as `pulumi config set ascend-fleet:pullTimeoutMinutes 90` writes it
        ("pullTimeoutMinutes", "90", "90", 90),
        ("pullTimeoutMinutes", "90.0", "90", 90),  # the Pulumi CLI prints the float 90.0 as 90
        ("pullTimeoutMinutes", '"90.0"', "90.0", 90),
        ("memoryBudget", '"0.95"', "0.95", Decimal("0.95")),
        ("pullTimeoutMinutes", '"1e2"', "1e2", None),  # digits only, which the schema can state
        ("pullTimeoutMinutes", '" 90"', " 90", None),
        ("pullTimeoutMinutes", "true", "true", None),
        ("pullTimeoutMinutes", '"true"', "true", None),
        ("pullTimeoutMinutes", "~", "", None),  # null reaches the program as the empty text
        ("shards", "~", "", None),
    ],
)
def test_a_top_level_value_reads_alike_in_plan_and_in_the_program(tmp_path, monkeypatch, key, written, passed, read):
    """`plan` reads the stack file; the program the text the Pulumi CLI hands it (`passed`, in
    PULUMI_CONFIG as the language host sets it): one value, or refused by both."""
    hosts = [{"name": "h", "address": "10.0.0.1"}]
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(f"config:\n  ascend-fleet:hosts: {json.dumps(hosts)}\n  ascend-fleet:{key}: {written}\n")
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps({"ascend-fleet:hosts": json.dumps(hosts), f"ascend-fleet:{key}": passed}))
    readers = {"plan": stack_values(StackFile("t", path), root=tmp_path), "program": contextvars.Context().run(fleet_values)}
    for reader, values in readers.items():
        if read is None:
            with pytest.raises(ConfigError, match=f"ascend-fleet:{key}"):
                parse_fleet("t", values)
        else:
            assert parse_fleet("t", values).model_dump(by_alias=True)[key] == read, reader
