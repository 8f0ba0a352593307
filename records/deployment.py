"""The deployment: the plan turned, once, into what each host and service gets.

`deploy(plan)` is the one function between the plan and everything that acts on
it. The Pulumi components translate its records into resources, `render`
writes them as compose files or scripts, `doctor` judges live hosts against
them and `plan --format json` prints their containers. Each consumer receives
its slice (a `HostDeployment` or a `ServiceDeployment`), never the whole
fleet, so what is deployed, exported and checked cannot drift apart. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Iterable, Iterator, Mapping

from allocation import names
from allocation.config import Host, Ssh
from allocation.errors import AllocationError, listing
from records.containers import ContainerSpec, Site, container_spec
from records.exporter import exporter_spec
from records.group import GroupDeployment, MemberDeployment, by_member, group_deployment
from records.disaggregated import (
    DisaggregatedDeployment, InstanceDeployment, ProxyDeployment, by_instance, disaggregated_deployment,
)  # fmt: skip
from records.card_order import card_orders, order_script, removal_script as order_removal
from records.device_share import device_share_script, removal_script
from records.held_cards import HeldCard, held_cards
from records.host_check import host_check_script
from records.takeover import takeover_problems, takeover_script
from records.known_hosts import find_host_key
from records.ssh_options import ssh_options
from allocation.plan import HostPlan, Plan, ServicePlan, RouterPlan
from records.rollout import Handover, handover, workers_script
from records.router import build_script, image_tag, router_spec
from records.start_order import start_after
from allocation.windows import KINDS


EXPORTER = "exporter"
"""The `kind` of a host's NPU exporter; services, replicas, routers and members have the plan JSON's."""


@dataclass(frozen=True)
class PlannedContainer:
    """One container the plan creates on a host, as `doctor` and `status` see it (`HostDeployment.planned`)."""

    name: str
    """The service's, replica's, router's, member's or exporter's name."""
    spec: ContainerSpec
    what: str
    """What it is, for messages: `on cards 0,1`, `as the router of bge-m3`..."""
    kind: str
    """`service`, `replica`, `router`, `member`, `role`, `proxy` (the plan JSON's `kind`) or `exporter`."""
    service: str | None
    """The configured service it serves: a replica's service, a router's, a member's group, a prefill or decode
    instance's or a proxy's disaggregated service; None for the exporter."""
    cards: tuple[int, ...]
    """Its planned cards; none for a router or the exporter."""
    endpoint: str | None
    """Where clients reach it: a member's is its group's, on the leader only (a follower serves no HTTP)."""
    role: str | None = None
    """A member's `leader` or `follower`, an instance's `prefill` or `decode`; None for any other container."""


@dataclass(frozen=True, eq=False)
class ServiceDeployment:
    """One service: its container and how it is reached and ordered. Compared and hashed by
    identity: the records that follow it (`after`, a router's `replicas`, the components built
    from it) hold this very object, never its name."""

    plan: ServicePlan
    spec: ContainerSpec
    endpoint: str
    """The OpenAI-compatible base URL, `http://address:apiPort/v1`."""
    after: tuple[ServiceDeployment, ...]
    """Services on the same host it is created after during `pulumi up` (they share a card): a
    dependency of the resource, never an input of its container, so a neighbour that comes or goes
    re-creates nothing. At run time the start gate orders the loads: its card locks, and the order
    on the host (`HostDeployment.start_order_script`)."""
    shared: bool = False
    """One of its cards is used by another service too, or (`deviceShare`) goes into device-share
    mode with such a card (the other chip of an Atlas A3 NPU): it starts after the switch."""

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def earlier_names(self) -> list[str]:
        """The names it had under the service's previous names and no longer has: what its resources
        get aliases to."""
        return names.earlier_names(self.name, self.plan.instance.previous_names)

    @property
    def url(self) -> str:
        """Where the service answers, `http://address:apiPort`: its router's worker URL."""
        return self.endpoint.removesuffix("/v1")

    def summary(self) -> dict[str, object]:
        """The service's stack output, without its endpoint (an Output in the program)."""
        a = self.plan.assignment
        windows = {k.key: k.text(a.windows[k.key]) if k.key in a.windows else None for k in KINDS}
        return {"host": a.host_name, "devices": list(a.cards), **windows}


