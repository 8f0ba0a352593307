"""A fleet deployed as shards under Pulumi's mocks: `python -m allocation shards` cuts the stack
files, each shard's program registers only its hosts' slice, and the shards together register
what one stack holding the whole fleet would, resource for resource."""

from __future__ import annotations

import re
from pathlib import Path

import pulumi
import pytest

from allocation.config import parse_fleet
from cli.main import main as cli
from cli.stackfile import locate, stack_values
from tests.support.pulumi_harness import CONTAINER, run_program
from tests.support.pipeline import plan_json_of, plan_of

FLEET = """\
config:
  ascend-fleet:shards: {size: 2}
  ascend-fleet:hosts:
%s
  ascend-fleet:services:
    - {name: chat, model: /models/chat, tensorParallelSize: 4, memoryFraction: 0.8, replicas: 2,
       replicaPins: [{host: npu-c}, {host: npu-d}]}
    - {name: embed, model: /models/embed, memoryFraction: 0.1, host: npu-a}
    - {name: big, model: /models/big, tensorParallelSize: 8, memoryFraction: 0.9, host: npu-e}
    - {name: small, model: /models/small, memoryFraction: 0.2, host: npu-c}
"""


def fleet_text(hosts: str = "abcde") -> str:
    lines = [f"    - {{name: npu-{h}, address: 10.0.0.{i + 1}}}" for i, h in enumerate(hosts)]
    return FLEET % "\n".join(lines)


@pytest.fixture
def cut(tmp_path: Path, capsys) -> Path:
    (tmp_path / "Pulumi.big.yaml").write_text(fleet_text())
    assert cli(["shards", "--config", str(tmp_path / "Pulumi.big.yaml")]) == 0, capsys.readouterr().err
    return tmp_path


def shard_values(folder: Path, index: int) -> dict:
    return stack_values(locate(None, str(folder / f"Pulumi.big-shard-{index}.yaml")))


def test_the_cut_writes_one_file_per_shard_each_the_fleets_file_with_shard_of(cut: Path):
    assert sorted(p.name for p in cut.glob("Pulumi.big-shard-*.yaml")) == [f"Pulumi.big-shard-{k}.yaml" for k in range(3)]
    text = (cut / "Pulumi.big-shard-1.yaml").read_text()
    assert text.replace(re.search(r"(?m)^# Shard 1.*\n", text).group(0), "").replace(
        re.search(r"(?m)^  ascend-fleet:shardOf: .*\n", text).group(0), ""
    ) == fleet_text()
    values = shard_values(cut, 1)
    assert values["shardOf"]["fleet"] == "big" and values["shardOf"]["index"] == 1
    fleet = parse_fleet("big", stack_values(locate(None, str(cut / "Pulumi.big.yaml"))))
    assert parse_fleet("big-shard-1", values).shard_of.fleet_hash == fleet.shard_hash("big", 1) != fleet.shard_hash("big", 0)


def test_each_shard_registers_its_slice_and_together_what_one_stack_would(cut: Path):
    """The one stack: the same fleet in a single shard (a fleet with `shards` is never deployed as one
    stack). Its services are pinned, so both plans place them alike; the test checks that first."""
    runs = {k: run_program(f"big-shard-{k}", shard_values(cut, k)) for k in range(3)}
    fleet = {k: v for k, v in shard_values(cut, 0).items() if k != "shardOf"} | {"shards": {"size": 1000}}
    one = fleet | {"shardOf": {"fleet": "big", "index": 0, "fleetHash": parse_fleet("big", fleet).shard_hash("big", 0)}}
    sharded = plan_json_of(shard_values(cut, 0), "big-shard-0")
    single = plan_json_of(one, "big-shard-0")
    assert [h.pop("shard") for h in sharded["hosts"]] == [0, 0, 1, 1, 2]
    assert [h.pop("shard") for h in single["hosts"]] == [0] * 5
    assert sharded == single
    containers = {k: sorted(r.name for r in run.of_type(CONTAINER)) for k, run in runs.items()}
    assert containers == {
        0: ["embed-container"],
        1: ["chat-1-container", "chat-2-container", "chat-router-container", "small-container"],
        2: ["big-container"],
    }
    assert sorted(r for run in runs.values() for r in run.registered()) == run_program("big-shard-0", one).registered()


def test_a_shard_file_edited_by_hand_refuses_to_deploy_naming_fleet_and_hashes(cut: Path):
    path = cut / "Pulumi.big-shard-0.yaml"
    path.write_text(path.read_text().replace("0.2, host: npu-c", "0.25, host: npu-c"))
    with pytest.raises(pulumi.RunError, match=r"shardOf says this file was cut as shard 0 of fleet big at hash [0-9a-f]{12}, but the shard it holds hashes to [0-9a-f]{12}"):
        run_program("big-shard-0", shard_values(cut, 0))


def bound_to(stack: str) -> str:
    return rf"this file is shard \d+ of fleet \w+ \(shardOf\), which only stack [\w-]+ deploys, not stack {stack}: "


def test_a_shard_file_copied_to_another_shards_stack_refuses_to_deploy_and_registers_nothing(cut: Path):
    with pytest.raises(pulumi.RunError, match=bound_to("big-shard-1") + "run `pulumi up` on stack big-shard-0"):
        run_program("big-shard-1", shard_values(cut, 0))


