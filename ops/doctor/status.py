"""`status`: what runs where, read in the same one round trip per host as `doctor`. Pure.

`doctor` judges a host's facts; `status` shows them in the plan's terms. Per host: each planned
container (services and replicas, routers, members, prefill and decode instances and proxies, the NPU
exporter) with its cards, state and health, uptime, image and endpoint; then the containers outside the
plan that hold the host's cards; then what each router says of its replicas (`GET /workers`); then each
multi-host and disaggregated service's containers over its hosts. The facts are the gather script's
(ops.doctor.gather), read by `ops.doctor.read_host`: nothing here reaches a host.

The exit status a script can act on (`exit_code`): 0 when every planned container runs and is
healthy (or runs with no health check) and every router sees each of its replicas healthy; 1 when
anything planned is not; 2 when a host could not be read (unreachable, its Docker not answering, or
its answer unreadable), whatever the other hosts say.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, ClassVar

from allocation import names
from allocation.errors import printable
from ops.doctor.drift import shown
from ops.doctor.facts import HostFacts, LiveContainer
from ops.doctor.findings import HEALTHY, Finding, RouterWorkers, router_workers, view_of
from records.deployment import Deployment, HostDeployment, PlannedContainer
from records.host_requirements import cards_of
from views.report import WIDTH, fit, json_text, text_table

FORMATS = ("table", "json")
MISSING, UNKNOWN = "missing", "unknown"
"""A planned container's state when its host has none of that name, or could not be read."""
OK, NOT_SERVING, UNREAD = 0, 1, 2
"""`status`'s exit codes."""
MIN_IMAGE = 24
"""The image column gives way, down to this width, when a table would be wider than WIDTH."""


@dataclass(frozen=True)
class ContainerStatus:
    name: str
    """Docker's name (a renamed service keeps its container's)."""
    kind: str | None
    """`service`, `replica`, `router`, `member`, `role` (a prefill or decode instance), `proxy` or `exporter`; None
    for a container outside the plan."""
    service: str | None
    """The configured service it serves: a replica's service, a router's, a member's group, an instance's or
    proxy's disaggregated service."""
    cards: tuple[int, ...]
    """Its planned cards; for a container outside the plan, the cards whose device files it has."""
    endpoint: str | None
    state: str
    """Docker's State.Status (running, exited...), or `missing`, or `unknown`."""
    health: str | None = None
    """healthy, unhealthy, starting; None without a health check."""
    exit_code: int | None = None
    """The last exit code, when it is not running."""
    image: str | None = None
    """The image it runs, as Docker keeps it (Config.Image)."""
    started_at: str | None = None
    uptime_seconds: int | None = None
    """While running: the host's clock minus State.StartedAt."""
    stopped_seconds: int | None = None
    """While not running: the host's clock minus State.FinishedAt."""
    privileged: bool = False
    """Outside the plan and privileged: it sees every card."""
    role: str | None = None
    """A member's `leader` or `follower` in its group, an instance's `prefill` or `decode`; None for any other container."""

    @property
    def serving(self) -> bool:
        return self.state == "running" and self.health in (None, HEALTHY)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "planned": self.kind is not None, "kind": self.kind, "service": self.service,
            "cards": list(self.cards), "privileged": self.privileged, "state": self.state, "health": self.health,
            "serving": self.serving, "exitCode": self.exit_code, "image": self.image, "startedAt": self.started_at,
            "uptimeSeconds": self.uptime_seconds, "endpoint": self.endpoint, "role": self.role,
        }  # fmt: skip

    def status_text(self) -> str:
        """As `docker ps` words it: `up 3h12m (healthy)`, `exited (137) 5m ago`."""
        if self.state == "running":
            up = "up" if self.uptime_seconds is None else f"up {duration(self.uptime_seconds)}"
            return up + (f" ({self.health})" if self.health else "")
        if self.state in ("exited", "dead", "restarting"):
            ago = "" if self.stopped_seconds is None or self.state == "restarting" else f" {duration(self.stopped_seconds)} ago"
            return f"{self.state} ({self.exit_code}){ago}"
        return self.state


