"""A disaggregated service's deployment records (records.disaggregated): each prefill and decode instance's exact
container on the host network (its `--kv-transfer-config` the plan's, `/etc/hccn.conf` read-only, its HCCL windows,
its own /health), the proxy running vllm-ascend's example with the plan's flags, and both among their host's
containers with the plan JSON's kinds."""

from __future__ import annotations

import json

from allocation import names
from records.containers import HCCN_CONF, HOST_NETWORK, START_GATE
from records.disaggregated import PROXY_SCRIPT
from views.endpoints import endpoints
from views.report import plan_json
from tests.support.pipeline import deployment_of
from tests.support.disaggregated import example, pd, values
from tests.support.stacks import host


def test_an_instance_runs_vllm_serve_on_the_host_network_with_the_plans_kv_transfer_config_as_compact_json():
    deployment = example()
    (d,) = deployment.disaggregated
    prefill, decode = d.instances
    spec = prefill.spec
    assert (spec.name, spec.network_mode, spec.ports, dict(spec.sysctls)) == ("qwen-pd-prefill", HOST_NETWORK, (), {})
    assert spec.command[spec.command.index(START_GATE) + 2 :] == (
        "vllm", "serve", "/models/Qwen3-32B", "--served-model-name", "qwen3-32b", "--host", "0.0.0.0", "--port", "8001",
        "--tensor-parallel-size", "4", "--gpu-memory-utilization", "0.9", "--max-model-len", "32768",
        "--kv-transfer-config", '{"kv_connector":"MooncakeConnectorV1","kv_role":"kv_producer","kv_port":28004,'
        '"engine_id":"qwen-pd-prefill","kv_connector_extra_config":{"prefill":{"dp_size":1,"tp_size":4},'
        '"decode":{"dp_size":1,"tp_size":4}}}',
        "--trust-remote-code", "--no-enable-prefix-caching",
    )  # fmt: skip
    doc = plan_json(deployment)["disaggregated"][0]
    for entry, instance in zip((*doc["prefill"], *doc["decode"]), d.instances):
        flag = instance.spec.command.index("--kv-transfer-config")
        assert json.loads(instance.spec.command[flag + 1]) == entry["kvTransferConfig"]
    assert decode.spec.command.count("--kv-transfer-config") == 1 and '"kv_role":"kv_consumer"' in " ".join(decode.spec.command)


def test_an_instance_mounts_hccn_conf_read_only_and_carries_its_hccl_windows_cards_and_own_health_check():
    prefill = example().disaggregated[0].instances[0]
    spec = prefill.spec
    assert [(m.source, m.read_only) for m in spec.mounts if m.target == HCCN_CONF] == [(HCCN_CONF, True)]
    env = dict(spec.env)
    assert {k: env[k] for k in env if k.startswith(("HCCL_", "ASCEND_", "VLLM_PORT"))} == {
        "HCCL_BUFFSIZE": "512", "HCCL_IF_IP": "10.20.0.11", "HCCL_NPU_SOCKET_PORT_RANGE": "16682-16697", "HCCL_HOST_SOCKET_PORT_RANGE": "61072-61087",
        "HCCL_IF_BASE_PORT": "61096", "VLLM_PORT": "62016", "ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3",
        "ASCEND_FLEET_CONTAINER": "qwen-pd-prefill", "ASCEND_FLEET_CARDS": "0,1,2,3",
        "ASCEND_FLEET_HEALTH_URL": "http://127.0.0.1:8001/health", "ASCEND_FLEET_START_WAIT_SECONDS": "1800",
    }  # fmt: skip
    assert spec.device_files[:4] == tuple(f"/dev/davinci{c}" for c in range(4)) and "/dev/davinci4" not in spec.device_files
    assert "http://127.0.0.1:8001/health" in spec.healthcheck.test[1] and spec.api_port == 8001
    assert {k: v for k, v in spec.labels.items() if k.endswith(("disaggregated", "role", "kv-port"))} == {
        "ascend-fleet.kv-port": "28004", "ascend-fleet.disaggregated": "qwen-pd", "ascend-fleet.role": "prefill"}
    # Both roles share their service's compile cache, as replicas do.
    caches = {m.source for i in example().disaggregated[0].instances for m in i.spec.mounts if m.target == "/root/.cache"}
    assert caches == {"/var/lib/ascend-fleet/cache/qwen-pd"}


