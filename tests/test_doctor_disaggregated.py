"""doctor's judgement of a disaggregated service, from hand-made host facts: each prefill and decode instance
and the proxy present on its host, on the host network, as planned (`drift`); their cards and windows judged
as the host's planned ones, a prefill instance's `kvPort` block on its host's address."""

from __future__ import annotations

import dataclasses

import pytest

from ops.doctor.engine_ids import engine_id_findings
from ops.doctor.facts import Listener
from ops.doctor.findings import Finding, host_findings
from ops.doctor.pd_flags import engine_id
from ops.npusmi import parse_topology
from tests.support.disaggregated import example, pd, values
from tests.support.doctor import inspect_of, running_facts, with_container, with_link
from tests.support.pipeline import deployment_of
from tests.support.stacks import host


@pytest.fixture(scope="module")
def deployment():
    """The committed 1P1D example: prefill on cards 0-3 (API 8001, kvPort 28004-28007), decode on 4-7 (API
    8000, kvPort 28000-28003), the proxy on 8002, all on npu-a (10.20.0.11)."""
    return example()


def apart():
    """Prefill on a (10.0.0.1), decode on b (10.0.0.2), the proxy on c (10.0.0.3)."""
    roles = {"prefill": {"tensorParallelSize": 4, "replicaPins": [{"host": "a"}]},
             "decode": {"tensorParallelSize": 4, "replicaPins": [{"host": "b"}]}, "proxy": {"host": "c"}}  # fmt: skip
    vals = values(pd(disaggregated=roles))
    vals["hosts"].append(host("c", address="10.0.0.3"))
    return deployment_of(vals)


def instance(deployment, name: str):
    return next(i for d in deployment.disaggregated for i in (*d.instances, d.proxy) if i.name == name)


def on(deployment, name: str):
    """The host deployment that runs container `name`."""
    return next(hd for hd in deployment.hosts if name in {c.name for c in hd.planned})


def running(deployment, name: str, *, command=None, **changes):
    """The facts of the host of instance or proxy `name` with its container replaced: `command` (a function
    of the planned words) or any `inspect_of` override."""
    hd, spec = on(deployment, name), instance(deployment, name).spec
    spec = spec if command is None else dataclasses.replace(spec, command=tuple(command(list(spec.command))))
    base = 1000 * (1 + [c.name for c in hd.planned].index(name))
    return hd, with_container(running_facts(hd), inspect_of(spec, cid=f"{name}-id", pid=base, **changes))


def listening(hd, *extra: Listener):
    facts = running_facts(hd)
    return dataclasses.replace(facts, listeners=(*facts.listeners, *extra))


def seen(found) -> list[tuple]:
    return [(f.kind, f.service, f.port or f.card, f.key) for f in found]


def test_hosts_running_every_instance_and_the_proxy_as_planned_have_no_findings(deployment):
    assert host_findings(deployment.hosts[0], running_facts(deployment.hosts[0])) == []
    spread = apart()
    assert {hd.name: host_findings(hd, running_facts(hd)) for hd in spread.hosts} == {"a": [], "b": [], "c": []}


@pytest.mark.parametrize("name, what", [
    ("qwen-pd-decode", "planned on cards 4,5,6,7 as a decode instance of qwen-pd (host network), API port 8000"),
    ("qwen-pd-proxy", "planned as the proxy of qwen-pd (host network), API port 8002"),
])  # fmt: skip
def test_an_absent_instance_or_proxy_is_missing_on_its_host(deployment, name, what):
    hd = deployment.hosts[0]
    facts = running_facts(hd)
    gone = dataclasses.replace(facts, containers=tuple(c for c in facts.containers if c.name != name))
    found = [f for f in host_findings(hd, gone) if f.kind == "missing"]
    assert [(f.service, f.message) for f in found] == [(name, f"container {name} does not exist ({what})")]