@dataclass(frozen=True)
class RouterStatus:
    name: str
    service: str
    said: RouterWorkers

    @property
    def serving(self) -> bool:
        """Running, and seeing each of its replicas healthy."""
        planned = [w for w in self.said.workers if w.replica is not None]
        return self.said.running and self.said.error is None and all(w.seen == HEALTHY for w in planned)

    def to_json(self) -> dict[str, Any]:
        workers = [{"replica": w.replica, "url": w.url, "seen": w.seen} for w in self.said.workers]
        return {"name": self.name, "service": self.service, "running": self.said.running, "error": self.said.error,
                "workers": workers if self.said.running and self.said.error is None else None}  # fmt: skip

    def text(self) -> str:
        if not self.said.running:
            return f"router {self.name} is not running: its workers were not read"
        if self.said.error is not None:
            return f"router {self.name}: {self.said.error}"
        seen = [f"{w.replica or shown(w.url, 80) + ' (not a planned replica)'} {w.seen}" for w in self.said.workers]
        return f"router {self.name} sees: {', '.join(seen) or 'no workers'}"


@dataclass(frozen=True)
class HostStatus:
    name: str
    address: str
    reachable: bool
    error: str | None
    """Why the host could not be read; its planned containers' state is then `unknown`."""
    containers: tuple[ContainerStatus, ...]
    routers: tuple[RouterStatus, ...] = ()

    @property
    def planned(self) -> list[ContainerStatus]:
        return [c for c in self.containers if c.kind is not None]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "address": self.address, "reachable": self.reachable, "error": self.error,
                "containers": [c.to_json() for c in self.containers], "routers": [r.to_json() for r in self.routers]}  # fmt: skip


@dataclass(frozen=True)
class GroupStatus:
    """A multi-host service: each member's row as its host shows it, the leader first. It serves only
    when every member does (vLLM's leader takes its followers only while the group starts)."""

    name: str
    endpoint: str
    members: tuple[tuple[str, ContainerStatus], ...]
    """(host, the member's row) of each member whose host was read or shown."""
    KEY: ClassVar[str] = "members"
    """The JSON key of the rows."""

    @property
    def serving(self) -> bool:
        return all(c.serving for _, c in self.members)

    def to_json(self) -> dict[str, Any]:
        members = [{"name": c.name, "role": _role(c), "host": host, "cards": list(c.cards), "state": c.state,
                    "health": c.health, "serving": c.serving} for host, c in self.members]  # fmt: skip
        return {"name": self.name, "endpoint": self.endpoint, "serving": self.serving, self.KEY: members}


@dataclass(frozen=True)
class DisaggregatedStatus(GroupStatus):
    """A disaggregated service: each prefill and decode instance's row, prefill first, then its proxy's (its
    `members`), as their hosts show them. It serves when every one does, as `status`'s exit code counts them."""

    KEY: ClassVar[str] = "containers"


def _role(c: ContainerStatus) -> str:
    """A member's `leader` or `follower`, an instance's `prefill` or `decode`, or `proxy`."""
    return c.role or str(c.kind)


def _gathered(hosts: list[HostStatus], at: list[tuple[str, str]]) -> tuple[tuple[str, ContainerStatus], ...]:
    """(host, row) of each (host, container) of `at` among the rows of `hosts`, in that order."""
    rows = {(h.name, c.name): c for h in hosts for c in h.planned}
    return tuple((host, rows[host, name]) for host, name in at if (host, name) in rows)


def group_status(deployment: Deployment, hosts: list[HostStatus]) -> list[GroupStatus]:
    """Each multi-host service among the rows of `hosts`, its members' rows gathered from their hosts."""
    out = []
    for g in deployment.groups:
        members = _gathered(hosts, [(md.plan.assignment.host_name, md.spec.name) for md in g.members])
        if members:
            out.append(GroupStatus(g.name, g.endpoint, members))
    return out


def disaggregated_status(deployment: Deployment, hosts: list[HostStatus]) -> list[DisaggregatedStatus]:
    """Each disaggregated service among the rows of `hosts`, its instances' and proxy's rows gathered from their hosts."""
    out = []
    for d in deployment.disaggregated:
        at = [(i.plan.assignment.host_name, i.spec.name) for i in d.instances] + [(d.proxy.host_name, d.proxy.spec.name)]
        containers = _gathered(hosts, at)
        if containers:
            out.append(DisaggregatedStatus(d.name, d.endpoint, containers))
    return out


