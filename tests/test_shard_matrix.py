"""`shards --matrix`: the stacks a deploy workflow runs, each with a `--parallel` at which no container
waits for a slot (docs/shards.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from allocation.planner import plan_fleet
from cli.shards import HOST_SLOTS, deploy_matrix, preview_matrix
from tests.support.stacks import fleet, host, service

REPO = Path(__file__).resolve().parents[1]


def test_each_shard_gets_a_slot_for_every_container_it_deploys_and_its_hosts_steps():
    hosts = [host(n) for n in "abc"]
    services = [service(f"s{i}", 1, 0.2, host=h) for i, h in enumerate("aaabbc")]
    plan = plan_fleet(fleet(hosts, services, shards={"size": 2}))
    assert deploy_matrix("prod", plan) == [
        {"stack": "prod-shard-0", "parallel": 5 + 2 * HOST_SLOTS},  # a: 3 containers, b: 2
        {"stack": "prod-shard-1", "parallel": 1 + HOST_SLOTS},
    ]


def test_a_replicated_services_router_takes_a_slot_in_its_shard():
    plan = plan_fleet(fleet([host("a"), host("b")], [service("r", 1, 0.2, replicas=2)], shards={"size": 2}))
    [row] = deploy_matrix("prod", plan)
    assert row == {"stack": "prod-shard-0", "parallel": 3 + 2 * HOST_SLOTS}


def test_every_member_of_a_group_takes_a_slot_in_its_shard_so_the_whole_group_starts_at_once():
    """Each member waits until its group serves: with one service's 9 slots, 7 of the 16 members would
    wait for a slot that the 9 others never give back."""
    hosts = [host(f"h{i:02}", address=f"10.0.0.{i}") for i in range(17)]
    group = service("wide", 8, 0.9, dataParallel={"size": 16, "perHost": 1})
    plan = plan_fleet(fleet(hosts, [service("small", 1, 0.2, host="h00"), group], shards={"size": 20}))
    assert sorted(mp.host.name for mp in plan.groups[0].members) == [f"h{i:02}" for i in range(1, 17)]
    assert deploy_matrix("prod", plan) == [{"stack": "prod-shard-0", "parallel": (1 + HOST_SLOTS) + 16 * (1 + HOST_SLOTS)}]


def test_the_preview_matrix_has_the_rows_of_the_shards_asked_and_one_for_a_shard_without_containers():
    """Shards 0, 1, 2 hold a-b, c-d, e-f; c and d hold no container, yet their preview shows what is deleted."""
    services = [service("s", 1, 0.2, host="a"), service("t", 1, 0.2, host="e")]
    plan = plan_fleet(fleet([host(n) for n in "abcdef"], services, shards={"size": 2}))
    assert preview_matrix("prod", plan, [2, 0, 1]) == [
        {"stack": "prod-shard-0", "parallel": 1 + HOST_SLOTS},  # the hosts in use, as deploy_matrix
        {"stack": "prod-shard-1", "parallel": 2 * HOST_SLOTS},  # each of its hosts
        {"stack": "prod-shard-2", "parallel": 1 + HOST_SLOTS},
    ]


def test_a_shard_whose_last_service_went_is_still_deployed_so_its_up_deletes_what_it_held():
    """Shards 0, 1, 2 hold a-b, c-d, e-f; c and d hold no container any more."""
    services = [service("s", 1, 0.2, host="a"), service("t", 1, 0.2, host="e")]
    plan = plan_fleet(fleet([host(n) for n in "abcdef"], services, shards={"size": 2}))
    assert [row["stack"] for row in deploy_matrix("prod", plan)] == ["prod-shard-0", "prod-shard-1", "prod-shard-2"]


def test_a_stack_whose_last_service_went_is_still_deployed():
    plan = plan_fleet(fleet([host("a"), host("b")], []))
    assert deploy_matrix("staging", plan) == [{"stack": "staging", "parallel": 2 * HOST_SLOTS}]


def test_a_fleet_not_deployed_as_shards_is_one_stack_over_its_hosts_in_use():
    plan = plan_fleet(fleet([host("a"), host("b")], [service("s", 1, 0.2, host="a")]))
    assert deploy_matrix("staging", plan) == [{"stack": "staging", "parallel": 1 + HOST_SLOTS}]


def test_the_matrix_command_prints_json_for_the_workflow_and_writes_nothing():
    proc = subprocess.run(
        [sys.executable, "-m", "allocation", "shards", "--stack", "prod", "--matrix"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    [row] = json.loads(proc.stdout)
    assert row["stack"] == "prod" and row["parallel"] >= 3
