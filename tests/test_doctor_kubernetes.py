"""`doctor` on a Kubernetes stack: the cluster's pods, claims, slices and nodes, as the API answers
them (built by tests/kube/state.py as a scheduler and kubelet would write them), judged against the
rendered plan: clean when they match, and one finding with its advice for each thing that differs."""

from __future__ import annotations

import copy
import json

import pytest

from ops import kube_api
from ops.doctor.kube_facts import parse_cluster
from ops.doctor.kube_findings import cluster_findings
from tests.kube import state
from tests.support.api_server import api_server, json_page, pki
from tests.support.kubernetes import kubernetes_deployment, with_keys
from views.exports.kubernetes import manifests

HOSTNAME_LABEL = "kubernetes.io/hostname"


def objects(stack: str, extra: dict | None = None) -> list[dict]:
    return [copy.deepcopy(dict(m.obj)) for m in manifests(kubernetes_deployment(stack, extra))]


def healthy(stack: str, extra: dict | None = None) -> dict[str, list[dict]]:
    hosts = {hd.name: hd.host.npus for hd in kubernetes_deployment(stack, extra).hosts}
    return state.cluster(objects(stack, extra), hosts)


def judge(stack: str, lists: dict[str, list[dict]], extra: dict | None = None) -> list:
    facts = parse_cluster(lists["pods"], lists["claims"], lists["slices"], lists["nodes"], HOSTNAME_LABEL)
    return [f for findings in cluster_findings(kubernetes_deployment(stack, extra), facts).values() for f in findings]


def pod(lists: dict, name: str) -> dict:
    return next(p for p in lists["pods"] if p["metadata"]["labels"]["ascend-fleet/instance"] == name)


def env(p: dict, key: str) -> dict:
    return next(e for e in p["spec"]["containers"][0]["env"] if e["name"] == key)


@pytest.mark.parametrize("stack", ["prod", "staging", "dev"])
def test_a_cluster_that_holds_the_plan_has_no_finding(stack):
    assert judge(stack, healthy(stack)) == []


def test_a_pod_on_another_node_than_its_planned_host_is_a_node_finding():
    lists = healthy("staging")
    p = pod(lists, "qwen-72b")
    planned = p["spec"]["nodeName"]
    p["spec"]["nodeName"] = next(n["metadata"]["name"] for n in lists["nodes"] if n["metadata"]["name"] != planned)
    [finding] = judge("staging", lists)
    assert finding.kind == "node" and finding.service == "qwen-72b"
    assert f"but the plan puts it on {planned}" in finding.message and "Delete the pod" in finding.message


def test_a_claim_allocated_to_another_card_is_a_claim_finding():
    lists = healthy("prod")
    claim = next(c for c in lists["claims"] if c["metadata"]["name"] == "npu-a-npu-5")
    claim["status"] = state.allocation(claim, card=2)
    [finding] = judge("prod", lists)
    assert finding.kind == "claim" and finding.card == 5
    assert "allocated to device npu-2 of pool npu-a (driver npu.huawei.com), physicId 2, not to card 5" in finding.message


def test_a_claim_on_a_device_no_slice_of_its_node_publishes_is_a_claim_finding():
    lists = healthy("prod")
    claim = next(c for c in lists["claims"] if c["metadata"]["name"] == "npu-a-npu-0")
    claim["status"]["allocation"]["devices"]["results"][0]["pool"] = "npu-z"
    [finding] = judge("prod", lists)
    assert finding.kind == "claim" and "in no ResourceSlice of npu-a's node" in finding.message


def test_a_claim_on_a_device_of_another_driver_with_the_same_physic_id_is_a_claim_finding():
    lists = healthy("prod")
    other = state.mindcluster.resource_slice("npu-a")
    other["spec"]["driver"] = "gpu.example.com"
    lists["slices"].append(other)
    claim = next(c for c in lists["claims"] if c["metadata"]["name"] == "npu-a-npu-3")
    claim["status"]["allocation"]["devices"]["results"][0]["driver"] = "gpu.example.com"
    [finding] = judge("prod", lists)
    assert finding.kind == "claim" and "(driver gpu.example.com), in no ResourceSlice" in finding.message


def test_an_unallocated_or_absent_claim_is_a_claim_finding():
    lists = healthy("prod")
    lists["claims"][0].pop("status")
    del lists["claims"][1]
    found = judge("prod", lists)
    assert [(f.kind, f.card) for f in found] == [("claim", 0), ("claim", 1)]
    assert "is not allocated" in found[0].message and "does not exist in namespace default" in found[1].message


def test_a_pod_naming_other_claims_than_its_cards_is_a_claim_finding():
    lists = healthy("prod")
    pod(lists, "qwen-long")["spec"]["resourceClaims"][0]["resourceClaimName"] = "npu-a-npu-0"
    [finding] = judge("prod", lists)
    assert finding.kind == "claim" and finding.key == "resourceClaims" and finding.service == "qwen-long"


def test_a_drifted_hccl_window_is_a_drift_finding_and_other_env_is_not_judged():
    lists = healthy("prod")
    p = pod(lists, "qwen-long")
    env(p, "HCCL_IF_BASE_PORT")["value"] = "60000"
    env(p, "OMP_NUM_THREADS")["value"] = "8"
    p["spec"]["containers"][0]["env"] = [e for e in p["spec"]["containers"][0]["env"] if e["name"] != "VLLM_PORT"]
    p["spec"]["containers"][0]["env"].append({"name": "HCCL_EXEC_TIMEOUT", "value": "1"})
    found = judge("prod", lists)
    assert [(f.kind, f.key) for f in found] == [
        ("drift", "env HCCL_EXEC_TIMEOUT"), ("drift", "env HCCL_IF_BASE_PORT"), ("drift", "env VLLM_PORT"),
    ]  # fmt: skip
    assert "env HCCL_IF_BASE_PORT: 61032 (plan) != 60000 (live)" in found[1].message
    assert "62016 (plan) != unset (live)" in found[2].message


