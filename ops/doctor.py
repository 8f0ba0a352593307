"""`doctor`: compare what runs on the hosts with the plan, and say what is wrong.

For every host of a stack, one round trip (ssh, or a local shell for a
`unix://` Docker daemon) runs `GATHER_SCRIPT`, which prints the host's facts in
sections: `docker inspect` of every container, the PIDs of every running
container (`docker top`), the listening TCP sockets (`ss -ltnpH`), `npu-smi
info`, the Ascend device files and the driver folder. `parse_facts` turns that
text into `HostFacts`; `host_findings` compares the facts with the plan and
with `container_spec` (the one mapping from a planned service to its container:
drift is judged against it, never recomputed). Hosts are checked in parallel;
an unreachable host is a finding, not a failure of the run.

What is detected, and how (see also `Finding.kind`):

- `missing`, `stopped`, `restarting`, `unhealthy`: the planned container (found
  by its name, which is the service name) is absent, exited/created/paused/dead,
  restarting, or running with health `unhealthy`. A container still `starting`
  is not a finding.
- `drift`: per key, the live container differs from its spec: image, each env
  variable the spec sets (variables the image adds are ignored), the device
  list, privileged mode, the published ports, the `ascend-fleet.*` labels.
- `foreign-card`: a running container that is not a planned container of this
  host and has a planned card's `/dev/davinciN` (or is privileged, which shows
  it every card); a process that `npu-smi info` lists on a planned card whose
  host PID is not a process of the container planned on that card (PIDs of
  containers come from `docker top`, so a process started by `docker exec` in
  a planned container counts as that container's).
- `foreign-port`: a listener in the host's network namespace (`ss -ltnp`) on a
  planned API port or inside a planned HCCL/vLLM window that is not the
  service's own (a `docker-proxy` listener belongs to the container that
  publishes the port); a foreign container publishing a port in a planned
  window; a foreign container sharing a planned card whose
  `HCCL_NPU_SOCKET_PORT_RANGE` (unset means HCCL's default 16666) overlaps the
  planned service's range on that card.
- `host`: Docker not answering, missing `/dev/davinciN` or control device
  files, no `/usr/local/Ascend/driver`, `npu-smi` failing or listing fewer
  cards than configured, cards whose health is not `OK`, no `ss`.
- `unreachable`: ssh could not connect or the host did not answer in time.

Not detected: sockets bound inside a container's own network namespace (HCCL's
ports of a bridge-networked container never show on the host; only their
`HCCL_NPU_SOCKET_PORT_RANGE` is compared), clashes between two foreign
containers, and HCCL host-side ranges of foreign containers (they only collide
under host networking, which the plan does not use).
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from allocation.config import FleetConfig
from allocation.containers import CONTROL_DEVICES, DRIVER_DIR, ContainerSpec, container_spec
from allocation.plan import HCCL_DEFAULT_NPU_PORT, HostPlan, Plan, PortSpan, span_text
from ops.npusmi import NpuSmiError, NpuSmiInfo, parse_npu_smi
from ops.ssh import run_script

FORMATS = ("table", "json")
KINDS = (
    "unreachable",
    "host",
    "missing",
    "stopped",
    "restarting",
    "unhealthy",
    "drift",
    "foreign-card",
    "foreign-port",
)
MARK = "@@ascend-fleet-doctor@@"

# POSIX sh, run with `sh -s`. The whole script is one { } group, so the shell has
# read all of it before the first command runs; stdin then goes to /dev/null and
# no command can swallow the rest of the script.
GATHER_SCRIPT = r"""{
exec </dev/null
m() { printf '\n%s %s\n' '@@ascend-fleet-doctor@@' "$*"; }
if command -v docker >/dev/null 2>&1; then
    ids=$(docker ps -aq --no-trunc 2>&1)
    rc=$?
    if [ $rc -ne 0 ]; then
        m docker-error; echo "docker ps exited $rc: $ids"
    else
        m docker-inspect
        if [ -n "$ids" ]; then docker inspect $ids 2>/dev/null; else echo '[]'; fi
        for id in $(docker ps -q --no-trunc 2>/dev/null); do
            m top "$id"; docker top "$id" -eo pid 2>/dev/null
        done
    fi
else
    m docker-error; echo "no docker command on the host"
fi
if command -v ss >/dev/null 2>&1; then
    m ss; ss -ltnpH 2>/dev/null || ss -ltnp 2>&1
else
    m ss-error; echo "no ss command on the host (iproute2)"
fi
m npu-smi; npu-smi info 2>&1; rc=$?; m npu-smi-rc; echo $rc
m devices; ls -1d /dev/davinci* /dev/devmm_svm /dev/hisi_hdc 2>/dev/null
m driver; [ -d /usr/local/Ascend/driver ] && echo present
m end
exit 0
}
"""


# ---- findings ---------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    kind: str
    """One of KINDS."""
    message: str
    service: str | None = None
    """The planned service concerned, if any."""
    container: str | None = None
    """The container concerned (planned or foreign), if any."""
    card: int | None = None
    port: int | None = None
    key: str | None = None
    """For drift: what differs (`image`, `env HCCL_NPU_SOCKET_PORT_RANGE`, `devices`...)."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "service": self.service, "message": self.message}
        for name in ("container", "card", "port", "key"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


@dataclass(frozen=True)
class HostReport:
    name: str
    reachable: bool
    findings: tuple[Finding, ...]
    seconds: float = 0.0


# ---- facts ------------------------------------------------------------------


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket in the host's network namespace."""

    address: str
    port: int
    processes: tuple[tuple[str, int], ...] = ()
    """(process name, pid) of every owner; empty when ss could not tell."""


@dataclass(frozen=True)
class LiveContainer:
    """The parts of `docker inspect` doctor compares."""

    id: str
    name: str
    image: str
    status: str
    """created, running, paused, restarting, exited, dead."""
    health: str | None
    exit_code: int
    pid: int
    env: Mapping[str, str]
    labels: Mapping[str, str]
    devices: frozenset[str]
    """Host paths of the devices passed in."""
    privileged: bool
    published: frozenset[tuple[int, int]]
    """(host port, container port) of every TCP port binding."""

    @property
    def active(self) -> bool:
        """Running (or about to run again): holds cards and ports."""
        return self.status in ("running", "restarting", "paused")

    @classmethod
    def from_inspect(cls, data: Mapping[str, Any]) -> LiveContainer:
        config = data.get("Config") or {}
        host_config = data.get("HostConfig") or {}
        state = data.get("State") or {}
        env = {}
        for item in config.get("Env") or ():
            key, _, value = item.partition("=")
            env[key] = value
        published = set()
        for container_port, bindings in (host_config.get("PortBindings") or {}).items():
            number, _, proto = container_port.partition("/")
            if proto not in ("", "tcp") or not number.isdigit():
                continue
            for binding in bindings or ():
                host_port = str((binding or {}).get("HostPort") or "")
                if host_port.isdigit():
                    published.add((int(host_port), int(number)))
        return cls(
            id=data.get("Id", ""),
            name=str(data.get("Name", "")).lstrip("/"),
            image=config.get("Image") or data.get("Image", ""),
            status=state.get("Status", "unknown"),
            health=(state.get("Health") or {}).get("Status"),
            exit_code=int(state.get("ExitCode") or 0),
            pid=int(state.get("Pid") or 0),
            env=env,
            labels=dict(config.get("Labels") or {}),
            devices=frozenset(d.get("PathOnHost", "") for d in host_config.get("Devices") or ()),
            privileged=bool(host_config.get("Privileged")),
            published=frozenset(published),
        )


@dataclass(frozen=True)
class HostFacts:
    """What one round trip learns about a host."""

    containers: tuple[LiveContainer, ...] = ()
    docker_error: str | None = None
    pids: Mapping[str, frozenset[int]] = field(default_factory=dict)
    """Container id -> host PIDs of its processes (running containers only)."""
    listeners: tuple[Listener, ...] = ()
    ss_error: str | None = None
    npu: NpuSmiInfo | None = None
    npu_error: str | None = None
    device_files: frozenset[str] = frozenset()
    driver: bool = True


_SS_USER = re.compile(r'\("(?P<name>[^"]*)",pid=(?P<pid>\d+)')


def parse_ss(text: str) -> tuple[Listener, ...]:
    """Listeners from `ss -ltnpH` (a header line, if any, is skipped); one per (address, port)."""
    out: dict[tuple[str, int], Listener] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 5 or fields[0] == "State":
            continue
        local = fields[3]
        address, _, port = local.rpartition(":")
        if not port.isdigit():
            continue
        procs = tuple((m.group("name"), int(m.group("pid"))) for m in _SS_USER.finditer(" ".join(fields[5:])))
        out.setdefault((address, int(port)), Listener(address, int(port), procs))
    return tuple(out.values())


def _sections(text: str) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith(MARK + " "):
            current = sections.setdefault(line[len(MARK) + 1 :].strip(), [])
            continue
        if current is not None:
            current.append(line)
    return {k: "\n".join(v).strip("\n") for k, v in sections.items()}


def parse_facts(text: str) -> HostFacts:
    """HostFacts from the output of GATHER_SCRIPT; raise ValueError if the output is cut short."""
    sec = _sections(text)
    if "end" not in sec:
        raise ValueError("the fact-gathering script did not finish (output cut short)")
    containers: tuple[LiveContainer, ...] = ()
    docker_error = sec.get("docker-error")
    if docker_error is None:
        try:
            raw = json.loads(sec.get("docker-inspect") or "[]")
        except json.JSONDecodeError as exc:
            docker_error = f"docker inspect printed no valid JSON: {exc}"
        else:
            containers = tuple(LiveContainer.from_inspect(c) for c in raw)
    pids = {}
    for name, body in sec.items():
        if name.startswith("top "):
            numbers = (line.strip() for line in body.splitlines())
            pids[name[4:].strip()] = frozenset(int(n) for n in numbers if n.isdigit())
    npu = npu_error = None
    rc = sec.get("npu-smi-rc", "").strip()
    if rc != "0":
        npu_error = f"npu-smi info exited {rc or '?'}: {' '.join((sec.get('npu-smi') or '').split())[:300]}"
    else:
        try:
            npu = parse_npu_smi(sec.get("npu-smi", ""))
        except NpuSmiError as exc:
            npu_error = str(exc)
    return HostFacts(
        containers=containers,
        docker_error=docker_error,
        pids=pids,
        listeners=parse_ss(sec.get("ss", "")),
        ss_error=sec.get("ss-error"),
        npu=npu,
        npu_error=npu_error,
        device_files=frozenset(line.strip() for line in sec.get("devices", "").splitlines() if line.strip()),
        driver=sec.get("driver", "").strip() == "present",
    )


# ---- pure checks ------------------------------------------------------------


def parse_port_list(value: str) -> list[PortSpan] | None:
    """`16666-16681`, `61000,61050-61100` -> spans; None for `auto` or anything unreadable."""
    spans = []
    for item in value.replace(" ", "").split(","):
        first, sep, last = item.partition("-")
        if not first.isdigit() or (sep and not last.isdigit()):
            return None
        spans.append((int(first), int(last) if sep else int(first)))
    return spans or None


def _overlap(a: PortSpan, b: PortSpan) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def _cards(devices: Iterable[str]) -> set[int]:
    out = set()
    for d in devices:
        m = re.fullmatch(r"/dev/davinci(\d+)", d)
        if m:
            out.add(int(m.group(1)))
    return out


def _image_ref(image: str) -> str:
    """`docker.io/library/x:latest` and `x` name the same image."""
    ref = image.removeprefix("docker.io/").removeprefix("library/")
    last = ref.rsplit("/", 1)[-1]
    if ":" not in last and "@" not in last:
        ref += ":latest"
    return ref


def _drift(spec: ContainerSpec, live: LiveContainer) -> list[Finding]:
    out = []

    def differ(key: str, planned: str, actual: str) -> None:
        out.append(
            Finding(
                "drift",
                f"container {spec.name}: {key}: {planned} (plan) != {actual} (live)",
                service=spec.name,
                container=live.name,
                key=key,
            )
        )

    if _image_ref(spec.image) != _image_ref(live.image):
        differ("image", spec.image, live.image)
    for key, value in spec.env.items():
        if live.env.get(key) != value:
            differ(f"env {key}", value, live.env[key] if key in live.env else "(unset)")
    planned_devices, live_devices = set(spec.devices), set(live.devices)
    if planned_devices != live_devices:
        extra = sorted(live_devices - planned_devices)
        lacking = sorted(planned_devices - live_devices)
        what = "; ".join(
            part
            for part in (f"extra {', '.join(extra)}" if extra else "", f"lacking {', '.join(lacking)}" if lacking else "")
            if part
        )
        differ("devices", ",".join(sorted(planned_devices)), f"{','.join(sorted(live_devices)) or '(none)'} ({what})")
    if spec.privileged != live.privileged:
        differ("privileged", str(spec.privileged).lower(), str(live.privileged).lower())
    planned_ports = {(spec.api_port, spec.api_port)}
    if planned_ports != set(live.published):
        show = lambda ports: ", ".join(f"{h}->{c}" for h, c in sorted(ports)) or "(none)"  # noqa: E731
        differ("published ports", show(planned_ports), show(live.published))
    for key, value in spec.labels.items():
        if live.labels.get(key) != value:
            differ(f"label {key}", value or '""', live.labels.get(key, "(unset)") or '""')
    return out


def host_findings(fleet: FleetConfig, hp: HostPlan, facts: HostFacts) -> list[Finding]:
    """Everything wrong on one reachable host, judged against the plan. Pure."""
    findings: list[Finding] = []
    host = hp.host
    specs = {ps.name: container_spec(fleet, ps) for ps in hp.services}

    # ---- the host itself
    if not facts.driver:
        findings.append(Finding("host", f"host {host.name}: no driver folder {DRIVER_DIR}"))
    wanted = [f"/dev/davinci{c}" for c in range(host.npus)] + list(CONTROL_DEVICES)
    missing_files = [d for d in wanted if d not in facts.device_files]
    if missing_files:
        findings.append(Finding("host", f"host {host.name}: device files missing: {', '.join(missing_files)}"))
    if facts.npu_error:
        findings.append(Finding("host", f"host {host.name}: {facts.npu_error}"))
    elif facts.npu is not None:
        seen = {n.index for n in facts.npu.npus}
        absent = [c for c in range(host.npus) if c not in seen]
        if absent:
            findings.append(
                Finding(
                    "host",
                    f"host {host.name}: npu-smi lists {len(seen)} cards, the config says {host.npus}; "
                    f"absent: {', '.join(map(str, absent))}",
                )
            )
        for npu in facts.npu.npus:
            if not npu.healthy:
                users = [ps.name for ps in hp.services if npu.index in ps.assignment.devices]
                planned = f" (planned for {', '.join(users)})" if users else ""
                findings.append(
                    Finding("host", f"host {host.name}: card {npu.index} health is {npu.health}{planned}", card=npu.index)
                )
    if facts.ss_error:
        findings.append(Finding("host", f"host {host.name}: {facts.ss_error}: listeners not checked"))
    if facts.docker_error:
        findings.append(Finding("host", f"host {host.name}: docker does not answer: {facts.docker_error}"))
        return findings  # without containers every process would look foreign

    # ---- planned containers
    by_name = {c.name: c for c in facts.containers}
    planned: dict[str, LiveContainer] = {}
    for name, spec in specs.items():
        live = by_name.get(name)
        if live is None:
            cards = ",".join(map(str, next(ps for ps in hp.services if ps.name == name).assignment.devices))
            findings.append(
                Finding(
                    "missing",
                    f"container {name} does not exist (planned on cards {cards}, API port {spec.api_port})",
                    service=name,
                    container=name,
                )
            )
            continue
        planned[name] = live
        if live.status == "restarting":
            findings.append(
                Finding("restarting", f"container {name} is restarting (last exit code {live.exit_code})", service=name, container=name)
            )
        elif live.status != "running":
            findings.append(
                Finding(
                    "stopped",
                    f"container {name} is {live.status} (exit code {live.exit_code})",
                    service=name,
                    container=name,
                )
            )
        elif live.health == "unhealthy":
            findings.append(Finding("unhealthy", f"container {name} is running but unhealthy", service=name, container=name))
        findings += _drift(spec, live)

    planned_ids = {c.id: name for name, c in planned.items()}
    foreign = [c for c in facts.containers if c.id not in planned_ids and c.active]

    def pids_of(c: LiveContainer) -> frozenset[int]:
        return facts.pids.get(c.id, frozenset()) | ({c.pid} if c.pid else frozenset())

    owner_of_pid: dict[int, LiveContainer] = {}
    for c in facts.containers:
        if c.active:
            for pid in pids_of(c):
                owner_of_pid[pid] = c

    def describe(c: LiveContainer) -> str:
        name = planned_ids.get(c.id)
        return f"container {c.name} (service {name})" if name else f"container {c.name} (not in the plan)"

    # ---- cards
    card_services: dict[int, list[str]] = {}
    for ps in hp.services:
        for card in ps.assignment.devices:
            card_services.setdefault(card, []).append(ps.name)
    reported: set[tuple[str, int | None]] = set()
    for c in foreign:
        if c.privileged and card_services:
            reported.update((c.id, card) for card in card_services)
            findings.append(
                Finding(
                    "foreign-card",
                    f"{describe(c)} is privileged: it sees every card, including planned cards "
                    f"{', '.join(map(str, sorted(card_services)))}",
                    container=c.name,
                )
            )
            continue
        for card in sorted(_cards(c.devices) & set(card_services)):
            reported.add((c.id, card))
            findings.append(
                Finding(
                    "foreign-card",
                    f"{describe(c)} holds /dev/davinci{card}, planned for {', '.join(card_services[card])}",
                    service=card_services[card][0],
                    container=c.name,
                    card=card,
                )
            )
    if facts.npu is not None:
        for proc in facts.npu.processes:
            users = card_services.get(proc.npu)
            if not users:
                continue
            owner = owner_of_pid.get(proc.pid)
            if owner is not None and planned_ids.get(owner.id) in users:
                continue
            if owner is not None and (owner.id, proc.npu) in reported:
                continue
            who = describe(owner) if owner is not None else "no container of this host (a process outside Docker or of an unknown container)"
            findings.append(
                Finding(
                    "foreign-card",
                    f"card {proc.npu}: npu-smi shows process {proc.pid} ({proc.name}, {proc.memory_mb} MB) "
                    f"of {who}; the card is planned for {', '.join(users)}",
                    service=users[0],
                    container=owner.name if owner is not None else None,
                    card=proc.npu,
                )
            )

    # ---- ports
    windows = [(ps.name, key, span) for ps in hp.services for key, span in ps.assignment.windows()]

    def windows_at(port: int) -> list[tuple[str, str, PortSpan]]:
        return [(name, key, span) for name, key, span in windows if span[0] <= port <= span[1]]

    publisher: dict[int, LiveContainer] = {}
    for c in facts.containers:
        if c.active:
            for host_port, _ in c.published:
                publisher[host_port] = c
    port_reported: set[tuple[str, int]] = set()
    for lst in facts.listeners:
        for service, key, span in windows_at(lst.port):
            own = planned.get(service)
            pids = {pid for _, pid in lst.processes}
            names = {name for name, _ in lst.processes}
            if own is not None and own.active and pids & pids_of(own):
                continue
            holder = next((owner_of_pid[p] for p in pids if p in owner_of_pid), None)
            if holder is None and (not pids or names <= {"docker-proxy"}):
                holder = publisher.get(lst.port)
            if holder is not None and own is not None and holder.id == own.id:
                continue
            if holder is not None:
                who = describe(holder)
                port_reported.add((holder.id, lst.port))
            elif lst.processes:
                who = ", ".join(f"process {n} (pid {p})" for n, p in lst.processes)
            else:
                who = "an unknown process (ss shows no owner)"
            findings.append(
                Finding(
                    "foreign-port",
                    f"port {lst.port} ({lst.address}) is held by {who}; it is in {service}'s {key} {span_text(span)}",
                    service=service,
                    container=holder.name if holder is not None else None,
                    port=lst.port,
                    key=key,
                )
            )
    for c in foreign:
        for host_port, _ in sorted(c.published):
            if (c.id, host_port) in port_reported:
                continue
            for service, key, span in windows_at(host_port):
                findings.append(
                    Finding(
                        "foreign-port",
                        f"{describe(c)} publishes port {host_port}, in {service}'s {key} {span_text(span)}",
                        service=service,
                        container=c.name,
                        port=host_port,
                        key=key,
                    )
                )
        shared = set(card_services) if c.privileged else _cards(c.devices) & set(card_services)
        raw = c.env.get("HCCL_NPU_SOCKET_PORT_RANGE")
        theirs = parse_port_list(raw) if raw is not None else [(HCCL_DEFAULT_NPU_PORT, HCCL_DEFAULT_NPU_PORT)]
        if not shared or not theirs:
            continue
        shown = raw if raw is not None else f"unset, so HCCL's default {HCCL_DEFAULT_NPU_PORT}"
        for ps in hp.services:
            cards = sorted(shared & set(ps.assignment.devices))
            ours = ps.assignment.hccl_npu_socket_port_range or (HCCL_DEFAULT_NPU_PORT, HCCL_DEFAULT_NPU_PORT)
            if not cards or not any(_overlap(ours, span) for span in theirs):
                continue
            findings.append(
                Finding(
                    "foreign-port",
                    f"{describe(c)} shares card {', '.join(map(str, cards))} with {ps.name} and its "
                    f"HCCL_NPU_SOCKET_PORT_RANGE ({shown}) overlaps {ps.name}'s {span_text(ours)}: "
                    "HCCL will fail with 'Socket bind failed, address already in use'",
                    service=ps.name,
                    container=c.name,
                    card=cards[0],
                    port=max(ours[0], min(s[0] for s in theirs if _overlap(ours, s))),
                    key="hcclNpuSocketPortRange",
                )
            )
    return findings


# ---- running it -------------------------------------------------------------


def check_host(fleet: FleetConfig, hp: HostPlan, *, timeout: float | None = None) -> HostReport:
    """Gather one host's facts in one round trip and judge them."""
    host = hp.host
    result = run_script(fleet, host, GATHER_SCRIPT, timeout=timeout)
    where = host.docker_url()
    if not result.reachable:
        return HostReport(
            host.name,
            False,
            (Finding("unreachable", f"host {host.name} ({where}) is unreachable: {result.error}"),),
            result.seconds,
        )
    try:
        facts = parse_facts(result.stdout)
    except ValueError as exc:
        detail = " ".join(result.stderr.split())[:300]
        return HostReport(
            host.name,
            True,
            (Finding("host", f"host {host.name}: {exc} (exit {result.returncode}{': ' + detail if detail else ''})"),),
            result.seconds,
        )
    return HostReport(host.name, True, tuple(host_findings(fleet, hp, facts)), result.seconds)


def check_plan(plan: Plan, *, timeout: float | None = None) -> list[HostReport]:
    """Every host of the plan, checked in parallel; reports in host-name order."""
    if not plan.hosts:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(plan.hosts))) as pool:
        return list(pool.map(lambda hp: check_host(plan.fleet, hp, timeout=timeout), plan.hosts))


