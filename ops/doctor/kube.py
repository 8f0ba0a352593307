"""`doctor` for a stack whose target is `kubernetes`: read the cluster through its API, judge, report.

One read of four lists (in the stack's namespace, the pods with an `ascend-fleet/instance` label and
the claims with the stack's `ascend-fleet/stack` label, as the renderer sets them; the driver's
ResourceSlices; the nodes), then `kube_findings` per host. The
reports become the docker target's (`ops.doctor.HostReport`), one per planned host, so `render_reports`
prints both targets alike. A cluster that cannot be read is an `unreachable` finding on every host,
not a failure of the run; a kubeconfig that cannot be used is a configuration error (exit 2).
"""

from __future__ import annotations

from pathlib import Path

from allocation.target import DRA_DRIVER
from ops import kube_api
from ops.doctor.findings import Finding
from ops.doctor.kube_facts import ClusterFacts, parse_cluster
from ops.doctor.kube_findings import cluster_findings
from records.deployment import Deployment
from views.exports.kubernetes import INSTANCE_LABEL, STACK_LABEL


def read_cluster(access: kube_api.Access, deployment: Deployment) -> ClusterFacts:
    fleet = deployment.plan.fleet
    ns, stack = fleet.kubernetes.namespace, {"labelSelector": f"{STACK_LABEL}={fleet.fleet_name}"}
    # A pod template carries the instance and host labels, not the stack's (views.exports.kubernetes).
    pods = kube_api.list_items(access, f"/api/v1/namespaces/{ns}/pods", {"labelSelector": INSTANCE_LABEL})
    claims = kube_api.list_items(access, f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims", stack)
    slices = (
        kube_api.list_items(access, "/apis/resource.k8s.io/v1/resourceslices", {"fieldSelector": f"spec.driver={DRA_DRIVER}"})
        if fleet.kubernetes.dra
        else []
    )
    nodes = kube_api.list_items(access, "/api/v1/nodes")
    return parse_cluster(pods, claims, slices, nodes, fleet.kubernetes.hostname_label)


def audit_cluster(deployment: Deployment, kubeconfig: Path) -> list[tuple[str, bool, tuple[Finding, ...]]]:
    """(host, reachable, findings) for each host of the deployment, in its order."""
    access = kube_api.load_access(kubeconfig)
    try:
        facts = read_cluster(access, deployment)
    except kube_api.KubeError as exc:
        text = f"the cluster at {access.server} (kubeconfig {kubeconfig}) cannot be read: {exc}"
        return [(hd.name, False, (Finding("unreachable", text),)) for hd in deployment.hosts]
    found = cluster_findings(deployment, facts)
    return [(name, True, tuple(findings)) for name, findings in found.items()]
