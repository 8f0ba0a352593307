"""`doctor` against a real API server (docs/doctor.md, "doctor on Kubernetes").

The lane runs no scheduler or kubelet, so the test writes what they would have (tests/kube/state.py):
a Pod per rendered Deployment, bound to its planned node, with a running, ready status; each
ResourceClaim's `status.allocation` naming the device of the node's ResourceSlice with the planned
`physicId`. Both are written as the admin (`system:masters`) through the `status` subresources, which
the API server accepts and validates. Then `doctor` reads the cluster through the kubeconfig the
lane writes: clean for the rendered prod stack, then one `node` finding for a pod bound to another
node, and one `claim` finding for a claim allocated to another card.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.kube import mindcluster, state
from tests.kube.cluster import Client
from tests.support.kubernetes import kubernetes_deployment, with_keys
from views.exports.kubernetes import manifests

NAMESPACE = "lane-doctor"
MERGE = "application/merge-patch+json"


def _status(client: Client, obj: dict, status: dict) -> dict:
    return client.request("PATCH", client.path(obj) + "/status", {"status": status}, content_type=MERGE)


def _bind(client: Client, deployment: dict, node: str | None = None) -> dict:
    """Create the Deployment's pod on `node` (default: its planned host) with a running status."""
    pod = state.pod_of(deployment, node)
    client.apply(pod, dry_run=False)
    return _status(client, pod, state.running_status(pod))


@pytest.fixture(scope="module")
def held(cluster, publish):
    """The prod stack's objects in the lane, with the pods and allocations a cluster would hold."""
    client = cluster.client
    objects = [dict(m.obj) for m in manifests(kubernetes_deployment("prod", {"kubernetes": {"namespace": NAMESPACE}}))]
    publish({"npu-a": 8, "npu-z": 8})
    placed = client.into_namespace(objects, NAMESPACE)
    # The ServiceAccount admission wants the namespace's `default` account, which the controller manager
    # (not run here) would create.
    client.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": NAMESPACE}}, dry_run=False)
    for obj in placed:
        client.apply(obj, dry_run=False)
    for claim in (o for o in placed if o["kind"] == "ResourceClaim"):
        _status(client, claim, state.allocation(claim))
    for deployment in (o for o in placed if o["kind"] == "Deployment"):
        _bind(client, deployment)
    return placed


def _doctor(cli, cluster, tmp_path: Path) -> tuple[int, list[dict]]:
    keys = f"  ascend-fleet:target: kubernetes\n  ascend-fleet:kubernetes:\n    namespace: {NAMESPACE}\n"
    result = cli("doctor", "--config", str(with_keys(tmp_path, "prod", keys)), "--kubeconfig", str(cluster.kubeconfig), "--format", "json")
    assert result.returncode in (0, 1), result.stderr
    report = json.loads(result.stdout)
    return result.returncode, [f for host in report["hosts"] for f in host["findings"]]


def test_the_api_server_stores_the_status_a_kubelet_and_scheduler_would_write(cluster, held):
    claim = cluster.client.get(next(o for o in held if o["kind"] == "ResourceClaim"))
    assert claim["status"]["allocation"]["devices"]["results"][0]["device"] == mindcluster.device_name(0)
    pod = cluster.client.get(state.pod_of(next(o for o in held if o["kind"] == "Deployment")))
    assert pod["status"]["phase"] == "Running" and pod["spec"]["nodeName"] == "npu-a"


def test_doctor_finds_nothing_wrong_in_a_cluster_that_holds_the_prod_plan(cli, cluster, held, tmp_path):
    code, findings = _doctor(cli, cluster, tmp_path)
    assert (code, findings) == (0, [])


def test_doctor_finds_a_pod_on_another_node_and_a_claim_on_another_card(cli, cluster, held, tmp_path):
    client = cluster.client
    deployment = next(o for o in held if o["kind"] == "Deployment" and o["metadata"]["name"] == "qwen-vl")
    # nodeName is immutable: the pod is deleted (no kubelet to wait for) and bound again elsewhere.
    client.request("DELETE", client.path(state.pod_of(deployment)) + "?gracePeriodSeconds=0")
    _bind(client, deployment, "npu-z")
    claim = next(o for o in held if o["kind"] == "ResourceClaim" and o["metadata"]["name"] == "npu-a-npu-5")
    # An allocation is immutable once set: deallocated first, as the scheduler does, then allocated to card 2.
    _status(client, claim, {"allocation": None})
    _status(client, claim, state.allocation(claim, card=2))
    code, findings = _doctor(cli, cluster, tmp_path)
    assert code == 1
    assert sorted((f["kind"], f.get("service"), f.get("card")) for f in findings) == [
        ("claim", None, 5), ("node", "qwen-vl", None),
    ], findings  # fmt: skip
