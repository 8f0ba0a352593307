"""What a `logs` or `status` request names: a service of the deployment, one of its replicas, its router,
a member of a multi-host service, a prefill or decode instance or the proxy of a disaggregated one. Pure.

Names are the operator's words: an unknown one is refused in one paragraph naming the services the
stack has, and the closest name (as a config error does, allocation/config_errors.py `suggest`).
"""

from __future__ import annotations

from dataclasses import dataclass

from allocation.config_errors import shown, suggest
from allocation.errors import ConfigError
from records.deployment import Deployment, HostDeployment
from records.disaggregated import DisaggregatedDeployment, InstanceDeployment, ProxyDeployment


@dataclass(frozen=True)
class Target:
    """The container a `logs` request names: its host, its name and Docker's, what the plan makes of it."""

    host: HostDeployment
    name: str
    """The replica's, router's, member's or service's name (its Deployment's on Kubernetes)."""
    container: str
    """Docker's name, which a renamed service keeps."""
    what: str


def target(deployment: Deployment, name: str, replica: int | None) -> Target:
    """The container of service `name` (replica `replica` of a replicated one), or of a replica, router,
    member of a multi-host service, or instance or proxy of a disaggregated one named so; ConfigError naming
    the stack's services when none is, naming its members for a multi-host service (each host runs its own
    member, with its own log), and its instances and proxy for a disaggregated one."""
    hosts = {hd.name: hd for hd in deployment.hosts}
    instances = {sd.name: sd for sd in deployment.services()}
    routers = {rd.name: rd for rd in deployment.routers}
    replicated = {rd.plan.service.name: rd for rd in routers.values()}
    members = {md.name: md for g in deployment.groups for md in g.members}
    parts = {c.name: c for d in deployment.disaggregated for c in (*d.instances, d.proxy)}
    _refuse_several(deployment, name, replica)
    if replica is not None:
        if name not in replicated:
            if name not in instances and name not in routers and name not in members and name not in parts:
                raise ConfigError(unknown(deployment, "logs", name))
            if name in members:
                how = "a member of a multi-host service, named as it is"
            elif name in parts:
                how = "an instance or the proxy of a disaggregated service, named as it is"
            elif instances.get(name) and instances[name].plan.instance.index == 0:
                how = "a service of its own"
            else:
                how = "a replica or router, named as it is"
            raise ConfigError(f"logs {name} --replica {replica}: {name} is not a replicated service ({how}): leave out --replica")
        replicas = replicated[name].replicas
        if not 1 <= replica <= len(replicas):
            raise ConfigError(f"logs {name} --replica {replica}: {name} has replicas 1 to {len(replicas)}")
        name = replicas[replica - 1].name
    elif name in replicated:
        rd = replicated[name]
        raise ConfigError(
            f"logs {name}: {name} runs {len(rd.replicas)} replicas behind its router: give --replica 1 to "
            f"{len(rd.replicas)}, or name the router, {rd.name}"
        )
    if name in instances:
        sd = instances[name]
        cards = ",".join(map(str, sd.plan.assignment.cards))
        return Target(hosts[sd.plan.assignment.host_name], sd.name, sd.spec.name, f"{sd.plan.instance.kind} {sd.name} on cards {cards}")
    if name in routers:
        rd = routers[name]
        return Target(hosts[rd.plan.host_name], rd.name, rd.spec.name, f"router {rd.name} of {rd.plan.service.name}")
    if name in members:
        md = members[name]
        what = f"{md.plan.role} {md.name} of {md.group.name} on cards {','.join(map(str, md.plan.assignment.cards))}"
        return Target(hosts[md.plan.assignment.host_name], md.name, md.spec.name, what)
    if name in parts:
        part = parts[name]
        return Target(hosts[_host_of(part)], part.name, part.spec.name, _what(part))
    raise ConfigError(unknown(deployment, "logs", name))


def _refuse_several(deployment: Deployment, name: str, replica: int | None) -> None:
    """ConfigError when `name` is a service of several containers, each with its own log: a multi-host
    service (naming its members) or a disaggregated one (naming its instances and proxy)."""
    groups = {g.name: g for g in deployment.groups}
    split = {d.name: d for d in deployment.disaggregated}
    leave = " and leave out --replica" if replica is not None else ""
    if name in groups:
        listed = ", ".join(f"{md.name} ({md.plan.role} on {md.plan.assignment.host_name})" for md in groups[name].members)
        raise ConfigError(
            f"logs {name}: {name} runs over {len(groups[name].members)} hosts, one member each with its own log: "
            f"name the member{leave}: {listed}"
        )
    if name in split:
        raise ConfigError(
            f"logs {name}: {name} runs prefill and decode apart, each instance and its proxy a container with its own "
            f"log: name one{leave}: {_parts(split[name])}"
        )


def _host_of(part: InstanceDeployment | ProxyDeployment) -> str:
    return part.host_name if isinstance(part, ProxyDeployment) else part.plan.assignment.host_name


def _what(part: InstanceDeployment | ProxyDeployment) -> str:
    """A prefill or decode instance, or a proxy, for messages: `prefill instance qwen-pd-prefill of qwen-pd on cards 0,1,2,3`."""
    if isinstance(part, ProxyDeployment):
        return f"proxy {part.name} of {part.plan.name}"
    return f"{part.role} instance {part.name} of {part.service.name} on cards {','.join(map(str, part.plan.assignment.cards))}"


def _parts(d: DisaggregatedDeployment) -> str:
    """Each instance with its role and host, then the proxy with its host."""
    return ", ".join(f"{c.name} ({c.role if isinstance(c, InstanceDeployment) else 'proxy'} on {_host_of(c)})" for c in (*d.instances, d.proxy))


def unknown(deployment: Deployment, command: str, name: str, what: str = "service, replica or router") -> str:
    """One paragraph: `name` is none of the stack's; the closest, and every service with its replicas and
    router, or its members."""
    replicated = {rd.plan.service.name: rd for rd in deployment.routers}
    groups = {g.name: g for g in deployment.groups}
    split = {d.name: d for d in deployment.disaggregated}
    services = sorted(configured(deployment))
    members = [md.name for g in deployment.groups for md in g.members]
    parts = [c.name for d in deployment.disaggregated for c in (*d.instances, d.proxy)]
    known = services if what == "service" else [
        *services, *(sd.name for sd in deployment.services()), *(rd.name for rd in deployment.routers), *members, *parts]
    listed = ", ".join(
        f"{s} (replicas 1 to {len(replicated[s].replicas)}, router {replicated[s].name})" if s in replicated
        else f"{s} (members {', '.join(md.name for md in groups[s].members)})" if s in groups
        else f"{s} ({_parts(split[s])})" if s in split else s
        for s in services
    )
    return (
        f"{command} {shown(name)}: stack {deployment.stack} has no {what} of that name"
        f"{suggest(name, known)}; its services: {listed or 'none'}"
    )


def services_named(deployment: Deployment, requested: list[str]) -> frozenset[str]:
    """The configured services `status SERVICE...` names; ConfigError for one the stack lacks."""
    services = configured(deployment)
    for name in requested:
        if name not in services:
            raise ConfigError(unknown(deployment, "status", name, "service"))
    return frozenset(requested)


def configured(deployment: Deployment) -> set[str]:
    """The names of the stack's configured services: a replicated service's, a multi-host service's, a
    disaggregated service's."""
    return {sd.plan.replica_of for sd in deployment.services()} | {g.name for g in deployment.groups} | {d.name for d in deployment.disaggregated}
