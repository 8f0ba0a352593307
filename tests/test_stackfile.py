"""Reading a stack's values from Pulumi.<stack>.yaml and the project's Pulumi.yaml, as Pulumi does."""

from __future__ import annotations

from pathlib import Path

from cli.stackfile import StackFile, stack_values

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
