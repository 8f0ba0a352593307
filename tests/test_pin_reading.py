"""`pin` writes text every reader reads alike, a reviewer can read, and refuses hostile text quickly.

Quoting: a host name such as `2024-6-1` is text to YAML 1.2 but a date to the Pulumi CLI (and `yes`
a boolean to YAML 1.1), so pin quotes it. Block style: long lists (staging's `replicaPins`) one entry
a line. Bounds: an alias bomb and a value nested 500 levels deep get one paragraph, not a hang or a
RecursionError.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml as pyyaml

from allocation.errors import ConfigError
from cli import yaml12
from cli.pulumi_scalars import program_value
from tests.support.stacks import SEED_UNPINNED
from tests.support.pin_files import PINNED, pin, plan_of, write

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("host", ["2024-6-1", "1e3", "yes", "no", "on", "0x1f", "2024-06-01", "0o17", "08", "1"])
def test_a_host_name_another_reader_would_read_otherwise_is_written_quoted(tmp_path, host):
    path = write(tmp_path, SEED_UNPINNED.replace("name: npu-a", f'name: "{host}"'))
    pin(path)
    text = path.read_text()
    assert f'host: "{host}"' in text
    line = next(x for x in text.splitlines() if "host:" in x).strip()
    assert yaml12.load(line) == {"host": host}
    assert pyyaml.safe_load(line) == {"host": host}  # YAML 1.1
    assert pin(path) == []  # the quoted spelling is pin's fixed point


def test_a_plain_host_name_stays_plain(tmp_path):
    path = write(tmp_path, SEED_UNPINNED)
    pin(path)
    assert "host: npu-a\n" in path.read_text() and program_value("npu-a") == "npu-a"


COMMENTED_FLOW = SEED_UNPINNED.replace(
    "    - name: bge\n      model: /m/bge\n      memoryFraction: 0.1\n",
    "    - {name: bge, model: /m/bge,\n       memoryFraction: 0.1   # small enough to share\n      }\n",
)


def test_a_flow_entry_with_a_comment_after_its_last_key_gets_its_pins_before_the_comment(tmp_path):
    path = write(tmp_path, COMMENTED_FLOW)
    assert pin(path) == ["qwen", "bge"]
    text = path.read_text()
    assert "memoryFraction: 0.1, host: npu-a, devices: [0], apiPort: 8000" in text
    assert "vllmPort: 62000   # small enough to share\n      }\n" in text
    assert plan_of(path).fleet.services[1].host == "npu-a"


def test_when_the_edit_would_change_a_service_the_message_names_it_and_its_keys(tmp_path, monkeypatch):
    import cli.stack_editor

    path = write(tmp_path, SEED_UNPINNED)
    plan = plan_of(path)
    real = cli.stack_editor._apply
    monkeypatch.setattr(cli.stack_editor, "_apply", lambda text, edits: real(text, edits).replace("/m/bge", "/m/b"))
    from cli.pin import pin_stack_file

    with pytest.raises(ConfigError, match="service bge: model would read otherwise"):
        pin_stack_file(path, plan)


def staging_without_replica_pins(tmp_path: Path) -> Path:
    text = (ROOT / "Pulumi.staging.yaml").read_text()
    lines = [line for line in text.splitlines(keepends=True) if "replicaPins:" not in line]
    return write(tmp_path, "".join(lines), "Pulumi.staging.yaml")


def test_replica_pins_are_written_one_key_a_line_and_the_plan_is_the_committed_one(tmp_path):
    path = staging_without_replica_pins(tmp_path)
    pin(path)
    text = path.read_text()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "      replicaPins:\n        - host: npu-s1\n          devices: [0]\n          apiPort: 8000\n" in text
    assert plan_of(path).fleet == plan_of(ROOT / "Pulumi.staging.yaml").fleet
    assert pin(path) == []


def test_a_short_list_stays_in_flow_style(tmp_path):
    path = write(tmp_path, SEED_UNPINNED)
    pin(path)
    assert path.read_text() == PINNED


def test_a_long_list_replacing_a_value_goes_under_its_key_in_block_style(tmp_path):
    path = staging_without_replica_pins(tmp_path)
    text = path.read_text().replace("      replicas: 2\n", "      replicas: 2\n      replicaPins: []   # to fill\n", 1)
    path.write_text(text)
    pin(path)
    assert "      replicaPins:\n        - host: npu-s1\n" in path.read_text()
    assert plan_of(path).fleet == plan_of(ROOT / "Pulumi.staging.yaml").fleet


def bomb(levels: int) -> str:
    lines = ['  other:l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        lines.append(f"  other:l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def run_pin(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "allocation", "pin", "--config", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_an_alias_bomb_is_refused_with_one_paragraph(tmp_path):
    path = write(tmp_path, SEED_UNPINNED.replace("config:\n", "config:\n" + bomb(9)))
    assert len(bomb(9).encode()) < 800
    done = run_pin(path)
    assert done.returncode != 0 and "alias" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert path.read_text() == SEED_UNPINNED.replace("config:\n", "config:\n" + bomb(9))


def test_a_few_aliases_are_still_read(tmp_path):
    path = write(tmp_path, SEED_UNPINNED.replace("config:\n", "config:\n" + bomb(2)))
    assert run_pin(path).returncode == 0


def test_a_value_nested_500_levels_deep_is_refused_with_one_paragraph_naming_its_line(tmp_path):
    path = write(tmp_path, SEED_UNPINNED.replace("config:\n", "config:\n  other:deep: " + "[" * 500 + "]" * 500 + "\n"))
    done = run_pin(path)
    assert done.returncode != 0 and "line 3: nested more than" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "RecursionError" not in done.stderr


def test_a_plan_json_holding_del_is_the_standard_librarys_text(tmp_path):
    path = write(tmp_path, SEED_UNPINNED.replace("      memoryFraction: 0.1\n", '      memoryFraction: 0.1\n      env: {A: "x\\x7fy"}\n'))
    done = subprocess.run([sys.executable, "-m", "allocation", "plan", "--config", str(path), "--format", "json"],
                          cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == json.dumps(json.loads(done.stdout), indent=2) + "\n" and "\\u007f" in done.stdout


def test_profile_reads_a_model_folder_shared_by_many_services_once_and_writes_a_long_profile_in_block_style(
    tmp_path, monkeypatch
):
    import ops.models
    from cli.main import main
    from tests.support.profiles import model, stack

    root = tmp_path / "copy"
    qwen36 = json.loads((ROOT / "tests" / "data" / "qwen3.6-27b" / "config.json").read_text())
    model(root / "disk2", "qwen", qwen36, index_total=2**30)
    path = stack(tmp_path, ["qwen"], tp=1, fraction=0.1)
    path.write_text(path.read_text() + "".join(
        f"    - name: q{i}\n      model: /disk2/qwen\n      memoryFraction: 0.1\n" for i in range(5)))  # fmt: skip
    reads = []
    real = ops.models.read_profile
    monkeypatch.setattr(ops.models, "read_profile", lambda folder: reads.append(folder) or real(folder))
    assert main(["profile", "--config", str(path), "--models-root", str(root)]) == 0
    assert len(reads) == 1
    text = path.read_text()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "      profile:\n        weightBytes: 1073741824\n        numHiddenLayers: 64\n" in text