def test_each_instance_carries_its_hosts_nic_variables_as_a_member_there_would_and_the_plan_json_shows_them():
    # vllm-ascend@v0.20.2rc1 pd_disaggregation_mooncake_single_node.md, for the prefiller and the decoder alike:
    # export HCCL_IF_IP=192.0.0.1 (node ip), GLOO_SOCKET_IFNAME, TP_SOCKET_IFNAME, HCCL_SOCKET_IFNAME="eth0".
    vals = values(pd(disaggregated={"prefill": {"tensorParallelSize": 4, "replicaPins": [{"host": "a"}]},
                                    "decode": {"tensorParallelSize": 4, "replicaPins": [{"host": "b"}]}}))  # fmt: skip
    vals["hosts"][1]["nic"] = {"address": "192.168.1.2", "interface": "eth1"}
    deployment = deployment_of(vals)
    prefill, decode = deployment.disaggregated[0].instances
    nic = ("HCCL_IF_IP", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME")
    assert {k: v for k, v in prefill.spec.env.items() if k in nic} == {"HCCL_IF_IP": "10.0.0.1"}
    assert {k: v for k, v in decode.spec.env.items() if k in nic} == {
        "HCCL_IF_IP": "192.168.1.2", "GLOO_SOCKET_IFNAME": "eth1", "TP_SOCKET_IFNAME": "eth1", "HCCL_SOCKET_IFNAME": "eth1"}
    assert {k: v for k, v in decode.spec.env.items() if k in nic} == decode.plan.host.nic_env()
    doc = plan_json(deployment)["disaggregated"][0]
    assert [i["env"] for i in (*doc["prefill"], *doc["decode"])] == [{"HCCL_IF_IP": "10.0.0.1"}, decode.plan.host.nic_env()]


def test_a_service_that_mounts_its_own_hccn_conf_keeps_it_and_gets_no_second_mount_there():
    own = {"source": "/opt/hccn/hccn.conf", "target": HCCN_CONF}
    d = deployment_of(values(pd(mounts=[own]))).disaggregated[0]
    for instance in d.instances:
        assert [m.source for m in instance.spec.mounts if m.target == HCCN_CONF] == ["/opt/hccn/hccn.conf"]


def test_the_proxy_runs_vllm_ascends_example_from_the_services_image_with_the_plans_flags_on_the_host_network():
    deployment = example()
    proxy = deployment.disaggregated[0].proxy
    spec = proxy.spec
    doc = plan_json(deployment)["disaggregated"][0]["proxy"]
    assert spec.command == ("python3", PROXY_SCRIPT, *doc["args"])
    assert PROXY_SCRIPT == "/vllm-workspace/vllm-ascend/examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py"
    assert (spec.name, spec.image, spec.network_mode, spec.ports) == (
        "qwen-pd-proxy", "quay.io/ascend/vllm-ascend:v0.20.2rc1", HOST_NETWORK, ())
    assert (spec.device_files, spec.mounts, spec.privileged, spec.api_port) == ((), (), False, 8002)
    assert "http://127.0.0.1:8002/healthcheck" in spec.healthcheck.test[1]
    assert proxy.endpoint == deployment.disaggregated[0].endpoint == "http://10.20.0.11:8002/v1"
    assert [i.name for i in proxy.instances] == ["qwen-pd-prefill", "qwen-pd-decode"]


def test_the_host_lists_each_instance_and_the_proxy_with_the_plan_jsons_kinds_and_pulls_the_image():
    deployment = example()
    (hd,) = deployment.hosts
    doc = plan_json(deployment)["disaggregated"][0]
    kinds = {e["name"]: e["kind"] for e in (*doc["prefill"], *doc["decode"], doc["proxy"])}
    assert {c.name: c.kind for c in hd.planned} == kinds == {
        "qwen-pd-decode": names.ROLE, "qwen-pd-prefill": names.ROLE, "qwen-pd-proxy": names.PROXY}
    assert [(c.name, c.service, c.cards, c.endpoint, c.role) for c in hd.planned] == [
        ("qwen-pd-decode", "qwen-pd", (4, 5, 6, 7), "http://10.20.0.11:8000/v1", "decode"),
        ("qwen-pd-prefill", "qwen-pd", (0, 1, 2, 3), "http://10.20.0.11:8001/v1", "prefill"),
        ("qwen-pd-proxy", "qwen-pd", (), "http://10.20.0.11:8002/v1", None),
    ]  # fmt: skip
    assert hd.containers[1][2] == "on cards 0,1,2,3 as a prefill instance of qwen-pd (host network)"
    assert hd.in_use and hd.images == ("quay.io/ascend/vllm-ascend:v0.20.2rc1",)


def test_instances_and_the_proxy_sit_on_their_own_hosts_and_a_host_with_only_the_proxy_is_in_use():
    vals = values(pd(disaggregated={"prefill": {"tensorParallelSize": 4, "replicaPins": [{"host": "a"}]},
                                    "decode": {"tensorParallelSize": 4, "replicaPins": [{"host": "b"}]},
                                    "proxy": {"host": "c"}}))  # fmt: skip
    vals["hosts"].append(host("c", address="10.0.0.3"))
    deployment = deployment_of(vals)
    assert {hd.name: [c.name for c in hd.planned] for hd in deployment.hosts} == {
        "a": ["pd-prefill"], "b": ["pd-decode"], "c": ["pd-proxy"]}
    assert all(hd.in_use for hd in deployment.hosts)
    (d,) = deployment.disaggregated
    assert d.proxy.spec.command[-8:] == ("--prefiller-hosts", "10.0.0.1", "--prefiller-ports", "8000",
                                         "--decoder-hosts", "10.0.0.2", "--decoder-ports", "8000")  # fmt: skip


def test_the_endpoints_command_lists_a_disaggregated_service_at_its_proxys_endpoint():
    assert [(e.service, e.name, e.kind, e.host, e.endpoint) for e in endpoints(example())] == [
        ("qwen-pd", "qwen-pd", "disaggregated", "npu-a", "http://10.20.0.11:8002/v1")]