def duration(seconds: int) -> str:
    """`45s`, `12m`, `3h12m`, `4d3h`: the two largest units."""
    if seconds < 60:
        return f"{max(seconds, 0)}s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if hours == 0:
        return f"{minutes}m"
    if days == 0:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"


def seconds_since(stamp: str, clock: int | None) -> int | None:
    """The host's clock minus an RFC 3339 time of `docker inspect`; None when either is unknown
    (Docker's zero time, `0001-01-01T00:00:00Z`, is a container that never stopped)."""
    if clock is None or len(stamp) > 40:
        return None
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    if when.tzinfo is None or when.year < 1970:
        return None
    return max(0, clock - int(when.timestamp()))


def _live(c: LiveContainer, clock: int | None, **planned: Any) -> ContainerStatus:
    running = c.status == "running"
    return ContainerStatus(
        name=c.name, state=c.status, health=c.health, exit_code=None if running else c.exit_code, image=c.image,
        started_at=c.started_at or None, uptime_seconds=seconds_since(c.started_at, clock) if running else None,
        stopped_seconds=None if running else seconds_since(c.finished_at, clock), **planned,
    )  # fmt: skip


def _planned(c: PlannedContainer) -> dict[str, Any]:
    """What the plan says of a container `status` shows."""
    return {"kind": c.kind, "service": c.service, "cards": c.cards, "endpoint": c.endpoint, "role": c.role}


def _unread(hd: HostDeployment, reachable: bool, error: str) -> HostStatus:
    rows = tuple(ContainerStatus(c.spec.name, state=UNKNOWN, **_planned(c)) for c in hd.planned)
    return HostStatus(hd.name, hd.host.address, reachable, error, rows)


def host_status(hd: HostDeployment, read: HostFacts | Finding) -> HostStatus:
    """One host's containers as read (`ops.doctor.read_host`), against its deployment."""
    if isinstance(read, Finding):
        return _unread(hd, read.kind != "unreachable", read.message)
    if read.docker_error:
        return _unread(hd, True, f"host {hd.name}: docker does not answer: {read.docker_error}")
    view = view_of(hd, read)
    rows = []
    for c in hd.planned:
        live = view.live.get(c.name)
        rows.append(ContainerStatus(c.spec.name, state=MISSING, **_planned(c)) if live is None else _live(live, read.clock, **_planned(c)))
    npus = tuple(range(hd.host.npus))
    for c in view.foreign:
        held = npus if c.privileged else tuple(sorted(cards_of(c.device_files)))
        if held:
            rows.append(_live(c, read.clock, kind=None, service=None, cards=held, endpoint=None, privileged=c.privileged))
    routers = tuple(RouterStatus(rd.name, rd.plan.service.name, router_workers(view, rd)) for rd in hd.routers)
    return HostStatus(hd.name, hd.host.address, True, None, tuple(rows), routers)


def hosts_of(deployment: Deployment, services: frozenset[str]) -> Deployment:
    """The deployment with only the hosts where one of `services` has a container (a replica, a router,
    a member of a multi-host service)."""
    return replace(deployment, hosts=tuple(hd for hd in deployment.hosts if any(c.service in services for c in hd.planned)))


def only(h: HostStatus, services: frozenset[str]) -> HostStatus:
    """A host's status with only the containers and routers of `services`."""
    return replace(h, containers=tuple(c for c in h.containers if c.service in services),
                   routers=tuple(r for r in h.routers if r.service in services))  # fmt: skip


def exit_code(hosts: list[HostStatus]) -> int:
    if any(h.error is not None for h in hosts):
        return UNREAD
    serving = all(c.serving for h in hosts for c in h.planned) and all(r.serving for h in hosts for r in h.routers)
    return OK if serving else NOT_SERVING


def cards_text(cards: tuple[int, ...], npus: int | None = None) -> str:
    """`0-3`, `0,2,4-7`, `all`, `-`."""
    if not cards:
        return "-"
    if npus is not None and cards == tuple(range(npus)):
        return "all"
    runs: list[list[int]] = []
    for card in cards:
        if runs and card == runs[-1][-1] + 1:
            runs[-1].append(card)
        else:
            runs.append([card])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def _cut_left(text: str, width: int) -> str:
    """The end of `text` in `width` characters (an image's tag is at its end)."""
    return text if len(text) <= width else "..." + text[len(text) - width + 3 :]


