"""What a scheduler, a kubelet and MindCluster's DRA driver would have written for a rendered stack,
built by hand: no such component runs in the tests.

- a Pod per rendered Deployment: its template, `spec.nodeName` set to the planned host (the scheduler's
  binding), and a status a kubelet reports for a started, ready pod (`phase: Running`, the `Ready`
  condition, each container `started` and `ready`);
- each ResourceClaim's `status.allocation` (what the scheduler's DRA plugin writes): one result for
  the claim's request `npu`, naming the device of the node's ResourceSlice whose `physicId` is the
  claim's card (driver `npu.huawei.com`, pool = node name: tests/kube/mindcluster.py);
- the Nodes and ResourceSlices of tests/kube/mindcluster.py.

The unit tests (tests/test_doctor_kubernetes.py) judge these as the API would answer them; the lane
(tests/kube/test_doctor.py) creates them in a real API server.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.kube import mindcluster


def pod_of(deployment: dict[str, Any], node: str | None = None) -> dict[str, Any]:
    """The pod of a rendered Deployment, bound to `node` (default: its planned host)."""
    template = deployment["spec"]["template"]
    meta = deployment["metadata"]
    spec = copy.deepcopy(template["spec"]) | {"nodeName": node or meta["labels"]["ascend-fleet/host"]}
    labels = dict(template["metadata"]["labels"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{meta['name']}-0", "namespace": meta["namespace"], "labels": labels},
        "spec": spec,
    }


def running_status(pod: dict[str, Any]) -> dict[str, Any]:
    """A kubelet's status of a pod whose containers started and are ready."""
    containers = [
        {"name": c["name"], "image": c["image"], "imageID": "", "ready": True, "started": True, "restartCount": 0,
         "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
        for c in pod["spec"]["containers"]
    ]  # fmt: skip
    conditions = [{"type": t, "status": "True"} for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")]
    return {"phase": "Running", "conditions": conditions, "containerStatuses": containers}


def allocation(claim: dict[str, Any], card: int | None = None) -> dict[str, Any]:
    """The scheduler's allocation of a rendered claim: the device with physicId `card` (default: the
    claim's planned card) of its host's slice."""
    host = claim["metadata"]["labels"]["ascend-fleet/host"]
    physic = int(claim["metadata"]["labels"]["ascend-fleet/card"]) if card is None else card
    result = {"request": "npu", "driver": mindcluster.DRIVER, "pool": host, "device": mindcluster.device_name(physic)}
    return {"allocation": {"devices": {"results": [result]}}}


def cluster(objects: list[dict[str, Any]], hosts: dict[str, int]) -> dict[str, list[dict[str, Any]]]:
    """The four lists doctor reads, as the API would answer them for a healthy cluster."""
    pods = []
    for obj in (o for o in objects if o["kind"] == "Deployment"):
        pod = pod_of(obj)
        pods.append(pod | {"status": running_status(pod)})
    claims = [c | {"status": allocation(c)} for c in objects if c["kind"] == "ResourceClaim"]
    return {
        "pods": pods,
        "claims": claims,
        "slices": [mindcluster.resource_slice(name, cards) for name, cards in hosts.items()],
        "nodes": [mindcluster.node(name) for name in hosts],
    }