def test_a_shard_files_index_or_fleet_edited_by_hand_refuses_in_every_stack(cut: Path):
    """In its own stack the binding refuses it; in the stack the edit names, the hash does."""
    for key, value, moved in (("index", 2, "big-shard-2"), ("fleet", "other", "other-shard-0")):
        values = shard_values(cut, 0)
        values["shardOf"][key] = value
        with pytest.raises(pulumi.RunError, match=bound_to("big-shard-0")):
            run_program("big-shard-0", values)
        with pytest.raises(pulumi.RunError, match=r"shardOf says this file was cut as shard \d of fleet \w+ at hash"):
            run_program(moved, values)


def test_a_shard_index_that_holds_no_host_refuses_rather_than_deleting_the_stack(cut: Path):
    """Even with the hash made for it: its program would register nothing, and `up` delete everything."""
    values = shard_values(cut, 0)
    values["shardOf"] |= {"index": 7, "fleetHash": parse_fleet("big-shard-0", shard_values(cut, 0)).shard_hash("big", 7)}
    with pytest.raises(pulumi.RunError, match=r"shardOf names shard 7 of fleet big, which holds no host \(its hosts are in shards 0, 1, 2\): `pulumi up` here would delete every resource of stack big-shard-7"):
        run_program("big-shard-7", values)


def test_check_says_why_a_shard_stack_would_refuse_its_file(cut: Path, capsys):
    (cut / "Pulumi.big-shard-1.yaml").write_bytes((cut / "Pulumi.big-shard-0.yaml").read_bytes())
    capsys.readouterr()
    assert cli(["shards", "--check", "--config", str(cut / "Pulumi.big.yaml")]) == 1
    err = capsys.readouterr().err
    assert "Pulumi.big-shard-1.yaml differs from the fleet's cut, and its stack would refuse it: stack big-shard-1: " in err
    assert re.search(bound_to("big-shard-1"), err) and "Pulumi.big-shard-0.yaml" not in err


def test_the_fleet_itself_refuses_to_deploy_as_one_stack(cut: Path):
    values = stack_values(locate(None, str(cut / "Pulumi.big.yaml")))
    with pytest.raises(pulumi.RunError, match=r"stack big is a fleet deployed as shards .*pulumi up. on each big-shard-K stack"):
        run_program("big", values)


def test_check_names_a_shard_file_the_fleet_has_moved_past(cut: Path, capsys):
    fleet = cut / "Pulumi.big.yaml"
    assert cli(["shards", "--check", "--config", str(fleet)]) == 0
    fleet.write_text(fleet.read_text().replace("0.2, host: npu-c", "0.25, host: npu-c"))
    capsys.readouterr()
    assert cli(["shards", "--check", "--config", str(fleet)]) == 1
    err = capsys.readouterr().err
    assert "Pulumi.big-shard-0.yaml differs from the fleet's cut" in err and "run python -m allocation shards --stack big" in err


def test_adding_hosts_to_the_fleet_changes_no_existing_shards_resources_once_hosts_are_pinned(tmp_path: Path, capsys):
    """Pinned hosts (`shard:`) keep their shard; the new ones fill the last shard with room and beyond."""
    pinned = fleet_text().replace("10.0.0.1}", "10.0.0.1, shard: 0}").replace("10.0.0.2}", "10.0.0.2, shard: 0}")
    pinned = pinned.replace("10.0.0.3}", "10.0.0.3, shard: 1}").replace("10.0.0.4}", "10.0.0.4, shard: 1}")
    pinned = pinned.replace("10.0.0.5}", "10.0.0.5, shard: 2}")
    fleet = tmp_path / "Pulumi.big.yaml"
    fleet.write_text(pinned)
    assert cli(["shards", "--config", str(fleet)]) == 0
    before = {k: run_program(f"big-shard-{k}", shard_values(tmp_path, k)).registered() for k in range(3)}
    grown = pinned.replace("  ascend-fleet:services:", "    - {name: npu-0, address: 10.0.0.9}\n    - {name: npu-f, address: 10.0.0.6}\n  ascend-fleet:services:")
    fleet.write_text(grown)
    assert cli(["shards", "--config", str(fleet)]) == 0
    capsys.readouterr()
    after = {k: run_program(f"big-shard-{k}", shard_values(tmp_path, k)).registered() for k in range(4)}
    assert {k: after[k] for k in range(3)} == before
    assert after[3] == []  # npu-0 and npu-f: shard 2 had room for one, the other opens shard 3; no service on either


def test_pin_writes_each_hosts_shard_so_hosts_added_later_move_no_host(tmp_path: Path, capsys):
    fleet = tmp_path / "Pulumi.big.yaml"
    fleet.write_text(fleet_text("edcba"))
    assert cli(["pin", "--config", str(fleet)]) == 0, capsys.readouterr().err
    assert "chat, embed, big, small, host npu-e, host npu-d, host npu-c, host npu-b, host npu-a" in capsys.readouterr().out
    text = fleet.read_text()
    assert "{name: npu-a, address: 10.0.0.5, shard: 0}" in text and "{name: npu-e, address: 10.0.0.1, shard: 2}" in text
    assert cli(["pin", "--config", str(fleet)]) == 0
    assert "nothing new" in capsys.readouterr().out
    fleet.write_text(text.replace("  ascend-fleet:services:", "    - {name: npu-0, address: 10.0.0.9}\n  ascend-fleet:services:"))
    plan = plan_of(stack_values(locate(None, str(fleet))), "big")
    assert {hp.host.name: hp.shard for hp in plan.hosts} == {
        "npu-0": 2, "npu-a": 0, "npu-b": 0, "npu-c": 1, "npu-d": 1, "npu-e": 2,
    }  # fmt: skip
