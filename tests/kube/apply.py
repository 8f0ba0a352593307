"""Applying a stack's objects to the lane's API server and checking the references it does not check itself:
each pod's claims (a Deployment's template, each template of a LeaderWorkerSet), each claim's DeviceClass, each
pinned node."""

from __future__ import annotations

from typing import Any

from tests.kube.cluster import Client, Refused

HOSTNAME_LABEL = "kubernetes.io/hostname"  # every committed stack keeps the default hostnameLabel
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"}


def pod_specs(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    specs = [(o["metadata"]["name"], o["spec"]["template"]["spec"]) for o in objects if o["kind"] in WORKLOADS]
    for o in (o for o in objects if o["kind"] == "LeaderWorkerSet"):
        lwt = o["spec"]["leaderWorkerTemplate"]
        specs += [(f"{o['metadata']['name']} {role}", lwt[role]["spec"]) for role in ("leaderTemplate", "workerTemplate")]
    return specs + [(o["metadata"]["name"], o["spec"]) for o in objects if o["kind"] == "Pod"]


def dangling(objects: list[dict[str, Any]], nodes: set[str], classes: set[str]) -> list[str]:
    """References to claims, DeviceClasses or nodes that nothing in the cluster provides."""
    claims = {o["metadata"]["name"] for o in objects if o["kind"] == "ResourceClaim"}
    wrong = []
    for name, spec in pod_specs(objects):
        wrong += [f"{name}: claim {c['resourceClaimName']} is not rendered"
                  for c in spec.get("resourceClaims", []) if c.get("resourceClaimName", "") not in claims]  # fmt: skip
        node = spec.get("nodeSelector", {}).get(HOSTNAME_LABEL)
        wrong += [f"{name}: node {node} is not a planned host"] if node is not None and node not in nodes else []
    for claim in (o for o in objects if o["kind"] == "ResourceClaim"):
        for request in claim["spec"]["devices"]["requests"]:
            if request["exactly"]["deviceClassName"] not in classes:
                wrong.append(f"{claim['metadata']['name']}: no DeviceClass {request['exactly']['deviceClassName']}")
    return wrong


def apply_all(client: Client, objects: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    placed = client.into_namespace(objects, namespace)
    refused = []
    for obj in placed:
        try:
            client.apply(obj, dry_run=True)
        except Refused as err:
            refused.append(f"{obj['kind']} {obj['metadata']['name']}: {err}")
    assert not refused, "the API server refused:\n" + "\n".join(refused)
    return [client.apply(obj, dry_run=False) for obj in placed]


def check_stack(client: Client, publish, planned: dict[str, int], objects: list[dict[str, Any]], ns: str) -> None:
    assert objects, "nothing to apply"
    publish(planned)
    stored = apply_all(client, objects, ns)
    assert all(obj["metadata"].get("uid") for obj in stored)
    classes = {item["metadata"]["name"] for item in client.request("GET", "/apis/resource.k8s.io/v1/deviceclasses")["items"]}
    assert not dangling(objects, set(planned), classes)
