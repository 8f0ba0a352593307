"""A fleet deployed as shards (`ascend-fleet:shards`): which shard deploys each host, replicated
services and multi-host services kept in one shard, and what the plan says about it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from allocation.config import parse_fleet
from allocation.errors import FleetError
from allocation.planner import plan_fleet
from cli.main import main as cli
from cli.stackfile import locate, stack_values
from records.deployment import deploy
from tests.support.stacks import fleet, host, service
from views.report import plan_json, render_plan


def shards_of(plan) -> dict[str, int | None]:
    return {hp.host.name: hp.shard for hp in plan.hosts}


def test_a_fleet_without_shards_plans_no_shard_and_its_json_has_no_shard_key():
    plan = plan_fleet(fleet([host("a"), host("b")], [service("s")]))
    assert set(shards_of(plan).values()) == {None}
    assert all("shard" not in h for h in plan_json(deploy(plan))["hosts"])


def test_unpinned_hosts_fill_the_lowest_shard_with_room_in_name_order():
    hosts = [host(n) for n in ("e", "d", "c", "b", "a")]
    plan = plan_fleet(fleet(hosts, [service("s")], shards={"size": 2}))
    assert shards_of(plan) == {"a": 0, "b": 0, "c": 1, "d": 1, "e": 2}
    assert [h["shard"] for h in plan_json(deploy(plan))["hosts"]] == [0, 0, 1, 1, 2]


def test_a_pinned_host_keeps_its_shard_and_adding_hosts_moves_no_pinned_one():
    pinned = [host("m", shard=0), host("n", shard=0), host("z", shard=1)]
    plan = plan_fleet(fleet([*pinned, host("a"), host("b")], [service("s")], shards={"size": 2}))
    assert shards_of(plan) == {"m": 0, "n": 0, "z": 1, "a": 1, "b": 2}


def test_a_shard_pinned_over_its_size_is_refused_naming_it():
    with pytest.raises(FleetError, match=r"shard 0: 3 hosts are pinned to it, more than shards.size 2"):
        plan_fleet(fleet([host(n, shard=0) for n in "abc"], [service("s")], shards={"size": 2}))


def test_the_replicas_of_a_service_are_placed_in_the_shard_of_the_first():
    """Hosts a and b are shard 0, c and d shard 1; a and b are full, so without the rule the second
    and third replicas would spread over c and d, and the first sit in shard 0 alone."""
    hosts = [host(n) for n in "abcd"]
    full = [service(f"big-{n}", 8, 0.9, host=n) for n in "ab"]
    one = service("r", 8, 0.5, replicas=2)
    plan = plan_fleet(fleet(hosts, [*full, one], shards={"size": 2}))
    placed = {ps.name: hp.host.name for hp in plan.hosts for ps in hp.services}
    assert {placed["r-1"], placed["r-2"]} == {"c", "d"}
    three = service("r", 1, 0.05, replicas=3)
    plan = plan_fleet(fleet([host(n) for n in "abcd"], [three], shards={"size": 2}))
    shard = shards_of(plan)
    placed = [hp.host.name for hp in plan.hosts for ps in hp.services]
    assert len({shard[h] for h in placed}) == 1, placed


def test_a_pin_that_splits_a_replicated_service_over_shards_is_refused_naming_it():
    pins = [{"host": "a"}, {"host": "c"}]
    values = service("r", 1, 0.5, replicas=2, replicaPins=pins)
    with pytest.raises(FleetError, match=r"service r: its replicas and router would be deployed by shards 0, 1: a \(shard 0\), c \(shard 1\)"):
        plan_fleet(fleet([host(n) for n in "abcd"], [values], shards={"size": 2}))


def test_the_table_names_each_hosts_shard():
    plan = plan_fleet(fleet([host("a"), host("b")], [service("s")], shards={"size": 1}))
    text = render_plan(deploy(plan), "table")
    assert "a (a.example): 8 NPUs x 64 GiB (60.96 GiB usable), 1 service, shard 0" in text
    assert "b (b.example): 8 NPUs x 64 GiB (60.96 GiB usable), 0 services, shard 1" in text


FLEET = """\
config:
  ascend-fleet:shards: {size: 1}  # one host a shard
  ascend-fleet:hosts:
    - {name: a, address: 192.0.2.1}
    - {name: b, address: 192.0.2.2}
  ascend-fleet:services:
    - {name: s, model: /models/s, memoryFraction: 0.5}