def render_reports(stack: str, reports: list[HostReport], fmt: str) -> str:
    ok = not any(r.findings for r in reports)
    if fmt == "json":
        return json.dumps(
            {
                "stack": stack,
                "hosts": [
                    {"name": r.name, "reachable": r.reachable, "findings": [f.to_json() for f in r.findings]}
                    for r in reports
                ],
                "ok": ok,
            },
            indent=2,
        )
    total = sum(len(r.findings) for r in reports)
    lines = [f"stack {stack}: {len(reports)} host(s), " + ("ok" if ok else f"{total} finding(s)")]
    for r in reports:
        lines.append("")
        lines.append(f"host {r.name}: " + ("ok" if not r.findings else f"{len(r.findings)} finding(s)"))
        width = max((len(f.kind) for f in r.findings), default=0)
        for f in r.findings:
            lines.append(f"  {f.kind:<{width}}  {f.message}")
    return "\n".join(lines)


def run(fleet: FleetConfig, plan: Plan, fmt: str = "table") -> tuple[str, int]:
    """The `doctor` command: (report text, exit code 0 clean / 1 findings / 2 bad format)."""
    if fmt not in FORMATS:
        return f"error: unknown format {fmt!r}; choose one of {', '.join(FORMATS)}", 2
    reports = check_plan(plan)
    return render_reports(fleet.stack, reports, fmt), 0 if not any(r.findings for r in reports) else 1
