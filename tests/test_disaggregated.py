"""A disaggregated service (prefill and decode apart, vllm-ascend's Mooncake connector): each mistake in its
config refused at the edge in one paragraph; the committed 1P1D example's exact plan (cards, windows,
kvPort blocks, engine ids, proxy); the plan JSON against its schema; `pin` and `plan --against`; and
the Kubernetes target refusing it in one paragraph (the docker target deploys it: tests/test_disaggregated_program.py)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from allocation.config import parse_fleet
from allocation.errors import AllocationError, ConfigError
from cli.pin import stack_pins
from cli.stackfile import load_fleet
from views.diff.compare import diff_plans
from views.exports.kubernetes import manifests
from views.plan_schema import plan_schema
from views.report import plan_json, render_plan
from tests.support.pipeline import deployment_of, plan_of
from tests.support.disaggregated import EXAMPLE, ROLES, example, pd, values
from tests.support.stacks import host, refusal

def example_values() -> dict:
    """The example's `ascend-fleet:` values, namespace stripped."""
    config = yaml.safe_load(Path(EXAMPLE).read_text())["config"]
    return {k.removeprefix("ascend-fleet:"): v for k, v in config.items()}


@pytest.mark.parametrize(
    ("vals", "words"),
    [
        (values(pd(tensorParallelSize=4)), "takes no tensorParallelSize of its own"),
        (values(pd(memoryFraction=0.5, host="a")), "takes no memoryFraction, host of its own"),
        (values(pd(replicas=2)), "takes no replicas"),
        (values(pd(apiPort=9000)), "takes no apiPort"),
        (values(pd(dataParallel={"size": 2, "perHost": 1})), "takes no dataParallel"),
        (values(pd(hcclPortRanges=False)), "both bind HCCL's default 16666 (vllm-ascend issue 4725)"),
        (values(pd(disaggregated={"connector": {"name": "NixlConnector"}})),
         "disaggregated.connector.name: 'NixlConnector' is not a connector this version plans: only MooncakeConnectorV1"),
        (values(pd(disaggregated={"prefill": {"tensorParallelSize": 3}})), "disaggregated.prefill.tensorParallelSize"),
        (values(pd(disaggregated={"prefill": {"memoryFraction": "auto"}})), "disaggregated.prefill.memoryFraction"),
        (values(pd(disaggregated={"decode": {"tensorParallelSize": 2, "replicas": 1, "replicaPins": [{}, {}]}})),
         "decode.replicaPins has 2 entries for 1 replicas"),
        (values(pd(disaggregated={"decode": {"tensorParallelSize": 2, "replicaPins": [{"devices": [0]}]}})),
         "decode.replicaPins entry 1: devices [0] pins 1 cards but decode.tensorParallelSize is 2"),
        (values(pd(disaggregated={"decode": {"replicaPins": [{"host": "c"}]}})),
         "disaggregated.decode.replicaPins entry 1: unknown host 'c'"),
        (values(pd(disaggregated={"proxy": {"host": "c"}})), "disaggregated.proxy.host: unknown host 'c'"),
        (values(pd(disaggregated={"kvPool": {"backend": "redis"}})), "disaggregated.kvPool.backend"),
        (values(pd(disaggregated={"prefill": {"replicaPins": [{"kvPort": 1000}]}})), "replicaPins[0].kvPort"),
        (values(pd(args=["--kv-transfer-config", "{}"])), "'--kv-transfer-config' sets --kv-transfer-config, which a disaggregated"),
        (values(pd(args=["--kv-transfer-config.kv_port=30000"])), "sets --kv-transfer-config"),
        (values(pd(args=["--kv_transfer_config={}"])), "sets --kv-transfer-config"),
        (values(pd(args=["--kv-events-config", "{}"])), "tcp://*:5557"),
        (values(pd(args=["-pp", "2"])), "'-pp' sets -pp"),
        (values(pd(args=["--prefill-context-parallel", "2"])), "sets --prefill-context-parallel-size"),
        (values(pd(), defaults={"args": ["--kv-transfer-config", "{}"]}), "defaults: args: '--kv-transfer-config'"),
        (values(pd(), {"name": "pd-prefill", "model": "/m"}), "its container pd-prefill has the name of another service"),
        (values(pd(env={"HCCL_IF_IP": "10.0.0.9"})), "HCCL_IF_IP is set by the plan from each host's nic (nic.address); remove it from env"),
        (values(pd(env={"GLOO_SOCKET_IFNAME": "eth0", "TP_SOCKET_IFNAME": "eth0"})),
         "GLOO_SOCKET_IFNAME is set by the plan from each host's nic (nic.interface); remove it from env; TP_SOCKET_IFNAME"),
        (values(pd(), defaults={"env": {"HCCL_SOCKET_IFNAME": "eth0"}}),
         "defaults: HCCL_SOCKET_IFNAME is set by the plan from each host's nic (nic.interface)"),
    ],
)
def test_each_mistake_in_a_disaggregated_service_is_one_paragraph_naming_it(vals, words):
    assert words in refusal(vals)