def test_an_instance_off_the_host_network_with_another_kv_transfer_config_and_env_is_drift(deployment):
    def other_port(words):
        flag = words.index("--kv-transfer-config")
        words[flag + 1] = words[flag + 1].replace('"kv_port":28004', '"kv_port":28010')
        return words

    hd, facts = running(deployment, "qwen-pd-prefill", command=other_port, env={"HCCL_IF_BASE_PORT": "61000"})
    bridged = [c for c in facts.containers if c.name == "qwen-pd-prefill"][0]
    facts = dataclasses.replace(facts, containers=tuple(
        dataclasses.replace(c, network_mode="bridge") if c is bridged else c for c in facts.containers))  # fmt: skip
    found = [f for f in host_findings(hd, facts) if f.kind == "drift"]
    assert [f.key for f in found] == ["command (argument 21 after --kv-transfer-config)", "env HCCL_IF_BASE_PORT", "network mode"]
    assert '"kv_port":28004' in found[0].message and '"kv_port":28010' in found[0].message
    assert found[2].message == "container qwen-pd-prefill: network mode: host (plan) != bridge (live)"


def test_a_proxy_pointing_at_another_decoder_is_a_proxy_finding_naming_both_and_drift(deployment):
    hd, facts = running(deployment, "qwen-pd-proxy", command=lambda w: [*w[:-1], "8009"])
    found = host_findings(hd, facts)
    assert [(f.kind, f.service, f.key) for f in found] == [
        ("proxy", "qwen-pd", "instances"), ("drift", "qwen-pd-proxy", "command (argument 14 after --decoder-ports)")]
    assert found[0].message == (
        "proxy qwen-pd-proxy of qwen-pd sends requests to prefillers 10.20.0.11:8001 and decoders 10.20.0.11:8009; "
        "the plan: prefill qwen-pd-prefill at 10.20.0.11:8001, decode qwen-pd-decode at 10.20.0.11:8000 (its "
        "command's drift shows the words)"
    )


def replaced(words: list[str], flag: str, *values: str) -> list[str]:
    at = words.index(flag)
    return [*words[: at + 1], *values, *words[at + 2 :]]


@pytest.mark.parametrize("command, runs", [
    # Two decoders where the plan has one: nargs="+" takes every word up to the next option.
    (lambda w: replaced(replaced(w, "--decoder-hosts", "10.20.0.11", "10.0.0.9"), "--decoder-ports", "8000", "8000"),
     "decoders 10.20.0.11:8000, 10.0.0.9:8000"),
    # The last time a flag is given counts (argparse), in its `=` form too.
    (lambda w: [*w, "--prefiller-hosts", "10.0.0.7"], "prefillers 10.0.0.7:8001"),
    (lambda w: [*w, "--prefiller-hosts=10.0.0.8"], "prefillers 10.0.0.8:8001"),
    # Left out: the example's defaults.
    (lambda w: w[: w.index("--prefiller-hosts")], "prefillers localhost:8001 and decoders localhost:8002"),
])  # fmt: skip
def test_a_proxy_is_read_as_its_argparse_reads_its_flags(deployment, command, runs):
    hd, facts = running(deployment, "qwen-pd-proxy", command=command)
    [proxy] = [f for f in host_findings(hd, facts) if f.kind == "proxy"]
    assert runs in proxy.message.partition("; the plan")[0]


def test_a_proxy_whose_words_differ_but_name_the_planned_instances_is_drift_only(deployment):
    def equal(words):
        at = words.index("--decoder-ports")
        return [*words[:at], f"--decoder-ports={words[at + 1]}", *words[at + 2 :]]

    hd, facts = running(deployment, "qwen-pd-proxy", command=equal)
    assert [f.kind for f in host_findings(hd, facts)] == ["drift"]


def test_a_foreign_container_on_an_instances_card_is_foreign(deployment):
    hd = deployment.hosts[0]
    spec = instance(deployment, "qwen-pd-decode").spec
    intruder = inspect_of(spec, cid="old-id", pid=9000, name="old-decode", devices=["/dev/davinci5"])
    intruder["HostConfig"]["NetworkMode"] = "bridge"
    found = host_findings(hd, with_container(running_facts(hd), intruder))
    assert [(f.kind, f.service, f.card) for f in found][0] == ("foreign-card", "qwen-pd-decode", 5)