"""


@pytest.mark.parametrize("newline", ["\r\n", "\r"], ids=["crlf", "cr"])
def test_a_fleet_file_with_crlf_or_cr_line_ends_is_cut_as_plan_reads_it_its_line_ends_kept(tmp_path: Path, newline: str, capsys):
    fleet = tmp_path / "Pulumi.f.yaml"
    fleet.write_bytes(FLEET.replace("\n", newline).encode())
    assert cli(["plan", "--config", str(fleet)]) == 0
    assert cli(["shards", "--config", str(fleet)]) == 0, capsys.readouterr().err
    for k in (0, 1):
        shard = tmp_path / f"Pulumi.f-shard-{k}.yaml"
        text = shard.read_bytes().decode()
        assert set(re.findall(r"\r\n|\r|\n", text)) == {newline}, "every line ends as the fleet's lines do"
        added = [rf"# Shard {k} of fleet f, .*?{newline}", rf"  ascend-fleet:shardOf: .*?{newline}"]
        assert re.sub("|".join(added), "", text) == FLEET.replace("\n", newline), "the fleet's file plus one key"
        values = stack_values(locate(None, str(shard)))
        assert values["shardOf"]["index"] == k and [h["name"] for h in values["hosts"]] == ["a", "b"]
    assert cli(["shards", "--check", "--config", str(fleet)]) == 0, capsys.readouterr().err


GROUPS = """\
config:
  ascend-fleet:shards: {size: 2}  # a-b shard 0, c-d shard 1, e-f shard 2
  ascend-fleet:hosts:
    - {name: a, address: 10.0.0.1}
    - {name: b, address: 10.0.0.2}
    - {name: c, address: 10.0.0.3}
    - {name: d, address: 10.0.0.4}
    - {name: e, address: 10.0.0.5}
    - {name: f, address: 10.0.0.6}
  ascend-fleet:services:
    - {name: busy, model: /models/busy, host: b, tensorParallelSize: 8, memoryFraction: 0.9}
    - {name: wide, model: /models/wide, tensorParallelSize: 4, memoryFraction: 0.9, dataParallel: {size: 4, perHost: 2}}
    - {name: half, model: /models/half, tensorParallelSize: 2, memoryFraction: 0.9, dataParallel: {size: 4, perHost: 2}}
"""


def test_a_fleet_with_groups_is_cut_into_shards_each_group_whole_in_the_shard_of_its_hosts(tmp_path: Path, capsys):
    """b is full, so a is shard 0's only free host: taking the first free hosts in name order would put
    each group over a and a host of another shard. Each group lies in one shard file, and the plan of
    every shard file holds every group whole, as the fleet's does."""
    (tmp_path / "Pulumi.f.yaml").write_text(GROUPS)
    assert cli(["shards", "--config", str(tmp_path / "Pulumi.f.yaml")]) == 0, capsys.readouterr().err
    fleet_plan = plan_fleet(parse_fleet("f", stack_values(locate(None, str(tmp_path / "Pulumi.f.yaml")))))
    whole = {g.name: [(mp.name, mp.host.name, mp.assignment) for mp in g.members] for g in fleet_plan.groups}
    assert {g: [h for _, h, _ in members] for g, members in whole.items()} == {"wide": ["c", "d"], "half": ["e", "f"]}
    deployed: dict[str, list[int]] = {}
    for k in (0, 1, 2):
        shard = locate(None, str(tmp_path / f"Pulumi.f-shard-{k}.yaml"))
        plan = plan_fleet(parse_fleet(shard.stack, stack_values(shard)))
        assert {g.name: [(mp.name, mp.host.name, mp.assignment) for mp in g.members] for g in plan.groups} == whole
        hosts = {hd.name for hd in deploy(plan).shard(k).hosts}
        for name, members in whole.items():
            held = {h for _, h, _ in members} & hosts
            assert held in (set(), {h for _, h, _ in members}), f"shard {k} deploys {held} of {name}"
            deployed.setdefault(name, []).extend([k] if held else [])
    assert deployed == {"wide": [1], "half": [2]}


def test_member_pins_on_hosts_of_two_shards_are_refused_naming_each_hosts_shard():
    hosts = [host(n, address=f"10.0.0.{i}") for i, n in enumerate("abcd", start=1)]
    pins = [{"host": "a"}, {"host": "c"}]
    group = service("wide", 4, 0.9, dataParallel={"size": 4, "perHost": 2, "memberPins": pins})
    with pytest.raises(FleetError, match=r"service wide: its members are pinned to hosts of different boards, HBM sizes or "
                       r"shards \(a: a2, 64 GiB, shard 0, c: a2, 64 GiB, shard 1\)"):
        plan_fleet(fleet(hosts, [group], shards={"size": 2}))