def test_a_service_without_disaggregated_may_still_carry_its_own_kv_transfer_config():
    fleet = parse_fleet("test", values({"name": "solo", "model": "/m", "args": ["--kv-transfer-config", "{}"]}))
    assert fleet.services[0].disaggregated is None


def test_an_image_outside_the_read_versions_is_refused_in_one_paragraph_naming_them():
    for image in ("quay.io/ascend/vllm-ascend:v0.13.0", "quay.io/ascend/vllm-ascend:v0.22.1rc1", "registry.local/my-vllm:latest"):
        with pytest.raises(AllocationError) as err:
            plan_of(values(pd(image=image)))
        assert "follows vLLM-Ascend 0.15 to 0.21 only" in str(err.value) and "\n" not in str(err.value)
    assert plan_of(values(pd(image="quay.io/ascend/vllm-ascend:v0.21.0rc1"))).disaggregated


def test_the_example_puts_prefill_on_cards_0_to_3_and_decode_on_4_to_7_with_every_port_and_id_planned():
    plan = example().plan
    (d,) = plan.disaggregated
    hccl = {"hcclNpuSocketPortRange": (16666, 16681), "hcclHostSocketPortRange": (61008, 61023), "hcclIfBasePort": (61032, 61063)}
    assert {rp.name: (rp.assignment.host_name, rp.assignment.cards, dict(rp.assignment.windows)) for rp in d.instances} == {
        "qwen-pd-prefill": ("npu-a", (0, 1, 2, 3), {
            "apiPort": (8001, 8001), "hcclNpuSocketPortRange": (16682, 16697), "hcclHostSocketPortRange": (61072, 61087),
            "hcclIfBasePort": (61096, 61127), "vllmPort": (62016, 62031), "kvPort": (28004, 28007)}),
        "qwen-pd-decode": ("npu-a", (4, 5, 6, 7), {
            "apiPort": (8000, 8000), **hccl, "vllmPort": (62000, 62015), "kvPort": (28000, 28003)}),
    }  # fmt: skip
    prefill, decode = d.instances
    # Both roles on one host bind distinct HCCL NPU windows, never both HCCL's default 16666 (vllm-ascend issue 4725).
    assert prefill.assignment.windows["hcclNpuSocketPortRange"] != decode.assignment.windows["hcclNpuSocketPortRange"]
    assert d.kv_transfer_config(prefill) == {
        "kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer", "kv_port": 28004, "engine_id": "qwen-pd-prefill",
        "kv_connector_extra_config": {"prefill": {"dp_size": 1, "tp_size": 4}, "decode": {"dp_size": 1, "tp_size": 4}},
    }  # fmt: skip
    assert d.kv_transfer_config(decode)["kv_role"] == "kv_consumer"
    assert d.proxy_args() == ("--host", "0.0.0.0", "--port", "8002", "--prefiller-hosts", "10.20.0.11", "--prefiller-ports",
                              "8001", "--decoder-hosts", "10.20.0.11", "--decoder-ports", "8000")  # fmt: skip
    assert d.endpoint == "http://10.20.0.11:8002/v1"
    lines = [" ".join(line.split()) for line in render_plan(example(), "table").splitlines()]
    assert lines[0] == "stack pd-1p1d: 1 host(s), 0 service(s), 1 disaggregated service(s)"
    assert "qwen-pd-prefill 0,1,2,3 4 0.9 (54.86 GiB) 8001 16682-16697 61072-61087 61096-61127 62016-62031 28004-28007" in lines
    assert "qwen-pd prefill qwen-pd-prefill npu-a 10.20.0.11:8001 28004-28007 qwen-pd-prefill -" in lines
    assert "qwen-pd proxy qwen-pd-proxy npu-a http://10.20.0.11:8002/v1 - - -" in lines