@dataclass(frozen=True)
class RouterDeployment:
    """The router of a replicated service: its container, how its image is built, what it waits for."""

    plan: RouterPlan
    spec: ContainerSpec
    endpoint: str
    """The service's OpenAI-compatible base URL: the router's, `http://address:port/v1`."""
    replicas: tuple[ServiceDeployment, ...]
    """Its replicas' deployments, in the order of `plan.replicas`."""
    base_image: str
    """The service's image, which the router image is built on."""
    build_script: str
    """Builds the router image on its host (`records.router`); prints the image id."""
    workers: tuple[str, ...]
    """Each replica's URL, in the order of `replicas`: the router's `--worker-urls`."""
    workers_script: str
    """Writes `workers` where the router reads it at start, and reconciles the running router
    (`records.rollout`): the router's container never names its workers."""
    handovers: tuple[Handover, ...]
    """Per replica, in order: the step that confirms it serves again, which the next replica's
    container waits for (one replica down at a time)."""

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def earlier_names(self) -> list[str]:
        """The names it had under the service's previous names and no longer has: what its resources
        get aliases to."""
        return names.earlier_names(self.name, self.plan.previous_names)

    @property
    def first(self) -> str:
        """The name of the replica the router starts after: it exits when no worker answers, so one must."""
        return self.replicas[0].name


