"""`endpoints`: the URLs clients use, per service and router, from the deployment records alone. Pure.

A service of its own answers at its own endpoint; a replicated service at its router's, the one its
clients use, followed by each replica's own (to reach one replica, bypassing the router). On the
docker target they are the records' (`http://address:port/v1`, records.deployment); on Kubernetes
the in-cluster names of the Services that `render --format kubernetes` and the program create
(views.exports.kubernetes), as the stack output `services` gives them.
"""

from __future__ import annotations

from dataclasses import dataclass

from allocation import names
from records.deployment import Deployment
from views.exports.kubernetes import group_url, router_url, worker_url
from views.report import json_text, text_table

FORMATS = ("table", "json")


@dataclass(frozen=True)
class Endpoint:
    service: str
    """The configured service."""
    name: str
    """The service itself, its router or one of its replicas."""
    kind: str
    """`service`, `router`, `replica`, `group` or `disaggregated` (the plan JSON's `kind`)."""
    host: str
    endpoint: str
    """The OpenAI-compatible base URL, ending in `/v1`."""

    def to_json(self) -> dict[str, str]:
        return {"service": self.service, "name": self.name, "kind": self.kind, "host": self.host, "endpoint": self.endpoint}


def endpoints(deployment: Deployment) -> list[Endpoint]:
    """Per configured service, by name: its own endpoint, or its router's then its replicas', or a multi-host
    service's (its leader's, on the leader's host), or a disaggregated service's (its proxy's, on the proxy's host)."""
    fleet = deployment.plan.fleet
    kube = fleet.target == "kubernetes"
    routers = {rd.plan.service.name: rd for rd in deployment.routers}
    instances = sorted(deployment.services(), key=lambda sd: (sd.plan.replica_of, sd.plan.instance.index))
    out = []
    for sd in instances:
        service = sd.plan.replica_of
        rd = routers.get(service)
        if rd is not None and sd is rd.replicas[0]:
            url = f"{router_url(fleet, rd)}/v1" if kube else rd.endpoint
            out.append(Endpoint(service, rd.name, names.ROUTER, rd.plan.host_name, url))
        url = f"{worker_url(fleet, sd)}/v1" if kube else sd.endpoint
        out.append(Endpoint(service, sd.name, sd.plan.instance.kind, sd.plan.assignment.host_name, url))
    out += [
        Endpoint(g.name, g.name, names.GROUP, g.plan.leader.host.name, f"{group_url(fleet, g)}/v1" if kube else g.endpoint)
        for g in deployment.groups
    ]
    out += [Endpoint(d.name, d.name, names.DISAGGREGATED, d.proxy.host_name, d.endpoint) for d in deployment.disaggregated]
    return sorted(out, key=lambda e: e.service)  # stable: a router before its replicas


def render(deployment: Deployment, fmt: str) -> str:
    found = endpoints(deployment)
    if fmt == "json":
        return json_text({"stack": deployment.stack, "endpoints": [e.to_json() for e in found]})
    services = len({e.service for e in found})
    title = f"stack {deployment.stack}: {services} service(s); a replicated service's clients use its router"
    rows = [[e.service, e.name, e.kind, e.host, e.endpoint] for e in found]
    return f"{title}\n\n{text_table(['service', 'name', 'kind', 'host', 'endpoint'], rows)}"
