"""The replica model: a replicated service is one configured service with N instances, not N
services. The plan keeps the configured fleet, every instance carries its service, and
`replicaOf`/`replica_of` mean one thing wherever the plan is read.
"""

from __future__ import annotations

import json

from allocation.config import parse_fleet
from records.deployment import deploy
from views.diff import diff_plans, render_diff
from allocation.planner import plan_fleet
from views.report import plan_json
from cli.pin import stack_pins
from views.exports import prometheus
from tests.goldens import PROFILE
from tests.support.stacks import host, service
from tests.support.pipeline import deployment_of, plan_json_of, plan_of

VALUES = {
    "hosts": [host("npu-a"), host("npu-b")],
    "services": [
        service("bge", 1, 0.1, replicas=2, previousNames=["embed"], replicaPins=[{"host": "npu-b", "apiPort": 9100}]),
        {**service("chat", 1, 0.5, maxModelLen=4096, profile=PROFILE), "memoryFraction": "auto"},
    ],
}


def test_the_plan_keeps_the_configured_fleet_and_each_instance_carries_its_service_as_configured():
    fleet = parse_fleet("test", VALUES)
    plan = plan_fleet(fleet)
    assert plan.fleet == fleet
    instances = {ps.name: ps.instance for _, ps in plan.services()}
    assert sorted(instances) == ["bge-1", "bge-2", "chat"]
    assert instances["bge-1"].service is fleet.services[0] and instances["bge-2"].service is fleet.services[0]
    assert instances["chat"].service.memory_fraction == "auto" and instances["chat"].memory_fraction < 1


def test_a_replica_takes_its_own_pins_and_its_own_names_under_the_services_previous_names():
    plan = plan_of(VALUES)
    by_name = {ps.name: (hp.host.name, ps) for hp, ps in plan.services()}
    where, first = by_name["bge-1"]
    assert (where, first.assignment.api_port) == ("npu-b", 9100)
    assert first.instance.previous_names == ("embed-1",) and by_name["bge-2"][1].instance.previous_names == ("embed-2",)
    spec = {sd.name: sd.spec for hd in deploy(plan).hosts for sd in hd.services}
    assert spec["bge-2"].name == "embed-2", "a renamed replica keeps its container's name"
    argv = spec["bge-2"].command
    assert argv[argv.index("--served-model-name") + 1] == "embed", "every replica answers to the service's model"


def test_replica_of_names_the_service_a_container_serves_in_the_plan_json_and_in_prometheus_alike():
    deployment = deployment_of(VALUES)
    in_json = {s["name"]: s["replicaOf"] for h in plan_json(deployment)["hosts"] for s in h["services"]}
    targets = prometheus.targets(deployment)[prometheus.VLLM_TARGETS]
    in_prometheus = {t["labels"]["service"]: t["labels"]["replica_of"] for t in targets}
    assert in_json == in_prometheus == {"bge-1": "bge", "bge-2": "bge", "chat": "chat"}


def test_a_plan_written_before_the_replica_model_with_null_replica_of_diffs_as_unchanged():
    new = plan_json_of(VALUES)
    old = json.loads(json.dumps(new))
    for h in old["hosts"]:
        for s in h["services"]:
            s["replicaOf"] = None if s["replicaOf"] == s["name"] else s["replicaOf"]
    assert old != new
    diff = diff_plans(old, new)
    assert not diff.has_changes
    added = {d.name: d for d in diff_plans(None, new).services}
    assert added["bge-1"].lines()[0][1].startswith("replica of bge, ")
    assert not added["chat"].lines()[0][1].startswith("replica of"), "a service of its own is no replica"
    without_chat = plan_json_of({**VALUES, "services": VALUES["services"][:1]})
    removed = {d.name: d for d in diff_plans(old, without_chat).services}
    assert removed["chat"].lines() == [("removed", "was on npu-b cards 0")]


def test_a_re_created_service_of_its_own_costs_its_model_load_and_a_replica_one_replica_at_a_time():
    old = plan_json_of(VALUES)
    upgraded = {**VALUES, "defaults": {"image": "quay.io/ascend/vllm-ascend:v0.21.0"}}
    text = render_diff(diff_plans(old, plan_json_of(upgraded)), "table")
    restarts = text.split("\n\n")[0].splitlines()  # the "Will restart" table comes first
    rows = {line.split()[1]: line for line in restarts if line.split()[:1] in (["npu-a"], ["npu-b"])}
    assert rows["chat"].endswith("down for the model load")
    assert rows["bge-1"].endswith("replica of bge: one replica at a time, the others keep serving")


def test_pinning_a_replicated_service_limited_to_hosts_writes_each_replicas_host_and_plans_the_same_again():
    values = {"hosts": [host("npu-a"), host("npu-b"), host("npu-c")],
              "services": [service("bge", 1, 0.1, replicas=2, hosts=["npu-b", "npu-c"])]}  # fmt: skip
    plan = plan_of(values)
    pins = stack_pins(plan)["bge"]
    assert [p["host"] for p in pins["replicaPins"]] == ["npu-b", "npu-c"] and "hosts" not in pins["replicaPins"][0]
    pinned = {**values, "services": [{**values["services"][0], **pins}]}
    again = plan_of(json.loads(json.dumps(pinned)))
    assert plan_json(deploy(again)) == plan_json(deploy(plan))