@pytest.mark.parametrize("port, key", [(8002, "proxyPort"), (28001, "kvPort"), (8001, "apiPort")])
def test_a_process_listening_on_an_instances_or_the_proxys_port_is_foreign(deployment, port, key):
    hd = deployment.hosts[0]
    [found] = host_findings(hd, listening(hd, Listener("0.0.0.0", port, (("nginx", 4343),))))
    owner = {"proxyPort": "qwen-pd-proxy", "kvPort": "qwen-pd-decode", "apiPort": "qwen-pd-prefill"}[key]
    assert seen([found]) == [("foreign-port", owner, port, key)]
    assert found.message.startswith(f"port {port} (0.0.0.0) is held by process nginx (pid 4343); it is in {owner}'s {key}")


@pytest.mark.parametrize("address, held", [("10.20.0.11", True), ("0.0.0.0", True), ("[::]", True), ("127.0.0.1", False),
                                           ("10.20.0.12", False)])  # fmt: skip
def test_a_listener_holds_a_prefill_instances_kv_port_only_on_its_hosts_address_or_every_address(deployment, address, held):
    """The prefiller binds its handshake on its host's address (vLLM's get_ip), not on every address: a process on
    the same port of another address leaves it free."""
    hd = deployment.hosts[0]
    found = host_findings(hd, listening(hd, Listener(address, 28005, (("python3", 4242),))))
    assert seen(found) == ([("foreign-port", "qwen-pd-prefill", 28005, "kvPort")] if held else [])


@pytest.mark.parametrize("env, found", [
    ({"HCCL_IF_BASE_PORT": "61100"}, [("foreign-port", "qwen-pd-prefill", 61100, "hcclIfBasePort")]),
    # HCCL_IF_BASE_PORT takes 32 ports from its base: 27970-28001 reach into the decoder's block.
    ({"HCCL_IF_BASE_PORT": "27970"}, [("foreign-port", "qwen-pd-decode", 28000, "kvPort")]),
    ({"HCCL_HOST_SOCKET_PORT_RANGE": "8002"}, [("foreign-port", "qwen-pd-proxy", 8002, "proxyPort")]),
])  # fmt: skip
def test_a_foreign_container_on_the_host_network_whose_hccl_windows_overlap_an_instances_or_the_proxys_is_foreign(
    deployment, env, found
):
    """Stopped, but Docker starts it again after a reboot: its env says which host ports it will take."""
    hd = deployment.hosts[0]
    other = inspect_of(instance(deployment, "qwen-pd-proxy").spec, cid="bench-id", pid=9100, name="bench", status="exited",
                       restart="always", health=None)  # fmt: skip
    other["Config"]["Env"] = [f"{k}={v}" for k, v in env.items()]
    assert seen(host_findings(hd, with_container(running_facts(hd), other))) == found


def without_hccn(spec, read_only: bool | None = None):
    """The `docker inspect` of an instance's container without its /etc/hccn.conf mount, or with it read-write."""
    inspect = inspect_of(spec, cid=f"{spec.name}-id", pid=2000)
    mounts = inspect["HostConfig"]["Mounts"]
    inspect["HostConfig"]["Mounts"] = [
        {**m, "ReadOnly": read_only} if m["Target"] == "/etc/hccn.conf" else m
        for m in mounts if m["Target"] != "/etc/hccn.conf" or read_only is not None
    ]  # fmt: skip
    return inspect


