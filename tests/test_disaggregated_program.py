"""`pulumi up` of a disaggregated service under Pulumi's mocks: each prefill and decode instance one container on
its host's network, none waiting for another; the proxy after every instance; the service's endpoint the proxy's;
and `plan --against` naming exactly the containers a change to either role re-creates (components.prefill_decode,
components.proxy)."""

from __future__ import annotations

from functools import cache

from cli.stackfile import locate, stack_values
from views.diff import diff_plans, render_diff
from tests.support.disaggregated import EXAMPLE
from tests.support.pipeline import deployment_of, plan_json_of
from tests.support.provider_readback import recreates
from tests.support.pulumi_harness import CONTAINER, PROVIDER, REMOTE_COMMAND, run_program

STACK = "pd-1p1d"
INSTANCE = "ascend-fleet:index:PrefillDecodeInstance"
PROXY = "ascend-fleet:index:Proxy"


def values() -> dict:
    return stack_values(locate(None, EXAMPLE))


@cache
def run():
    return run_program(STACK, values())


def test_each_instance_is_one_container_of_its_host_on_the_host_network_as_its_record_says():
    (d,) = deployment_of(values(), STACK).disaggregated
    containers = run().by_name(CONTAINER)
    instances = run().by_name(INSTANCE)
    provider = {r.name: r.urn for r in run().of_type(PROVIDER)}["npu-a-docker"]
    for i in d.instances:
        container = containers[f"{i.name}-container"]
        inputs = container.inputs
        assert (inputs["name"], inputs["networkMode"], inputs.get("ports", [])) == (i.name, "host", [])
        assert inputs["command"] == list(i.spec.command) and inputs["envs"] == [f"{k}={v}" for k, v in i.spec.env.items()]
        assert {"type": "bind", "source": "/etc/hccn.conf", "target": "/etc/hccn.conf", "readOnly": True} in inputs["mounts"]
        assert container.provider_urn == provider and container.parent == instances[i.name].urn
        assert container.delete_before_replace


def test_no_instance_waits_for_another_and_the_proxy_waits_for_every_instance_and_the_hosts_check():
    containers = run().by_name(CONTAINER)
    check = {r.name: r.urn for r in run().of_type(REMOTE_COMMAND)}["npu-a-check"]
    prefill, decode = containers["qwen-pd-prefill-container"], containers["qwen-pd-decode-container"]
    assert prefill.urn not in decode.dependencies and decode.urn not in prefill.dependencies
    assert check in prefill.dependencies and check in decode.dependencies
    proxy = containers["qwen-pd-proxy-container"]
    assert {prefill.urn, decode.urn, check} <= set(proxy.dependencies)
    assert proxy.inputs["networkMode"] == "host" and proxy.inputs["command"][:2] == [
        "python3", "/vllm-workspace/vllm-ascend/examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py"]
    assert proxy.parent == run().by_name(PROXY)["qwen-pd-proxy"].urn


def test_the_services_output_gives_the_service_its_proxys_endpoint_and_each_instance_its_own_entry():
    services = run().stack_outputs["services"]
    assert services["qwen-pd"] == {"endpoint": "http://10.20.0.11:8002/v1", "prefill": ["qwen-pd-prefill"], "decode": ["qwen-pd-decode"]}
    assert {k: v for k, v in services["qwen-pd-prefill"].items() if v is not None} == {
        "endpoint": "http://10.20.0.11:8001/v1", "disaggregated": "qwen-pd", "role": "prefill", "engineId": "qwen-pd-prefill",
        "host": "npu-a", "devices": [0, 1, 2, 3], "apiPort": "8001", "hcclNpuSocketPortRange": "16682-16697",
        "hcclHostSocketPortRange": "61072-61087", "hcclIfBasePort": "61096", "vllmPort": "62016", "kvPort": "28004",
    }  # fmt: skip


def _replaced(before, after) -> dict[str, list[str]]:
    """Container name -> the inputs whose change makes the engine replace it, for every container that changed."""
    old, new = before.containers(), after.containers()
    return {n: keys for n in sorted(old.keys() | new.keys()) if (keys := recreates(old.get(n, {}), new.get(n, {})))}


def _restarted(changed: dict) -> tuple[dict[str, list[str]], str]:
    """What `pulumi up` re-creates after the change, and `plan --against`'s line for the service."""
    (line,) = diff_plans(plan_json_of(values(), STACK), plan_json_of(changed, STACK)).disaggregated
    return _replaced(run(), run_program(STACK, changed)), line


def test_a_change_to_the_decode_roles_size_re_creates_both_instances_not_the_proxy_as_plan_against_says():
    changed = values()
    changed["services"][0]["disaggregated"]["decode"] = {"tensorParallelSize": 2, "replicaPins": [{"devices": [4, 5]}]}
    replaced, line = _restarted(changed)
    assert replaced == {"qwen-pd-decode": ["command", "devices", "envs", "labels"], "qwen-pd-prefill": ["command"]}
    assert line.endswith("; restarts qwen-pd-prefill, qwen-pd-decode")
    assert "qwen-pd-prefill: kvTransferConfig, container command;" in line and "qwen-pd-proxy" not in line


def test_a_moved_prefill_api_port_re_creates_the_prefill_instance_and_the_proxy_as_plan_against_says():
    changed = values()
    changed["services"][0]["disaggregated"]["prefill"]["replicaPins"] = [{"devices": [0, 1, 2, 3], "apiPort": 8100}]
    replaced, line = _restarted(changed)
    # The proxy's port is handed out after the instances' windows, so it moves too.
    assert sorted(replaced) == ["qwen-pd-prefill", "qwen-pd-proxy"] and replaced["qwen-pd-proxy"] == ["command", "labels"]
    assert line.endswith("; restarts qwen-pd-prefill, qwen-pd-proxy")
    assert "qwen-pd-proxy: args, proxyPort, container command, container labels, container healthcheck;" in line


def test_plan_against_says_the_restarts_are_the_disaggregated_service_above_the_table():
    changed = values()
    changed["services"][0]["args"] = [*changed["services"][0]["args"], "--enable-chunked-prefill"]
    replaced, line = _restarted(changed)
    assert replaced == {"qwen-pd-decode": ["command"], "qwen-pd-prefill": ["command"]}
    assert line.endswith("; restarts qwen-pd-prefill, qwen-pd-decode")
    table = render_diff(diff_plans(plan_json_of(values(), STACK), plan_json_of(changed, STACK)), "table").splitlines()
    assert "Will restart: no running container but the disaggregated service(s) above." in table