def test_without_dra_the_cards_the_runtime_is_told_are_compared_and_there_is_no_claim():
    fallback = {"kubernetes": {"dra": False}}
    lists = healthy("prod", fallback)
    assert lists["claims"] == [] and judge("prod", lists, fallback) == []
    env(pod(lists, "qwen-vl"), "ASCEND_VISIBLE_DEVICES")["value"] = "0"
    [finding] = judge("prod", lists, fallback)
    assert finding.kind == "drift" and finding.key == "env ASCEND_VISIBLE_DEVICES"


@pytest.mark.parametrize(
    "status, kind",
    [
        ({}, "missing"),
        ({"phase": "Pending"}, "stopped"),
        ({"phase": "Failed"}, "stopped"),
        ({"containerStatuses": [{"name": "vllm", "started": True, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}, "restarting"),
        ({"conditions": [{"type": "Ready", "status": "False"}]}, "unhealthy"),
    ],
)
def test_a_pod_that_is_not_serving_is_reported_as_a_docker_container_would_be(status, kind):
    lists = healthy("prod")
    p = pod(lists, "bge-m3")
    if not status:
        lists["pods"].remove(p)
    p["status"] |= status
    [finding] = judge("prod", lists)
    assert finding.kind == kind and finding.service == "bge-m3"


def test_a_pod_still_starting_is_not_a_finding():
    lists = healthy("prod")
    p = pod(lists, "bge-m3")
    p["status"]["conditions"] = []
    p["status"]["containerStatuses"][0]["started"] = False
    assert judge("prod", lists) == []


def test_hostile_objects_are_read_without_a_crash_and_values_are_escaped():
    lists = healthy("prod")
    p = pod(lists, "qwen-long")
    p["spec"]["nodeName"] = "\x1b[31mevil"
    p["spec"]["containers"][0]["env"] = [{"name": 7}, {"name": "HCCL_IF_BASE_PORT", "value": ["x"]}, "junk"] + p["spec"]["containers"][0]["env"]
    lists["claims"][0]["status"] = {"allocation": {"devices": {"results": "nope"}}}
    lists["slices"].append({"spec": {"devices": [{"name": None}]}})
    lists["nodes"].append({"metadata": ["x"]})
    lists["pods"].append({"metadata": {"labels": {"ascend-fleet/instance": 3}}, "status": "x"})
    found = judge("prod", lists)
    assert {f.kind for f in found} == {"node", "claim"}
    assert all("\x1b" not in f.message for f in found)


def test_a_kubeconfig_with_a_credential_plugin_or_no_tls_check_is_refused(tmp_path):
    base = {"current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}
    for cluster, user, words in (
        ({"server": "https://k"}, {"exec": {"command": "x"}}, "credential plugins"),
        ({"server": "https://k", "insecure-skip-tls-verify": True}, {}, "insecure-skip-tls-verify"),
        ({"server": "http://k"}, {}, "https:// URL"),
    ):
        path = tmp_path / "config"
        path.write_text(json.dumps(base | {"clusters": [{"name": "k", "cluster": cluster}], "users": [{"name": "u", "user": user}]}))
        with pytest.raises(kube_api.KubeError, match=words):
            kube_api.load_access(path)
    with pytest.raises(kube_api.KubeError, match="cannot read the kubeconfig"):
        kube_api.load_access(tmp_path / "absent")


def test_a_list_is_read_page_by_page_and_an_answer_over_the_bound_is_refused(tmp_path, monkeypatch):
    pages = {"": {"items": [1], "metadata": {"continue": "t"}}, "t": {"items": [2], "metadata": {}}}
    seen = []

    def answer(handler, path, query):
        seen.append(query.get("continue", ""))
        json_page(handler, pages[seen[-1]])

    with api_server(pki(tmp_path / "pki"), answer) as config:
        access = kube_api.load_access(config)
        assert kube_api.list_items(access, "/api/v1/pods") == [1, 2] and seen == ["", "t"]
        monkeypatch.setattr(kube_api, "LIMIT", 10)
        with pytest.raises(kube_api.KubeError, match="longer than 10 bytes"):
            kube_api.get(access, "/api/v1/pods", {"limit": "1"})


def test_doctor_of_a_kubernetes_stack_whose_cluster_cannot_be_read_reports_every_host_unreachable(cli, tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "k"}}],
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
    }))  # fmt: skip
    stack = with_keys(tmp_path, "prod", "  ascend-fleet:target: kubernetes\n")
    result = cli("doctor", "--config", str(stack), "--kubeconfig", str(config), "--format", "json")
    assert result.returncode == 1, result.stderr
    [host] = json.loads(result.stdout)["hosts"]
    assert host["reachable"] is False and "cannot be read" in host["findings"][0]["message"]


def test_doctor_kubeconfig_on_a_docker_stack_is_refused(cli, tmp_path):
    result = cli("doctor", "--stack", "prod", "--kubeconfig", str(tmp_path / "k"))
    assert result.returncode == 1 and "targets docker, not kubernetes" in result.stderr and "Traceback" not in result.stderr