@dataclass(frozen=True)
class HostDeployment:
    """One host: how to reach its Docker daemon, what to check first, what to pull and run."""

    plan: HostPlan
    docker_url: str
    host_key: str | None
    """The SSH host key every client trusts: the host's `hostKey`, else the known_hosts entry."""
    ssh_options: tuple[str, ...] | None
    """Options of the system `ssh` the docker provider and `doctor` run; None for a local daemon."""
    connect_timeout_seconds: int
    """How long reaching the host over SSH may take (`ssh.connectTimeoutSeconds`): every client's bound."""
    shared_cards: tuple[int, ...]
    """Cards more than one of its services use, ascending."""
    device_share_cards: tuple[int, ...]
    """Cards the device-share script puts into the mode, ascending: the shared cards with the rest of
    their sharing unit (both chips of an Atlas A3 NPU); empty unless `cardSharing` is `deviceShare`."""
    device_share_removal: str | None
    """Undoes `device_share_script` when the host stops sharing cards; None with no such script."""
    start_order_removal: str | None
    """Undoes `start_order_script` when the host stops sharing cards; None with no such script."""
    stack: str
    """The stack whose containers are the plan's own (their label): what the host check reads."""
    docker_engine: str
    """The Docker Engine version the stack declares for the host, which the host check compares."""
    images: tuple[str, ...]
    pull_timeout_seconds: int
    services: tuple[ServiceDeployment, ...]
    """In name order, so every service comes after those it starts after."""
    routers: tuple[RouterDeployment, ...] = ()
    """The routers on the host, by service name."""
    members: tuple[MemberDeployment, ...] = ()
    """The members of multi-host services on the host, by name (records.group)."""
    instances: tuple[InstanceDeployment, ...] = ()
    """The prefill and decode instances of disaggregated services on the host, by name (records.disaggregated)."""
    proxies: tuple[ProxyDeployment, ...] = ()
    """The proxies of disaggregated services on the host, by service name."""
    exporter: ContainerSpec | None = None
    """The NPU exporter's container (`records.exporter`): on a host in use while `metrics.npuExporter`
    is set, else None."""
    held_cards: tuple[HeldCard, ...] = ()
    """Cards the plan switches to device-share mode while a pinned (so running) service holds them
    alone (`records.held_cards`): that service must stop for the switch."""

    # The scripts are built on first use, once (a frozen record's cached value): `plan` prints none of
    # them, and at 1,300 hosts they cost a third of its records.

    @cached_property
    def check_script(self) -> str:
        """The host check (`records.host_check`), run before any image or container."""
        ports = {p for c in (*self.services, *self.routers) for p in c.spec.ports}
        ports |= set(() if self.exporter is None else self.exporter.ports)
        models = (*self.services, *self.members, *self.instances)
        return host_check_script(
            self.host, [(c.plan, c.spec) for c in models], stack=self.stack, ports=sorted(ports),
            shared_cards=self.device_share_cards, engine=self.docker_engine, members=self.plan.members,
            instances=[i.name for i in self.instances],
        )  # fmt: skip

    @cached_property
    def takeover_script(self) -> str | None:
        """Disables for good the containers the host `replaces` (`records.takeover`), after the check and
        before anything that needs their cards or ports; None when it replaces none."""
        return takeover_script(self.host, self.host.replaces) if self.host.replaces else None

    @cached_property
    def device_share_script(self) -> str | None:
        """Puts the shared cards into device-share mode (`records.device_share`), after the check and
        before any container on them; None unless the host shares cards with `cardSharing: deviceShare`."""
        sharing = self.device_share_cards
        return device_share_script(self.host, sharing, own=[s.spec.name for s in self.services]) if sharing else None

    @cached_property
    def start_order_script(self) -> str | None:
        """Writes each shared card's deploy-time order of containers on the host and installs its boot step
        (`records.card_order`), after the check and before any container on those cards; None unless the
        host shares cards. A dependency of the containers, never an input: a new order re-creates nothing."""
        return order_script(self.host, card_orders(self.plan)) if self.shared_cards else None

    @property
    def planned(self) -> list[PlannedContainer]:
        """Every container the plan creates on the host: its services and replicas, its routers, its
        members of multi-host services, its prefill and decode instances and proxies, then the NPU exporter. The Docker name is the spec's, which a
        renamed service keeps. The one list of them: `doctor` judges these, `status` shows them, and the
        host's `replaces` may name none of them (`records.takeover.takeover_problems`)."""
        out = [
            PlannedContainer(sd.name, sd.spec, f"on cards {_cards(sd.plan.assignment.cards)}", sd.plan.instance.kind,
                             sd.plan.replica_of, sd.plan.assignment.cards, sd.endpoint)
            for sd in self.services
        ]  # fmt: skip
        out += [
            PlannedContainer(rd.name, rd.spec, f"as the router of {rd.plan.service.name}", names.ROUTER, rd.plan.service.name, (), rd.endpoint)
            for rd in self.routers
        ]  # fmt: skip
        out += [
            PlannedContainer(md.name, md.spec, _member_role(md), names.MEMBER, md.group.name, md.plan.assignment.cards,
                             md.group.endpoint if md.plan.member.leader else None, md.plan.role)
            for md in self.members
        ]  # fmt: skip
        out += [
            PlannedContainer(i.name, i.spec, _instance_role(i), names.ROLE, i.service.name, i.plan.assignment.cards,
                             i.endpoint, i.role)
            for i in self.instances
        ]  # fmt: skip
        out += [
            PlannedContainer(p.name, p.spec, f"as the proxy of {p.plan.name} (host network)", names.PROXY, p.plan.name, (), p.endpoint)
            for p in self.proxies
        ]  # fmt: skip
        if self.exporter is not None:
            out.append(PlannedContainer(self.exporter.name, self.exporter, "as the host's NPU exporter", EXPORTER, None, (), None))
        return out

    @property
    def containers(self) -> list[tuple[str, ContainerSpec, str]]:
        """(name, spec, what it is) of every container the plan creates on the host (`planned`)."""
        return [(c.name, c.spec, c.what) for c in self.planned]

    @property
    def host(self) -> Host:
        return self.plan.host

    @property
    def name(self) -> str:
        return self.plan.host.name

    @property
    def in_use(self) -> bool:
        """Anything runs here: a service, a router, a member of a multi-host service, a prefill or decode
        instance or a proxy."""
        return bool(self.services or self.routers or self.members or self.instances or self.proxies)


def _cards(cards: tuple[int, ...]) -> str:
    return ",".join(map(str, cards))


def _member_role(md: MemberDeployment) -> str:
    return f"on cards {_cards(md.plan.assignment.cards)} as the {md.plan.role} of {md.group.name} (host network)"


def _instance_role(i: InstanceDeployment) -> str:
    return f"on cards {_cards(i.plan.assignment.cards)} as a {i.role} instance of {i.service.name} (host network)"


