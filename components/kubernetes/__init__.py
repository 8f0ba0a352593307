"""The Kubernetes target: the plan's objects (`views.exports.kubernetes.manifests`) as Pulumi resources.

`build(deployment)` is the Kubernetes counterpart of `components.fleet.build`, chosen by the stack's
`ascend-fleet:target`. The objects are the ones `render --format kubernetes` prints, so `pulumi up`
and `kubectl apply` of the export create the same cluster. Grouped by what they belong to: a node
component per host (its cards' claims, its device-share ConfigMap), a component per service or
replica (Deployment and Service), a component per multi-host service (its LeaderWorkerSet and the
Service of its leader's API), a component per router (worker ConfigMap, Deployment, Service).

Order, from dependencies only (Pulumi runs independent resources in parallel): a pod after its
node's claims; a service on a shared card after the services before it on the card (`after`, as on
docker: one load at a time per card); replica k after replica k-1, and the router after the first
replica. pulumi-kubernetes waits for a Deployment to be ready before its dependants start, so a
rollout of a replicated service takes one replica down at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import pulumi

from components.kubernetes.objects import create
from records.deployment import Deployment, RouterDeployment, ServiceDeployment, previous_replicas
from records.group import GroupDeployment
from views.exports.kubernetes import Manifest, group_url, manifests, router_url, worker_url


class Group(pulumi.ComponentResource):
    """The objects of one host, service or router, created in order, each after `depends_on`."""

    def __init__(self, typ: str, name: str, objects: Sequence[Manifest], depends_on: Sequence[pulumi.Resource] = (), timeout: int | None = None) -> None:
        super().__init__(f"ascend-fleet:kubernetes:{typ}", name)
        self.resources: dict[str, pulumi.CustomResource] = {}
        before = list(depends_on)
        for m in objects:
            res = create(m, self, before, timeout if m.kind == "Deployment" else None)
            self.resources[m.kind] = res
            before = [*before, res] if m.kind == "ConfigMap" else before  # a router's worker list before it
        self.register_outputs({})

    @property
    def deployment(self) -> pulumi.CustomResource:
        return self.resources["Deployment"]

    @property
    def leader_worker_set(self) -> pulumi.CustomResource:
        return self.resources["LeaderWorkerSet"]


@dataclass(frozen=True)
class KubernetesFleet:
    nodes: dict[str, Group]
    services: dict[str, Group]
    groups: dict[str, Group]
    """Each multi-host service's LeaderWorkerSet and Service, by the service's name."""
    routers: dict[str, Group]
    endpoints: dict[str, Any]
    """The stack output `services`, as the docker target's: each instance's and router's summary."""


def _services(deployment: Deployment, owned: dict[str, list[Manifest]], nodes: dict[str, Group]) -> dict[ServiceDeployment, Group]:
    """Each service's group, after its node's, its card neighbours' and its previous replica's."""
    previous = previous_replicas(deployment.routers)
    needs = {sd: [*sd.after, *([previous[sd]] if sd in previous else [])] for sd in deployment.services()}
    built: dict[ServiceDeployment, Group] = {}
    pending: list[ServiceDeployment] = list(deployment.services())
    while pending:
        ready = [sd for sd in pending if all(n in built for n in needs[sd])]
        assert ready, f"services wait for each other in a circle: {[sd.name for sd in pending]}"
        for sd in ready:
            host = nodes.get(sd.plan.assignment.host_name)
            waits = [*([host] if host else []), *(built[n].deployment for n in needs[sd])]
            built[sd] = Group("ModelService", sd.name, owned[f"service/{sd.name}"], waits, sd.spec.create_timeout_seconds)
        pending = [sd for sd in pending if sd not in built]
    return built


def _router_summary(deployment: Deployment, rd: RouterDeployment) -> dict[str, Any]:
    url = router_url(deployment.plan.fleet, rd)
    return {"endpoint": f"{url}/v1", "host": rd.plan.host_name, "replicas": [ps.name for ps in rd.plan.replicas]}


def _group(gd: GroupDeployment, owned: dict[str, list[Manifest]], nodes: dict[str, Group]) -> Group:
    """A multi-host service's objects, after the node of each member: no member waits for another, the
    leader's handshake waits for its followers (docs/multi-host.md)."""
    waits = [nodes[h] for h in dict.fromkeys(md.plan.assignment.host_name for md in gd.members) if h in nodes]
    return Group("MultiHostService", gd.name, owned[f"group/{gd.name}"], waits)


def build(deployment: Deployment) -> KubernetesFleet:
    """Every object of the stack, grouped by owner, in dependency order."""
    owned: dict[str, list[Manifest]] = {}
    for m in manifests(deployment):
        owned.setdefault(m.owner, []).append(m)
    nodes = {hd.name: Group("NpuNode", hd.name, owned[f"node/{hd.name}"]) for hd in deployment.hosts if f"node/{hd.name}" in owned}
    services = _services(deployment, owned, nodes)
    groups = {gd.name: _group(gd, owned, nodes) for gd in deployment.groups}
    routers = {
        rd.plan.service.name: Group(
            "Router", rd.name, owned[f"router/{rd.name}"], [services[rd.replicas[0]].deployment], rd.spec.create_timeout_seconds
        )
        for rd in deployment.routers
    }
    fleet = deployment.plan.fleet
    endpoints: dict[str, Any] = {
        sd.name: {"endpoint": worker_url(fleet, sd) + "/v1", **sd.summary()} for sd in deployment.services()
    }
    endpoints |= {rd.plan.service.name: _router_summary(deployment, rd) for rd in deployment.routers}
    endpoints |= {
        gd.name: {"endpoint": group_url(fleet, gd) + "/v1", "members": [md.name for md in gd.members]} for gd in deployment.groups
    }
    endpoints |= {md.name: md.summary() for gd in deployment.groups for md in gd.members}
    return KubernetesFleet(nodes, {sd.name: g for sd, g in services.items()}, groups, routers, endpoints)