HEADERS = ["container", "cards", "status", "image", "endpoint"]
IMAGE = HEADERS.index("image")


def _table(rows: list[list[str]]) -> str:
    """The rows under HEADERS, within WIDTH columns: the image column gives way first (its start cut)."""
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(r[i]) for r in [HEADERS, *rows]) for i in range(len(HEADERS))]
    over = 2 + sum(widths) + 2 * (len(widths) - 1) - WIDTH
    if over > 0:
        keep = max(MIN_IMAGE, widths[IMAGE] - over)
        rows = [[_cut_left(cell, keep) if i == IMAGE else cell for i, cell in enumerate(r)] for r in rows]
    return text_table(HEADERS, rows)


def _row(c: ContainerStatus, npus: int) -> list[str]:
    return [c.name, cards_text(c.cards, npus if c.privileged else None), c.status_text(), c.image or "-", c.endpoint or "-"]


def _host_title(h: HostStatus) -> str:
    if h.error is not None:
        return h.error  # it names the host
    planned = h.planned
    serving = sum(c.serving for c in planned)
    return f"{h.name} ({h.address}): {serving} of {len(planned)} planned containers running and healthy"


def _host_text(h: HostStatus, npus: int) -> list[str]:
    parts = [fit(printable(_host_title(h)))]
    if h.planned:
        parts.append(_table([_row(c, npus) for c in h.planned]))
    others = [c for c in h.containers if c.kind is None]
    if others:
        parts.append(fit("  not in the plan, holding cards of this host:"))
        parts.append(_table([_row(c, npus) for c in others]))
    if h.routers:
        parts.append("\n".join(fit(printable(r.text()), "  ", "    ") for r in h.routers))
    return parts


GROUP_HEADERS = ["member", "role", "host", "cards", "status"]


def _group_text(g: GroupStatus) -> str:
    title = f"group {g.name} ({g.endpoint}): {sum(c.serving for _, c in g.members)} of {len(g.members)} members running and healthy"
    return _section(title, GROUP_HEADERS, [(_role(c), host, c) for host, c in g.members])


def _disaggregated_text(d: DisaggregatedStatus) -> str:
    serving = sum(c.serving for _, c in d.members)
    title = f"disaggregated {d.name} ({d.endpoint}): {serving} of {len(d.members)} containers running and healthy"
    return _section(title, ["container", *GROUP_HEADERS[1:]], [(_role(c), host, c) for host, c in d.members])


def _section(title: str, headers: list[str], rows: list[tuple[str, str, ContainerStatus]]) -> str:
    """A service's containers over several hosts under its title: (role, host, row) each."""
    cells = [[printable(cell) for cell in (c.name, role, host, cards_text(c.cards), c.status_text())] for role, host, c in rows]
    return f"{fit(printable(title))}\n{text_table(headers, cells)}"


def render(deployment: Deployment, hosts: list[HostStatus], fmt: str) -> str:
    code = exit_code(hosts)
    groups, pd = group_status(deployment, hosts), disaggregated_status(deployment, hosts)
    if fmt == "json":
        return json_text({"stack": deployment.stack, "ok": code == OK, "hosts": [h.to_json() for h in hosts],
                          "groups": [g.to_json() for g in groups], "disaggregated": [d.to_json() for d in pd]})  # fmt: skip
    planned = [c for h in hosts for c in h.planned]
    unread = sum(h.error is not None for h in hosts)
    summary = f"stack {deployment.stack}: {len(hosts)} host(s), {sum(c.serving for c in planned)} of {len(planned)} planned containers running and healthy"
    summary += f"; {unread} host(s) could not be read" if unread else ""
    parts = [summary]
    npus = {hd.name: hd.host.npus for hd in deployment.hosts}
    for h in hosts:
        parts.append("\n".join(_host_text(h, npus[h.name])))
    return "\n\n".join(parts + [_group_text(g) for g in groups] + [_disaggregated_text(d) for d in pd])