@dataclass(frozen=True)
class Deployment:
    plan: Plan
    ssh: Ssh
    hosts: tuple[HostDeployment, ...]
    """Every host of the plan, in name order, with services or not."""
    groups: tuple[GroupDeployment, ...] = ()
    """One per multi-host service, by service name; its members are those of the hosts."""
    disaggregated: tuple[DisaggregatedDeployment, ...] = ()
    """One per disaggregated service, by service name; its instances and proxy are those of the hosts."""

    @property
    def routers(self) -> tuple[RouterDeployment, ...]:
        return tuple(sorted((r for h in self.hosts for r in h.routers), key=lambda r: r.plan.service.name))

    @property
    def stack(self) -> str:
        return self.plan.stack

    def services(self) -> Iterator[ServiceDeployment]:
        return (s for h in self.hosts for s in h.services)

    def shard(self, index: int) -> Deployment:
        """What shard `index` of a fleet deployed as shards deploys: its hosts, with their services,
        routers, exporters and groups (a replicated service's replicas and router, a group's members, are in
        one shard)."""
        hosts = tuple(hd for hd in self.hosts if hd.plan.shard == index)
        kept = {hd.name for hd in hosts}
        groups = tuple(g for g in self.groups if g.plan.leader.host.name in kept)
        return replace(self, hosts=hosts, groups=groups, disaggregated=tuple(d for d in self.disaggregated if d.proxy.host_name in kept))


def previous_replicas(routers: Iterable[RouterDeployment]) -> dict[ServiceDeployment, ServiceDeployment]:
    """Each replica after its service's first -> the replica before it: the one-at-a-time order in
    which both targets roll a replicated service (components.router.Rollout, components.kubernetes)."""
    return {later: earlier for rd in routers for earlier, later in zip(rd.replicas, rd.replicas[1:])}


def _service_deployment(
    plan: Plan, hp: HostPlan, ps: ServicePlan, after: tuple[ServiceDeployment, ...], shared_cards: tuple[int, ...]
) -> ServiceDeployment:
    shared = bool(set(shared_cards) & set(ps.assignment.cards))
    return ServiceDeployment(
        plan=ps,
        spec=container_spec(ps, Site.of(plan.fleet, hp.host), shared=shared),
        endpoint=f"http://{hp.host.url_address()}:{ps.assignment.api_port}/v1",
        after=after,
        shared=shared,
    )


def _router_deployment(plan: Plan, router: RouterPlan, services: Mapping[int, ServiceDeployment]) -> RouterDeployment:
    """`services`: every service's deployment, by the identity of its plan."""
    replicas = tuple(services[id(ps)] for ps in router.replicas)
    base = router.settings.base_image
    host = plan.fleet.host(router.host_name)
    workers = tuple(sd.url for sd in replicas)
    return RouterDeployment(
        plan=router,
        spec=router_spec(router, Site.of(plan.fleet, host)),
        endpoint=f"http://{host.url_address()}:{router.port}/v1",
        replicas=replicas,
        base_image=base,
        build_script=build_script(base),
        workers=workers,
        # Docker's names, which a renamed service keeps: the scripts reach the router by its container.
        workers_script=workers_script(router.container_name, image_tag(base), router.port, workers),
        handovers=tuple(
            handover(router.container_name, router.port, sd.name, sd.url, sd.spec.start_timeout_seconds, sd.spec.name)
            for sd in replicas
        ),
    )


def _service_deployments(plan: Plan, hp: HostPlan, shared_cards: tuple[int, ...]) -> tuple[ServiceDeployment, ...]:
    """In the host's order, so each service's predecessors are made before it."""
    made: dict[int, ServiceDeployment] = {}  # by the identity of its plan
    for ps, before in start_after(hp):
        made[id(ps)] = _service_deployment(plan, hp, ps, tuple(made[id(p)] for p in before), shared_cards)
    return tuple(made.values())