def test_the_kv_pool_gives_each_instance_a_multi_connector_with_its_own_lookup_rpc_port():
    plan = plan_of(values(pd(disaggregated={"kvPool": {}, "prefill": {"tensorParallelSize": 4, "replicas": 2}})))
    (d,) = plan.disaggregated
    config = d.kv_transfer_config(d.prefill[0])
    assert config["kv_connector"] == "MultiConnector" and config["engine_id"] == "pd-prefill-1"
    mooncake, store = config["kv_connector_extra_config"]["connectors"]
    assert "engine_id" not in mooncake and mooncake["kv_port"] == d.prefill[0].kv_ports[0]
    assert store == {"kv_connector": "AscendStoreConnector", "kv_role": "kv_producer",
                     "kv_connector_extra_config": {"lookup_rpc_port": d.prefill[0].lookup_rpc_port, "backend": "mooncake"}}  # fmt: skip
    on_host: dict[str, list[int]] = {}
    for rp in d.instances:
        on_host.setdefault(rp.assignment.host_name, []).append(rp.lookup_rpc_port)
    assert all(len(set(ports)) == len(ports) for ports in on_host.values())


def test_a_kv_port_pinned_in_the_transports_random_ports_is_refused_naming_the_range():
    vals = values(pd(disaggregated={"prefill": {"tensorParallelSize": 4, "replicaPins": [{"host": "a", "kvPort": 20001}]}}))
    with pytest.raises(AllocationError) as err:
        plan_of(vals)
    assert "kvPort of pd-prefill 20001-20004 overlaps AscendDirectTransport's random ports" in str(err.value)
    assert "20000-27999" in str(err.value)


def test_on_a_16_npu_host_the_kv_block_leaves_the_random_ports_and_the_ephemeral_ports_behind():
    plan = plan_of({"hosts": [host("a3", address="10.0.0.3", board="a3", npus=16)], "services": [pd()]})
    # Handed out in name order, decode first: past 20000-35999 (16 NPUs) and past the ephemeral 32768-60999.
    assert [rp.kv_ports for rp in plan.disaggregated[0].instances] == [(61004, 61007), (61000, 61003)]


def test_a_kv_block_that_would_run_past_65535_is_refused():
    vals = values(pd(disaggregated={"prefill": {"tensorParallelSize": 4, "replicaPins": [{"kvPort": 65534}]}}))
    with pytest.raises(AllocationError) as err:
        plan_of(vals)
    assert "kvPort of pd-prefill 65534-65537 runs past port 65535" in str(err.value)


FORTIES = {role: {"tensorParallelSize": 4, "memoryFraction": 0.4} for role in ("prefill", "decode")}
"""Both roles at 0.4: with a service of 0.4, all three would fit on one block of four cards by memory."""
SOLO = {"name": "solo", "model": "/m", "tensorParallelSize": 4, "memoryFraction": 0.4}


@pytest.mark.parametrize(
    ("fraction", "where"),
    [
        # The instances placed first (name order at equal fractions): the service joins neither.
        (0.4, {"pd-decode": ("a", (0, 1, 2, 3)), "pd-prefill": ("a", (4, 5, 6, 7)), "solo": ("b", (0, 1, 2, 3))}),
        # The service placed first (larger fraction): neither instance joins it, though best fit would.
        (0.5, {"solo": ("a", (0, 1, 2, 3)), "pd-decode": ("a", (4, 5, 6, 7)), "pd-prefill": ("b", (0, 1, 2, 3))}),
    ],
)
def test_each_instance_holds_its_cards_alone_where_memory_would_let_it_share_them(fraction, where):
    plan = plan_of(values(SOLO | {"memoryFraction": fraction}, pd(disaggregated=FORTIES)))
    placed = {p.name: (p.assignment.host_name, p.assignment.cards) for hp in plan.hosts for p in (*hp.services, *hp.roles)}
    # Each instance on a host network with HCCL and the KV transfer on its cards: no other service on them.
    assert placed == where
    assert all(hp.shared_cards() == () for hp in plan.hosts)


@pytest.mark.parametrize(
    ("solo", "role", "words"),
    [
        # The service pinned where the instance is pinned: the instance, placed first (larger fraction), holds them.
        ({"memoryFraction": 0.3}, {"memoryFraction": 0.4},
         "service solo: pinned devices [0, 1, 2, 3] do not fit on host a: a card 0 is held by pd-prefill, a prefill or "
         "decode instance, which holds its cards alone;"),
        # The instance pinned where the service is: refused, naming the instance, its host and its cards.
        ({"memoryFraction": 0.5}, {"memoryFraction": 0.4},
         "service pd-prefill: pinned devices [0, 1, 2, 3] do not fit on host a: a card 0 is used by solo, and pd-prefill, "
         "a prefill or decode instance, holds its cards alone (give it other devices);"),
    ],
)
def test_an_instance_pinned_to_share_a_card_with_a_service_is_refused_in_one_paragraph(solo, role, words):
    pins = {"replicaPins": [{"host": "a", "devices": [0, 1, 2, 3]}]}
    vals = values(SOLO | solo | {"host": "a", "devices": [0, 1, 2, 3]}, pd(disaggregated={"prefill": FORTIES["prefill"] | role | pins}))
    with pytest.raises(AllocationError) as err:
        plan_of(vals)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_prefill_and_decode_pinned_to_one_card_are_refused():
    pins = {role: FORTIES[role] | {"replicaPins": [{"host": "a", "devices": [0, 1, 2, 3]}]} for role in FORTIES}
    with pytest.raises(AllocationError) as err:
        plan_of(values(pd(disaggregated=pins)))
    assert "a card 0 is held by pd-decode, a prefill or decode instance, which holds its cards alone" in str(err.value)