def test_an_instance_without_hccn_conf_is_a_finding_of_its_own_saying_why_and_drift(deployment):
    hd = deployment.hosts[0]
    spec = instance(deployment, "qwen-pd-prefill").spec
    found = host_findings(hd, with_container(running_facts(hd), without_hccn(spec)))
    assert [(f.kind, f.service, f.key) for f in found] == [("hccn-conf", "qwen-pd", "mounts"), ("drift", "qwen-pd-prefill", "mounts")]
    assert found[0].message == (
        "container qwen-pd-prefill (prefill instance of qwen-pd) does not mount /etc/hccn.conf: the Mooncake transfer "
        "reads the cards' device IPs from it, and without it the service starts with no error while its decoder "
        "answers wrong, the first token wrong and then repeated (vllm-ascend issue 7711); `pulumi up` re-creates "
        "it with the plan's read-only mount"
    )
    assert "lacking /etc/hccn.conf:/etc/hccn.conf:ro" in found[1].message


def test_an_instance_mounting_hccn_conf_read_write_is_drift_only(deployment):
    hd = deployment.hosts[0]
    spec = instance(deployment, "qwen-pd-decode").spec
    [found] = host_findings(hd, with_container(running_facts(hd), without_hccn(spec, read_only=False)))
    assert (found.kind, found.key) == ("drift", "mounts")
    assert "extra /etc/hccn.conf:/etc/hccn.conf; lacking /etc/hccn.conf:/etc/hccn.conf:ro" in found.message


def test_an_instance_mounting_its_services_own_hccn_conf_has_no_finding():
    d = deployment_of(values(pd(mounts=[{"source": "/opt/hccn/hccn.conf", "target": "/etc/hccn.conf"}])))
    assert {hd.name: host_findings(hd, running_facts(hd)) for hd in d.hosts} == {"a": [], "b": []}


def without_listeners(hd, *ports: int):
    facts = running_facts(hd)
    return dataclasses.replace(facts, listeners=tuple(lst for lst in facts.listeners if lst.port not in ports))


def test_a_serving_prefill_instance_not_listening_on_its_kv_ports_is_a_kv_transfer_finding(deployment):
    hd = deployment.hosts[0]
    [found] = host_findings(hd, without_listeners(hd, 28005, 28007))
    assert seen([found]) == [("kv-transfer", "qwen-pd", 28005, "kvPort")]
    assert found.message == (
        "prefill instance qwen-pd-prefill of qwen-pd serves but does not listen on port 28005, 28007 of its kvPort block "
        "28004-28007 (each worker binds kv_port + its device index): its decoders cannot fetch its KV cache from those workers"
    )


def test_a_port_of_the_block_held_by_another_process_is_foreign_and_not_the_instances(deployment):
    hd = deployment.hosts[0]
    facts = without_listeners(hd, 28006)
    facts = dataclasses.replace(facts, listeners=(*facts.listeners, Listener("10.20.0.11", 28006, (("redis-server", 77),))))
    assert seen(host_findings(hd, facts)) == [("foreign-port", "qwen-pd-prefill", 28006, "kvPort"), ("kv-transfer", "qwen-pd", 28006, "kvPort")]


def test_a_decode_instance_binds_no_kv_port_and_a_starting_prefill_instance_is_not_judged_yet(deployment):
    hd = deployment.hosts[0]
    assert instance(deployment, "qwen-pd-decode").plan.kv_ports == (28000, 28003)
    assert host_findings(hd, without_listeners(hd, *range(28000, 28004))) == []
    spec = instance(deployment, "qwen-pd-prefill").spec
    starting = with_container(without_listeners(hd, *range(28004, 28008)), inspect_of(spec, cid="qwen-pd-prefill-id", pid=2000, health="starting"))
    assert host_findings(hd, starting) == []


def with_engine_id(spec, engine: str):
    """The spec with its `--kv-transfer-config` under another engine id."""
    words = list(spec.command)
    at = words.index("--kv-transfer-config") + 1
    words[at] = words[at].replace(f'"engine_id":"{spec.name}"', f'"engine_id":"{engine}"')
    return dataclasses.replace(spec, command=tuple(words))


