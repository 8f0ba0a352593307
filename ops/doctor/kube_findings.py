"""`doctor`'s judgement of a Kubernetes stack: what the cluster holds against what the plan renders. Pure.

The plan side is the renderer's own output (`views.exports.kubernetes.manifests`): each Deployment,
and each pod template of a multi-host service's LeaderWorkerSet (one per member), is a planned pod (its
`ascend-fleet/instance` and `ascend-fleet/host` labels, the claims and the env of its template), each
ResourceClaim a planned card. So doctor compares with the very objects
`render --format kubernetes` and the Pulumi components apply. Findings, in the docker target's words
where they mean the same (docs/doctor.md):

- `missing`: no pod carries the planned instance label; `stopped`: a pod not `Running`;
  `restarting`: a container waiting in `CrashLoopBackOff`; `unhealthy`: running, started (startup
  probe passed), and not `Ready`. A pod still starting is not a finding.
- `node`: a pod whose node is not its planned host (the node's `hostnameLabel` value, as the
  pod's `nodeSelector` asks for it): its cards and windows are planned on another machine.
- `claim`: a pod naming other claims than its planned cards'; a planned claim absent, not
  allocated, or allocated to devices whose `physicId` (looked up in the planned node's
  ResourceSlices) are not exactly its card.
- `drift`: a container's HCCL windows differ: any `HCCL_*` key or window variable (`VLLM_PORT`:
  `allocation.windows.WINDOW_ENV`) that the plan sets or the pod carries, compared value for value;
  without DRA (`kubernetes.dra: false`) also `ASCEND_VISIBLE_DEVICES`, which then chooses the cards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from allocation.target import DRA_DRIVER
from allocation.windows import WINDOW_ENV
from ops.doctor.drift import shown
from ops.doctor.findings import Finding
from ops.doctor.kube_facts import ClusterFacts, LiveClaim, LivePod
from records.deployment import Deployment
from views.exports.kubernetes import HOST_LABEL, INSTANCE_LABEL, RUNTIME_VISIBLE_ENV, manifests

WINDOW_PREFIX = "HCCL_"
"""Every HCCL setting, windows or not (`HCCL_BUFFSIZE` too): a pod's HCCL must be configured as planned."""


@dataclass(frozen=True)
class PlannedPod:
    name: str
    """Its pods' `ascend-fleet/instance` label: the service, replica, router or member."""
    owner: str
    """What runs it, as `kubectl describe` names it: `deployment NAME` or `leaderworkerset NAME`."""
    host: str
    claims: tuple[str, ...]
    env: Mapping[str, Mapping[str, str]]
    """Container name -> the env its template sets."""


@dataclass(frozen=True)
class PlannedClaim:
    name: str
    host: str
    card: int


def planned(deployment: Deployment) -> tuple[list[PlannedPod], list[PlannedClaim]]:
    """The pods and claims the renderer makes of the deployment."""
    pods, claims = [], []
    for m in manifests(deployment):
        labels = m.obj["metadata"]["labels"]
        if m.kind == "Deployment":
            pods.append(_planned_pod(f"deployment {m.name}", m.obj["spec"]["template"]))
        elif m.kind == "LeaderWorkerSet":
            lwt = m.obj["spec"]["leaderWorkerTemplate"]
            templates = [lwt["leaderTemplate"], lwt["workerTemplate"]][: lwt["size"]]
            pods += [_planned_pod(f"leaderworkerset {m.name}", t) for t in templates]
        elif m.kind == "ResourceClaim":
            claims.append(PlannedClaim(m.name, labels[HOST_LABEL], int(labels["ascend-fleet/card"])))
    return pods, claims


def _planned_pod(owner: str, template: Mapping) -> PlannedPod:
    labels, spec = template["metadata"]["labels"], template["spec"]
    refs = tuple(c["resourceClaimName"] for c in spec.get("resourceClaims", ()))
    env = {c["name"]: {e["name"]: e["value"] for e in c.get("env", ())} for c in spec["containers"]}
    return PlannedPod(labels[INSTANCE_LABEL], owner, labels[HOST_LABEL], refs, env)


def is_window(key: str) -> bool:
    return key.startswith(WINDOW_PREFIX) or key in WINDOW_ENV or key == RUNTIME_VISIBLE_ENV


def _status(plan: PlannedPod, pod: LivePod, ns: str) -> list[Finding]:
    what = f"pod {shown(pod.name)} of {plan.name}"
    look = f"`kubectl -n {ns} describe pod {shown(pod.name)}` says why"
    if pod.waiting == "CrashLoopBackOff":
        return [Finding("restarting", f"{what} is restarting (CrashLoopBackOff): {look}", service=plan.name, container=pod.name)]
    if pod.phase != "Running":
        reason = f", waiting: {shown(pod.waiting)}" if pod.waiting else ""
        text = f"{what} is {shown(pod.phase)}{reason}, not Running: {look}"
        return [Finding("stopped", text, service=plan.name, container=pod.name)]
    if pod.started and not pod.ready:
        return [Finding("unhealthy", f"{what} is running and not Ready (its readiness probe fails): {look}", service=plan.name, container=pod.name)]
    return []