def test_instances_go_only_to_hosts_with_an_ip_address_for_hccl_if_ip_as_members_do():
    # Host a is named by a host name and sets no nic.address: the tutorials' HCCL_IF_IP has nothing to be.
    plan = plan_of({"hosts": [host("a"), host("b", address="10.0.0.2")], "services": [pd()]})
    assert {rp.name: rp.assignment.host_name for rp in plan.disaggregated[0].instances} == {"pd-prefill": "b", "pd-decode": "b"}


@pytest.mark.parametrize(
    ("hosts", "role", "words"),
    [
        ([host("a"), host("b", address="10.0.0.2")], {"replicaPins": [{"host": "a"}]},
         "service pd-prefill (a prefill or decode instance) is pinned to host a, which has no IP address for HCCL_IF_IP "
         "(set its nic.address)"),
        ([host("a"), host("b")], {"replicaPins": [{"devices": [0, 1, 2, 3]}]},
         "service pd-prefill (a prefill or decode instance) has no host in the fleet with an IP address for HCCL_IF_IP; "
         "hosts without an IP address for HCCL_IF_IP (nic.address): a, b"),
    ],
)
def test_an_instance_with_no_host_that_has_an_ip_address_is_refused_naming_the_hosts(hosts, role, words):
    with pytest.raises(AllocationError) as err:
        plan_of({"hosts": hosts, "services": [pd(disaggregated={"prefill": {"tensorParallelSize": 4, **role}})]})
    assert words in str(err.value) and "\n" not in str(err.value)


def test_the_plan_json_carries_the_instances_and_the_proxy_and_validates_against_its_schema():
    doc = json.loads(json.dumps(plan_json(example())))
    jsonschema.validate(doc, plan_schema())
    (d,) = doc["disaggregated"]
    assert [(i["name"], i["kind"], i["kvPort"], i["kvPortBlock"], i["engineId"]) for i in (*d["prefill"], *d["decode"])] == [
        ("qwen-pd-prefill", "role", 28004, [28004, 28007], "qwen-pd-prefill"),
        ("qwen-pd-decode", "role", 28000, [28000, 28003], "qwen-pd-decode"),
    ]
    assert doc["hosts"][0]["roles"] == ["qwen-pd-decode", "qwen-pd-prefill"] and d["proxy"]["proxyPort"] == 8002


def test_pin_freezes_every_instance_and_the_proxy_so_the_plan_of_the_pinned_stack_is_the_same():
    before = plan_of(load_fleet(None, EXAMPLE)[0])
    pins = stack_pins(before)["qwen-pd"]["disaggregated"]
    assert pins["prefill"]["replicaPins"] == [{"host": "npu-a", "devices": [0, 1, 2, 3], "apiPort": 8001,
        "hcclNpuSocketPortRange": [16682, 16697], "hcclHostSocketPortRange": [61072, 61087], "hcclIfBasePort": 61096,
        "vllmPort": 62016, "kvPort": 28004}]  # fmt: skip
    assert pins["proxy"] == {"host": "npu-a", "proxyPort": 8002}
    values_ = example_values()
    values_["services"][0]["disaggregated"] = pins
    after = plan_of(parse_fleet("pd-1p1d", values_))
    assert [d.to_json() for d in after.disaggregated] == [d.to_json() for d in before.disaggregated]


def test_plan_against_names_what_a_change_to_either_role_restarts():
    old = json.loads(json.dumps(plan_json(example())))
    values_ = example_values()
    values_["services"][0]["disaggregated"]["decode"] = {"tensorParallelSize": 2, "replicaPins": [{"devices": [4, 5]}]}
    new = json.loads(json.dumps(plan_json(deployment_of(parse_fleet("pd-1p1d", values_)))))
    (line,) = diff_plans(old, new).disaggregated
    # The decode role's size is in every instance's --kv-transfer-config, so the prefill instance restarts too.
    assert line == ("disaggregated service qwen-pd: qwen-pd-prefill: kvTransferConfig, container command; qwen-pd-decode: "
                    "devices, kvPortBlock, kvTransferConfig, tensorParallelSize, container command, container env, "
                    "container deviceFiles, container labels; restarts qwen-pd-prefill, qwen-pd-decode")  # fmt: skip
    assert diff_plans(old, old).disaggregated == ()


