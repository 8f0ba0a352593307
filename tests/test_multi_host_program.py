"""`pulumi up` of a multi-host service under Pulumi's mocks: each member one container on its host's
network, none waiting for another, and the group's endpoint in the stack output (components.group_member)."""

from __future__ import annotations

from functools import cache
from pathlib import Path


from cli.stackfile import StackFile, stack_values
from records.group import DIGEST_LABEL
from views.diff import diff_plans, render_diff
from tests.support.pipeline import deployment_of, plan_json_of
from tests.support.provider_readback import recreates
from tests.support.pulumi_harness import ASCEND_HOST, CONTAINER, PROVIDER, REMOTE_COMMAND, run_program

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "Pulumi.deepseek-r1.yaml"
STACK = "deepseek-r1"
GROUP_MEMBER = "ascend-fleet:index:GroupMember"


def values(**changes) -> dict:
    return stack_values(StackFile(STACK, EXAMPLE)) | changes


@cache
def run():
    return run_program(STACK, values())


def test_each_member_is_one_container_of_its_host_on_the_host_network_publishing_nothing():
    deployment = deployment_of(values(), STACK)
    containers = run().by_name(CONTAINER)
    providers = {r.name: r.urn for r in run().of_type(PROVIDER)}
    members = run().by_name(GROUP_MEMBER)
    for g in deployment.groups:
        for md in g.members:
            container = containers[f"{md.name}-container"]
            inputs = container.inputs
            assert (inputs["name"], inputs["networkMode"], inputs.get("ports", [])) == (md.name, "host", [])
            assert container.provider_urn == providers[f"{md.plan.host.name}-docker"]
            assert container.parent == members[md.name].urn and container.delete_before_replace
            assert {"label": DIGEST_LABEL, "value": g.digest} in inputs["labels"]
            assert inputs["envs"] == [f"{k}={v}" for k, v in md.spec.env.items()]
            assert inputs["command"] == list(md.spec.command)
    assert all("networkMode" not in c.inputs for n, c in containers.items() if "-node" not in n)


def test_no_member_waits_for_another_only_for_its_hosts_check():
    containers = run().by_name(CONTAINER)
    checks = {r.name: r.urn for r in run().of_type(REMOTE_COMMAND)}
    member_urns = {c.urn for n, c in containers.items() if "-node" in n}
    for host, name in (("npu-a", "deepseek-r1-node0"), ("npu-b", "deepseek-r1-node1"), ("npu-d", "qwen3-moe-node1")):
        container = containers[f"{name}-container"]
        assert checks[f"{host}-check"] in container.dependencies
        assert not member_urns & set(container.dependencies), name


def test_the_services_output_gives_a_group_its_leaders_endpoint_and_each_member_its_host_cards_and_windows():
    services = run().stack_outputs["services"]
    assert services["deepseek-r1"] == {"endpoint": "http://10.20.0.11:8000/v1", "members": ["deepseek-r1-node0", "deepseek-r1-node1"]}
    assert {k: v for k, v in services["deepseek-r1-node1"].items() if v is not None} == {
        "endpoint": "http://10.20.0.11:8000/v1", "group": "deepseek-r1", "role": "follower", "host": "npu-b",
        "devices": list(range(8)), "hcclNpuSocketPortRange": "16666-16681", "hcclHostSocketPortRange": "61008-61023",
        "hcclIfBasePort": "61032",
    }  # fmt: skip
    assert services["deepseek-r1-node0"]["apiPort"] == "8000" and services["deepseek-r1-node0"]["dataParallelRpcPort"] == "29550"
    assert sorted(run().by_name(ASCEND_HOST)) == ["npu-a", "npu-b", "npu-c", "npu-d"]


def _replaced(before, after) -> dict[str, list[str]]:
    """Container name -> the inputs whose change makes the engine replace it, for every container that changed."""
    old, new = before.containers(), after.containers()
    return {n: keys for n in sorted(old.keys() | new.keys()) if (keys := recreates(old.get(n, {}), new.get(n, {})))}


def test_a_change_to_the_followers_host_alone_re_creates_every_member_and_nothing_else_as_plan_against_says_in_one_line():
    changed = values()
    changed["hosts"][1]["nic"] = {"interface": "eth9"}  # npu-b: only the follower's NIC variables
    assert _replaced(run(), run_program(STACK, changed)) == {"deepseek-r1-node0": ["labels"], "deepseek-r1-node1": ["envs", "labels"]}
    diff = diff_plans(plan_json_of(values(), STACK), plan_json_of(changed, STACK), against="main")
    table = render_diff(diff, "table")
    assert "Restarts as one: multi-host service deepseek-r1: deepseek-r1-node1: env, container env; a change to any member " \
        "restarts every member: deepseek-r1-node0, deepseek-r1-node1." in table.splitlines()
    assert "Will restart: no running container but the multi-host service(s) above." in table.splitlines()


def test_a_change_to_the_services_args_re_creates_every_member_and_plan_against_names_each_members_command():
    changed = values()
    changed["services"][0]["args"] = [*changed["services"][0]["args"], "--enable-prefix-caching"]
    assert _replaced(run(), run_program(STACK, changed)) == {
        "deepseek-r1-node0": ["command", "labels"], "deepseek-r1-node1": ["command", "labels"]}
    [line] = diff_plans(plan_json_of(values(), STACK), plan_json_of(changed, STACK)).groups
    assert line == ("multi-host service deepseek-r1: deepseek-r1-node0: container command; deepseek-r1-node1: container "
                    "command; a change to any member restarts every member: deepseek-r1-node0, deepseek-r1-node1")