def _node(plan: PlannedPod, pod: LivePod, facts: ClusterFacts) -> list[Finding]:
    if pod.node is None:
        return []
    host = facts.node_host.get(pod.node)
    if host == plan.host:
        return []
    on = f"host {shown(host)}" if host is not None else "no planned host (the node lacks the hostname label)"
    text = (
        f"pod {shown(pod.name)} of {plan.name} runs on node {shown(pod.node)} ({on}), but the plan puts it on "
        f"{plan.host}: its cards and windows are planned there. Delete the pod so that its {plan.owner} recreates "
        f"it on {plan.host}, and check that only {plan.host}'s node carries its hostname label value"
    )
    return [Finding("node", text, service=plan.name, container=pod.name)]


def _claims(plan: PlannedPod, pod: LivePod) -> list[Finding]:
    if sorted(pod.claims) == sorted(plan.claims):
        return []
    live = ", ".join(shown(c) for c in pod.claims) or "none"
    text = (
        f"pod {shown(pod.name)} of {plan.name} names claims {live}, the plan {', '.join(plan.claims) or 'none'}: "
        "it holds other cards than planned; `pulumi up` (or `kubectl apply` the rendered objects) restores its template"
    )
    return [Finding("claim", text, service=plan.name, container=pod.name, key="resourceClaims")]


def _env(plan: PlannedPod, pod: LivePod) -> list[Finding]:
    out = []
    for container, want in plan.env.items():
        have = pod.env.get(container)
        if have is None:
            text = f"pod {shown(pod.name)} of {plan.name} has no container {container}"
            out.append(Finding("drift", text, service=plan.name, container=pod.name, key="containers"))
            continue
        for key in sorted({k for k in (*want, *have) if is_window(k)}):
            if want.get(key) != have.get(key):
                live = shown(have[key]) if key in have else "unset"
                text = (
                    f"pod {shown(pod.name)} of {plan.name}: env {shown(key)}: {want.get(key, 'unset')} (plan) != {live} "
                    "(live): its HCCL windows may clash with a neighbour's; `pulumi up` restores the template"
                )
                out.append(Finding("drift", text, service=plan.name, container=pod.name, key=f"env {shown(key)}"))
    return out


def pod_findings(plan: PlannedPod, facts: ClusterFacts, ns: str) -> list[Finding]:
    pods = [p for p in facts.pods if p.instance == plan.name]
    if not pods:
        text = (
            f"{plan.name} has no pod (label ascend-fleet/instance={plan.name} in namespace {ns}): "
            f"`kubectl -n {ns} describe {plan.owner}` says why; `pulumi up` creates it if it is missing"
        )
        return [Finding("missing", text, service=plan.name)]
    judges = (lambda p: _status(plan, p, ns), lambda p: _node(plan, p, facts), lambda p: _claims(plan, p), lambda p: _env(plan, p))
    return [f for pod in sorted(pods, key=lambda p: p.name) for judge in judges for f in judge(pod)]


def _allocated(claim: LiveClaim, host: str, facts: ClusterFacts) -> list[tuple[int | None, str]]:
    """Each allocated device: its `physicId` on the host's node (None when no slice of that node
    publishes it for the driver), and how to name it in a message."""
    nodes = sorted(n for n, h in facts.node_host.items() if h == host)
    out = []
    for driver, pool, device in claim.devices or ():
        ids = [facts.physic_id[k] for n in nodes if (k := (n, driver, pool, device)) in facts.physic_id]
        named = f"device {shown(device)} of pool {shown(pool)} (driver {shown(driver)})"
        if len(ids) == 1 and driver == DRA_DRIVER:
            out.append((ids[0], f"{named}, physicId {ids[0]}"))
        else:
            out.append((None, f"{named}, in no ResourceSlice of {host}'s node"))
    return out


def claim_findings(plan: PlannedClaim, facts: ClusterFacts, ns: str) -> list[Finding]:
    live = facts.claims.get(plan.name)
    what = f"claim {plan.name} (card {plan.card} of {plan.host})"
    if live is None:
        return [Finding("claim", f"{what} does not exist in namespace {ns}: `pulumi up` creates it", card=plan.card)]
    if live.devices is None:
        text = f"{what} is not allocated: its pods cannot start; `kubectl -n {ns} describe resourceclaim {plan.name}` says why"
        return [Finding("claim", text, card=plan.card)]
    allocated = _allocated(live, plan.host, facts)
    if [physic for physic, _ in allocated] == [plan.card]:
        return []
    text = (
        f"{what} is allocated to {'; '.join(t for _, t in allocated) or 'no device'}, not to card {plan.card}: its pods "
        f"use another card than planned. Delete the claim's pods and the claim (`pulumi up` recreates it, selecting "
        f"physicId {plan.card})"
    )
    return [Finding("claim", text, card=plan.card)]


def cluster_findings(deployment: Deployment, facts: ClusterFacts) -> dict[str, list[Finding]]:
    """Host name -> its findings: each planned pod's, then each planned claim's."""
    ns = deployment.plan.fleet.kubernetes.namespace
    pods, claims = planned(deployment)
    out: dict[str, list[Finding]] = {hd.name: [] for hd in deployment.hosts}
    for plan in pods:
        out.setdefault(plan.host, []).extend(pod_findings(plan, facts, ns))
    for claim in claims:
        out.setdefault(claim.host, []).extend(claim_findings(claim, facts, ns))
    return out
