"""`build(deployment)`: every component of the stack, each fed its own record.

The loops live here rather than in `__main__.py`, as pulumi/examples' testing-unit-py keeps its
resources in a module the program only imports, so the program stays a few lines and what it
builds can be read (and run under the mocks) as one function.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pulumi

from components.ascend_host import AscendHost
from components.group_member import GroupMember
from components.model_service import ModelService
from components.npu_exporter import NpuExporter
from components.prefill_decode import PrefillDecodeInstance
from components.proxy import Proxy
from components.router import Rollout, Router
from components.stack_config import ssh_private_key
from records.deployment import Deployment, ServiceDeployment
from records.group import GroupDeployment

if TYPE_CHECKING:
    from components.kubernetes import KubernetesFleet


@dataclass(frozen=True)
class Fleet:
    """The components of one stack, by name."""

    hosts: dict[str, AscendHost]
    services: dict[str, ModelService]
    routers: dict[str, Router]
    exporters: dict[str, NpuExporter]
    """By host: the NPU exporter of each host in use, when `metrics.npuExporter` is set."""
    members: dict[str, GroupMember] = field(default_factory=dict)
    """By member name: every member of every multi-host service."""
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    """By multi-host service: its endpoint (the leader's), once every member serves, and its members' names."""
    instances: dict[str, PrefillDecodeInstance] = field(default_factory=dict)
    """By instance name: every prefill and decode instance of every disaggregated service."""
    proxies: dict[str, Proxy] = field(default_factory=dict)
    """By disaggregated service: its proxy, whose endpoint is the service's."""

    @property
    def endpoints(self) -> dict[str, Any]:
        """The stack output `services`: a replicated service's endpoint is its router's; each
        replica keeps its own entry; a multi-host service's is its leader's, and each member keeps its own
        entry (its host, cards and windows); a disaggregated service's is its proxy's, and each prefill and
        decode instance keeps its own entry (its host, cards, windows, kvPort and engine id)."""
        return (
            {n: s.summary for n, s in self.services.items()} | {n: r.summary for n, r in self.routers.items()}
            | self.groups | {n: m.summary for n, m in self.members.items()}
            | {n: p.summary for n, p in self.proxies.items()} | {n: i.summary for n, i in self.instances.items()}
        )


def build(deployment: Deployment) -> Fleet | KubernetesFleet:
    """One AscendHost per host in use, one ModelService per container of a service (each after the
    one before it on its cards), one Router per replicated service, one GroupMember per member of a
    multi-host service (none after another: `components.group_member`), one PrefillDecodeInstance per
    instance of a disaggregated service and its Proxy after all of them, and, when on, one NpuExporter
    per host in use. A stack whose `target` is `kubernetes` gets the Kubernetes target's components
    (`components.kubernetes`) from the same records instead."""
    if deployment.plan.fleet.target == "kubernetes":
        from components.kubernetes import build as build_kubernetes  # only its stacks import pulumi-kubernetes

        return build_kubernetes(deployment)
    key = ssh_private_key(deployment.ssh)
    hosts = {hd.name: AscendHost(hd.name, hd, private_key=key) for hd in deployment.hosts if hd.in_use}
    rollout = Rollout(deployment.routers)  # a replica's container waits for the one before it to serve again
    made: dict[ServiceDeployment, ModelService] = {}  # by record: each follows its own `after`
    for hd in (hd for hd in deployment.hosts if hd.services):
        for sd in hd.services:
            after = [made[before] for before in sd.after]
            made[sd] = ModelService(sd.name, sd, hosts[hd.name], after=after, depends_on=rollout.waits_for(sd))
    routers = {
        rd.plan.service.name: Router(rd.name, rd, hosts[rd.plan.host_name], [made[sd] for sd in rd.replicas], rollout)
        for rd in deployment.routers
    }
    exporters = {
        hd.name: NpuExporter(f"{hd.name}-npu-exporter", hd.exporter, hosts[hd.name])
        for hd in deployment.hosts
        if hd.exporter is not None
    }
    members = {md.name: GroupMember(md.name, md, hosts[md.plan.host.name]) for g in deployment.groups for md in g.members}
    groups = {g.name: _group_summary(g, [members[md.name] for md in g.members]) for g in deployment.groups}
    instances = {
        i.name: PrefillDecodeInstance(i.name, i, hosts[i.plan.assignment.host_name]) for d in deployment.disaggregated for i in d.instances
    }
    proxies = {
        d.name: Proxy(d.proxy.name, d.proxy, hosts[d.proxy.host_name], [instances[i.name].container for i in d.instances])
        for d in deployment.disaggregated
    }
    return Fleet(hosts, {sd.name: ms for sd, ms in made.items()}, routers, exporters, members, groups, instances, proxies)


def _group_summary(group: GroupDeployment, members: list[GroupMember]) -> dict[str, Any]:
    """A multi-host service's stack output: its endpoint, known once every member's container is, and its members."""
    endpoint = group.endpoint
    ready = pulumi.Output.all(*(m.container.name for m in members)).apply(lambda _: endpoint)
    return {"endpoint": ready, "members": [md.name for md in group.members]}