KUBERNETES_SAID = (
    "stack pd-1p1d: the Kubernetes target does not deploy prefill and decode apart: qwen-pd (qwen-pd-prefill, "
    "qwen-pd-decode, proxy) (disaggregated). Such a service is one DisaggregatedSet (kubernetes-sigs/lws, "
    "api/disaggregatedset/v1), which this version does not render; nothing was written or applied."
)


def test_the_kubernetes_manifests_refuse_a_disaggregated_service_in_one_paragraph():
    with pytest.raises(ConfigError) as err:
        manifests(example())
    assert str(err.value).startswith(KUBERNETES_SAID) and "\n" not in str(err.value)


@pytest.mark.parametrize("output", [False, True])
def test_render_format_kubernetes_refuses_a_disaggregated_service_and_writes_nothing(cli, tmp_path, output):
    folder = tmp_path / "out"
    result = cli("render", "--config", EXAMPLE, "--format", "kubernetes", *(["--output", str(folder)] if output else []))
    assert result.returncode == 1 and result.stdout == "" and not folder.exists()
    assert result.stderr.startswith(f"error: {KUBERNETES_SAID}") and result.stderr.count("\n") == 1


@pytest.mark.parametrize("fmt", ["docker-run", "compose"])
def test_render_writes_the_instances_and_the_proxy_for_the_docker_target(cli, fmt):
    result = cli("render", "--config", EXAMPLE, "--format", fmt)
    assert result.returncode == 0, result.stderr
    assert all(name in result.stdout for name in ("qwen-pd-prefill", "qwen-pd-decode", "qwen-pd-proxy"))


def test_the_kubernetes_target_refuses_a_disaggregated_service_in_one_run_error_before_any_resource():
    import pulumi

    from cli.stackfile import locate, stack_values
    from tests.support.pulumi_harness import run_program

    with pytest.raises(pulumi.RunError) as info:
        run_program("pd-1p1d", stack_values(locate(None, EXAMPLE)) | {"target": "kubernetes"})
    assert str(info.value).startswith(KUBERNETES_SAID) and info.value.__cause__ is None and "\n" not in str(info.value)


def sharded(*services, shards: tuple[int, ...] = (0, 1)) -> dict:
    """Hosts a, b (and c) in `shards` (shards of 2 hosts), with `services`."""
    names = "abc"[: len(shards)]
    hosts = [host(n, address=f"10.0.0.{i}", shard=s) for i, (n, s) in enumerate(zip(names, shards), start=1)]
    return values(*services, shards={"size": 2}) | {"hosts": hosts}


def test_a_sharded_fleet_keeps_a_disaggregated_services_instances_and_proxy_in_one_shard():
    """One shard stack creates the proxy after every instance it names. Host a's free half takes the decode
    instance (hosts in use first); the prefill instance then goes to c of the same shard, not to b, in use
    but of the other shard."""
    busy = [{"name": "on-a", "model": "/models/a", "tensorParallelSize": 4, "host": "a", "devices": [0, 1, 2, 3]},
            {"name": "on-b", "model": "/models/b", "host": "b", "devices": [0]}]  # fmt: skip
    plan = plan_of(sharded(*busy, pd(), shards=(0, 1, 0)))
    [d] = plan.disaggregated
    shard = {hp.host.name: hp.shard for hp in plan.hosts}
    assert {rp.name: rp.assignment.host_name for rp in d.instances} == {"pd-prefill": "c", "pd-decode": "a"}
    assert {shard[rp.assignment.host_name] for rp in d.instances} | {shard[d.proxy_host.name]} == {0}


def test_instances_pinned_to_two_shards_are_refused_in_one_paragraph_naming_each_hosts_shard():
    pins = {"prefill": {**ROLES["prefill"], "replicaPins": [{"host": "a"}]}, "decode": {**ROLES["decode"], "replicaPins": [{"host": "b"}]}}
    with pytest.raises(AllocationError) as err:
        plan_of(sharded(pd(disaggregated=pins)))
    text = str(err.value)
    assert "service pd: its prefill and decode instances and proxy would be deployed by shards 0, 1: a (shard 0), b (shard 1)" in text
    assert "\n" not in text
