"""Stack files for the `pin` tests: the seed, its pins as `pin` writes them, and running `pin` on a file."""

from __future__ import annotations

from pathlib import Path

from allocation.planner import plan_fleet
from cli.pin import pin_stack_file
from cli.stackfile import load_fleet
from tests.support.stacks import SEED_UNPINNED

SEED = SEED_UNPINNED

QWEN_PINS = """\
      host: npu-a
      devices: [0, 1, 2, 3]
      apiPort: 8001
      hcclNpuSocketPortRange: [16682, 16697]
      hcclHostSocketPortRange: [60048, 60063]
      hcclIfBasePort: 61032
      vllmPort: 62016
"""
BGE_PINS = """\
      host: npu-a
      devices: [0]
      apiPort: 8000
      hcclNpuSocketPortRange: [16666, 16681]
      hcclHostSocketPortRange: [60032, 60047]
      hcclIfBasePort: 61000
      vllmPort: 62000
"""
PINNED = SEED.replace("0.85\n", "0.85\n" + QWEN_PINS) + BGE_PINS


def plan_of(path: Path):
    """The plan of a stack file, read as `pin` reads it."""
    fleet, _ = load_fleet(config=str(path))
    return plan_fleet(fleet)


def pin(path: Path) -> list[str]:
    return pin_stack_file(path, plan_of(path))


def write(tmp_path: Path, text: str, name: str = "Pulumi.t.yaml", newline: str = "\n") -> Path:
    path = tmp_path / name
    path.write_bytes(text.replace("\n", newline).encode("utf-8"))
    return path