def test_two_instances_under_one_engine_id_are_one_kv_transfer_finding_naming_both(deployment):
    hd = deployment.hosts[0]
    twin = with_engine_id(instance(deployment, "qwen-pd-decode").spec, "qwen-pd-prefill")
    facts = with_container(running_facts(hd), inspect_of(twin, cid="qwen-pd-decode-id", pid=1000))
    assert engine_id_findings(deployment, [facts]) == {"npu-a": [Finding(
        "kv-transfer",
        "engine id qwen-pd-prefill is used by 2 running containers of stack pd-1p1d: qwen-pd-decode on npu-a, "
        "qwen-pd-prefill on npu-a; the Mooncake connector refuses a peer whose engine id is its own ('Conflict engine "
        "id'), so transfers between them fail: the plan gives each instance its own, its container's name",
        service="qwen-pd", container="qwen-pd-decode", key="engine_id",
    )]}  # fmt: skip
    assert engine_id_findings(deployment, [running_facts(hd)]) == {}


def test_an_engine_id_is_judged_across_hosts_and_reported_on_the_first(monkeypatch):
    from ops import doctor

    spread = apart()
    reads = [running_facts(hd) for hd in spread.hosts]
    twin = with_engine_id(instance(spread, "pd-decode").spec, "pd-prefill")
    reads[1] = with_container(reads[1], inspect_of(twin, cid="pd-decode-id", pid=1000))
    monkeypatch.setattr(doctor, "read_hosts", lambda deployment, timeout=None: reads)
    reports = doctor.audit(spread)
    assert [[(f.kind, f.key) for f in r.findings] for r in reports] == [[("kv-transfer", "engine_id")], [("drift", "command (argument 19 after --kv-transfer-config)")], []]
    assert "pd-prefill on a, pd-decode on b;" in reports[0].findings[0].message


@pytest.mark.parametrize("labels, status, found", [
    ({"ascend-fleet.stack": "pd-1p1d"}, "running", True),  # an old instance of the stack, left running
    ({"ascend-fleet.stack": "another"}, "running", False),  # another stack's: its proxy sends it no peer of ours
    ({"ascend-fleet.stack": "pd-1p1d"}, "exited", False),
])  # fmt: skip
def test_a_container_outside_the_plan_counts_when_it_runs_as_the_stacks(deployment, labels, status, found):
    hd = deployment.hosts[0]
    old = inspect_of(instance(deployment, "qwen-pd-decode").spec, cid="old-id", pid=9000, name="qwen-pd-decode-old",
                     labels=labels, status=status, devices=[])  # fmt: skip
    judged = engine_id_findings(deployment, [with_container(running_facts(hd), old)])
    assert [f.container for f in judged.get("npu-a", [])] == (["qwen-pd-decode"] if found else [])


@pytest.mark.parametrize("words, found", [
    (["--kv-transfer-config", '{"engine_id":"a"}', "--kv-transfer-config", '{"engine_id":"b"}'], "b"),  # the last counts
    (['--kv_transfer_config={"engine_id":"c"}'], "c"),  # vLLM's `_` spelling, the `=` form
    (["--kv-transfer-config", '{"kv_role":"kv_consumer"}'], None),  # vLLM draws a random id
    (["--kv-transfer-config", "{not json"], None),
    (["--kv-transfer-config", '["engine_id"]'], None),
    ([], None),
])  # fmt: skip
def test_an_engine_id_is_read_as_vllm_reads_the_kv_transfer_config(words, found):
    assert engine_id(["vllm", "serve", "/models/m", *words]) == found


def test_an_instances_cards_not_linked_by_hccs_is_a_topology_finding_naming_the_instance(deployment):
    hd = deployment.hosts[0]
    facts = dataclasses.replace(running_facts(hd), topology=parse_topology(with_link(5, 6, "PIX")))
    [found] = host_findings(hd, facts)
    assert (found.kind, found.service) == ("topology", "qwen-pd-decode")
    assert found.message.startswith("the tensor-parallel group of decode instance qwen-pd-decode of qwen-pd (cards 4,5,6,7)")