def _host_deployment(
    plan: Plan,
    hp: HostPlan,
    known_hosts: str,
    shared_cards: tuple[int, ...],
    services: tuple[ServiceDeployment, ...],
    routers: tuple[RouterDeployment, ...],
    members: tuple[MemberDeployment, ...],
    pd: tuple[tuple[InstanceDeployment, ...], tuple[ProxyDeployment, ...]] = ((), ()),
) -> HostDeployment:
    host = hp.host
    sharing = _mode_cards(hp)
    url = host.docker_url()
    instances, proxies = pd
    exporter = exporter_spec(plan.fleet, host) if services or routers or members or instances or proxies else None
    extra = (*(c.spec for c in (*members, *instances, *proxies)), *(() if exporter is None else (exporter,)))
    return HostDeployment(
        plan=hp,
        docker_url=url,
        host_key=host.host_key or find_host_key(known_hosts, host.address, host.ssh_port),
        ssh_options=None if host.is_local() else tuple(ssh_options(plan.fleet.ssh, host.host_key)),
        connect_timeout_seconds=plan.fleet.ssh.connect_timeout_seconds,
        shared_cards=shared_cards,
        device_share_cards=sharing,
        device_share_removal=removal_script() if sharing else None,
        start_order_removal=order_removal() if shared_cards else None,
        stack=plan.stack,
        docker_engine=plan.fleet.docker_engine_of(host),
        images=tuple(sorted({s.spec.image for s in services} | {r.base_image for r in routers} | {e.image for e in extra})),
        pull_timeout_seconds=plan.fleet.pull_timeout_minutes * 60,
        services=services,
        routers=routers,
        members=members,
        instances=instances,
        proxies=proxies,
        exporter=exporter,
        held_cards=held_cards(hp),
    )


def _mode_cards(hp: HostPlan) -> tuple[int, ...]:
    """The cards a `deviceShare` host puts into device-share mode; none on other hosts."""
    return hp.device_share_cards() if hp.host.card_sharing == "deviceShare" else ()


def deploy(plan: Plan, known_hosts: str = "") -> Deployment:
    """Every host's and service's deployment record, computed once. `known_hosts` is the text of
    the known_hosts file the system ssh reads, for host keys the config does not give."""
    # Services first, host by host; routers then read their replicas' records on any host.
    shared = {hp.host.name: hp.shared_cards() for hp in plan.hosts}
    # A service on the other chip of a shared A3 NPU waits for the switch too (the mode reaches its
    # card); its container is the same, since only `cardSharing: privileged` changes a container.
    services = {hp.host.name: _service_deployments(plan, hp, _mode_cards(hp) or shared[hp.host.name]) for hp in plan.hosts}
    by_plan = {id(sd.plan): sd for host_services in services.values() for sd in host_services}
    routers = [_router_deployment(plan, r, by_plan) for r in plan.routers]
    groups = tuple(group_deployment(plan, g) for g in plan.groups)
    members = by_member(groups)
    pd = tuple(disaggregated_deployment(plan, d) for d in plan.disaggregated)
    instances = by_instance(pd)
    hosts = tuple(
        _host_deployment(
            plan, hp, known_hosts, shared[hp.host.name], services[hp.host.name],
            tuple(r for r in routers if r.plan.host_name == hp.host.name), tuple(members[id(mp)] for mp in hp.members),
            (tuple(instances[id(rp)] for rp in hp.roles), tuple(d.proxy for d in pd if d.proxy.host_name == hp.host.name)),
        )  # fmt: skip
        for hp in plan.hosts
    )
    # Before anything reaches a host: a takeover that cannot run stops the plan, not `pulumi up` midway.
    problems = [p for hd in hosts if hd.takeover_script for p in takeover_problems(hd.host, hd.takeover_script, hd.containers)]
    if problems:
        raise AllocationError(f"stack {plan.stack}: cannot take over: " + listing(problems) + ".")
    return Deployment(plan=plan, ssh=plan.fleet.ssh, hosts=hosts, groups=groups, disaggregated=pd)


def untrusted_hosts(deployment: Deployment) -> list[str]:
    """Hosts reached over SSH with no known key while `strictHostKeyChecking` is `yes`: the host
    check's Go client would trust any key there, so deploying to them must stop."""
    if deployment.ssh.strict_host_key_checking != "yes":
        return []
    return [hd.name for hd in deployment.hosts if hd.in_use and not hd.host.is_local() and hd.host_key is None]
