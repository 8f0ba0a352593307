"""`doctor`'s judgement: one host's facts against its deployment records. Pure.

`HostView` joins the two once (which live container is which planned service,
who owns each PID and published port, which cards and windows are planned);
each `_judge` function then looks for one kind of finding in that view.

- `missing`, `stopped`, `restarting`, `unhealthy`: the planned container (found
  by its name, the service name) is absent, not running, restarting, or running
  with health `unhealthy`. A container still `starting` is not a finding.
- `group`: a member of a multi-host service is absent from its host (its group
  cannot serve), or joins another leader address or RPC port, start rank or
  data-parallel size than the plan's (`ops.doctor.dp_flags`).
- `proxy`: a disaggregated service's proxy sends requests to other instances than
  the plan's (`ops.doctor.pd_flags`).
- `hccn-conf`: a prefill or decode instance does not mount `/etc/hccn.conf`
  (vllm-ascend issue 7711: its decoder answers wrong).
- `kv-transfer`: a serving prefill instance does not listen on every port of its
  `kvPort` block; two running containers of the stack carry one engine id (judged
  across hosts: `ops.doctor.engine_ids`).
- `drift`: the live container differs from its record in any field Docker
  keeps (`ops.doctor.drift`: command, env the plan sets, image, devices, mounts,
  ports, labels the plan sets, privileged, ipc mode, shm size, restart policy,
  sysctls, log driver and options, stop timeout, health check, the host network
  of a member, an instance or a proxy).
- `foreign-card`: a container outside the plan that runs, or is stopped but
  comes back when the daemon restarts (restart policy `always`), has a planned card's
  `/dev/davinciN` (or is privileged, so sees every card); or `npu-smi` lists a
  process on a planned card whose host PID belongs to no container planned on
  that card (`docker top` PIDs count, so `docker exec` in the planned container
  is its own). A container the host `replaces` that holds them again is named as
  taken over, with what starts it again (`docker compose up -d` in its project).
- `foreign-port`: a listener in the host's network namespace (`ss -ltnp`) inside
  a planned window that is not the service's own (a `docker-proxy` listener
  belongs to the container publishing the port); a foreign container (running or
  coming back) publishing a port in a planned window; a foreign container on a planned card whose
  HCCL NPU socket range (HCCL's default port when unset) overlaps the planned one; a foreign
  container on the host network whose HCCL host-side windows overlap a window of a member, an
  instance or a proxy (on the host network each of their windows is a host port, so its own
  listeners are its own and any other process's in them is foreign; a member's address-bound
  windows and a prefill instance's `kvPort` block are held only on its address or every address).
- `host`: Docker not answering; a path of the host requirements table missing
  for any configured card (device files, the driver paths every container
  mounts: the table the host check reads, worded as it words them); `npu-smi`
  failing, listing fewer cards than configured, or a card not `OK`; no `ss`.
  A host without npu-smi (the shell cannot find it) or without the driver folder
  while npu-smi fails gets that cause as its first finding, naming what doctor
  could not check; then no `sharing` finding is judged, whose advice (stop the
  containers, run `pulumi up`) needs npu-smi to switch the card.

- `kv-cache`: a running service with `kvCacheGiB` whose log's last "reserved ... GiB for KV Cache"
  line (`ops.doctor.kv_log`) says another size than the plan's `--kv-cache-memory-bytes`.

- `topology`: a tensor-parallel group with two cards `npu-smi info -t topo` does
  not show linked by HCCS (in either direction), or a topology that cannot be read
  on a host with such groups.

Not seen: sockets inside a bridge-networked container's own network namespace
(only its env range is compared), and clashes between two foreign containers.
"""

from __future__ import annotations

import ipaddress
import shlex
from dataclasses import dataclass
from typing import Any, Literal, Mapping

from allocation import names
from allocation.capacity import GIB
from records.containers import DRIVER_DIR, HCCN_CONF, HOST_NETWORK, NPU_SMI
from allocation.plan import Assignment
from records.deployment import HostDeployment, RouterDeployment
from records.disaggregated import InstanceDeployment
from records.device_share import STATUS_KEY, UNIT
from records.host_requirements import Requirement, cards_of, requirements
from allocation.windows import DP_RPC, KV_PORT, MEMBER_KINDS, NPU_SOCKETS as NPU_RANGE, PortWindow, window_text
from ops.bounded_json import excerpt, loads
from ops.doctor.dp_flags import joins
from ops.doctor.pd_flags import proxy_targets
from ops.doctor.drift import differences, shown
from ops.doctor.facts import HostFacts, LiveContainer, parse_port_list
from ops.doctor.kv_log import differs, logged_gib

HCCS = ("HCCS", "HCCS_SW")
"""Direct HCCS links: the board's own, or through an HCCS switch (CANN `aclrtGetDevicesTopo`)."""

Kind = Literal[
    "unreachable", "host", "missing", "stopped", "restarting", "unhealthy", "drift", "foreign-card", "foreign-port",
    "sharing", "router", "topology", "kv-cache", "group", "hccn-conf", "kv-transfer", "proxy", "node", "claim",
]  # fmt: skip
"""`node` and `claim` are the Kubernetes target's (ops/doctor/kube_findings.py)."""


@dataclass(frozen=True)
class Finding:
    kind: Kind
    message: str
    service: str | None = None
    """The planned service concerned, if any."""
    container: str | None = None
    """The container concerned (planned or foreign), if any."""
    card: int | None = None
    port: int | None = None
    key: str | None = None
    """For drift: what differs (`image`, `env HCCL_IF_BASE_PORT`, `devices`...); for ports, the window."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "service": self.service, "message": self.message}
        for name in ("container", "card", "port", "key"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


@dataclass(frozen=True)
class HostView:
    """A host's deployment and facts, joined once for every judge."""

    hd: HostDeployment
    facts: HostFacts
    live: Mapping[str, LiveContainer]
    """Service name -> its container, for planned containers that exist."""
    service_of: Mapping[str, str]
    """Container id -> service name, for planned containers."""
    foreign: tuple[LiveContainer, ...]
    """Containers outside the plan that hold cards or ports now, or will after a reboot: active ones,
    and stopped ones Docker starts again when its daemon restarts (`LiveContainer.comes_back`)."""
    owner_of_pid: Mapping[int, LiveContainer]
    publisher: Mapping[int, LiveContainer]
    """Host port -> the active container publishing it."""
    placed: tuple[tuple[str, Assignment], ...]
    """(name, assignment) of every service, member of a multi-host service and prefill or decode instance on
    the host: what holds cards and windows."""
    card_services: Mapping[int, tuple[str, ...]]
    windows: tuple[tuple[str, str, PortWindow], ...]
    """(service, member, instance or proxy, window kind key, window) of every planned window."""

    @property
    def name(self) -> str:
        return self.hd.name

    def who(self, name: str) -> str:
        """A planned service, member of a multi-host service or prefill or decode instance, for messages."""
        group = next((md.group.name for md in self.hd.members if md.name == name), None)
        instance = next((i for i in self.hd.instances if i.name == name), None)
        if instance is not None:
            return f"{instance.role} instance {name} of {instance.service.name}"
        return f"service {name}" if group is None else f"member {name} of {group}"

    def pids_of(self, c: LiveContainer) -> frozenset[int]:
        return _pids(self.facts, c)

    def describe(self, c: LiveContainer) -> str:
        service = self.service_of.get(c.id)
        if service:
            return f"container {c.name} (service {service})"
        if c.comes_back:
            back = "Docker starts it again when its daemon restarts (a reboot)"
        else:
            back = "it comes back after a reboot too" if c.restart in ("always", "unless-stopped") else "a reboot stops it"
        state = f"{shown(c.status, 20)}, restart policy {shown(c.restart, 20)}: {back}"
        if c.name in self.hd.host.replaces:
            return f"container {shown(c.name, 80)} (taken over: host {self.name} replaces it, yet it is {state})"
        return f"container {shown(c.name, 80)} (not in the plan; {state})"

    def fix(self, c: LiveContainer) -> str:
        """For a container outside the plan, the commands that keep it off the cards and ports across
        reboots: `docker stop` alone lasts only until the daemon restarts under `always`."""
        if c.id in self.service_of:
            return ""
        name = shown(shlex.quote(c.name), 200)
        fix = f"; to take it out for good: `docker update --restart=no {name} && docker stop {name}` (or `docker rm -f {name}`)"
        if c.name not in self.hd.host.replaces:
            return fix
        return fix + f"; {_started_again(c)}"

    def windows_at(self, port: int) -> list[tuple[str, str, PortWindow]]:
        return [(s, key, window) for s, key, window in self.windows if window[0] <= port <= window[1]]


COMPOSE_DIR_LABEL = "com.docker.compose.project.working_dir"
"""Where compose ran for a container it made (docker/compose `pkg/api/labels.go`, `WorkingDirLabel`)."""


def _started_again(c: LiveContainer) -> str:
    """What starts a taken-over container again, and how to keep it down (docs/moving-from-compose.md):
    `docker compose up -d` in its project directory starts every container of the project that is not
    running, whatever its restart policy (docker/compose `pkg/compose/convergence.go` `mustRecreate`
    compares only the config-hash and image-digest labels, and `start.go` `startService` starts them)."""
    where = c.labels.get(COMPOSE_DIR_LABEL)
    there = f"in {shown(where, 200)}" if where else "in its old project directory"
    return (
        f"`docker compose up -d` {there} starts it again: after burn-in run `docker compose down` there, "
        "or move the compose file away"
    )


def _pids(facts: HostFacts, c: LiveContainer) -> frozenset[int]:
    """Host PIDs of a container: its main process and every process `docker top` listed."""
    return facts.pids.get(c.id, frozenset()) | ({c.pid} if c.pid else frozenset())


def view_of(hd: HostDeployment, facts: HostFacts) -> HostView:
    by_name = {c.name: c for c in facts.containers}
    # By the docker name, which a renamed service keeps (`previousNames`).
    live = {name: by_name[spec.name] for name, spec, _ in hd.containers if spec.name in by_name}
    service_of = {c.id: name for name, c in live.items()}
    active = [c for c in facts.containers if c.active]
    placed = tuple((c.name, c.plan.assignment) for c in (*hd.services, *hd.members, *hd.instances))
    card_services: dict[int, tuple[str, ...]] = {}
    for name, a in placed:
        for card in a.cards:
            card_services[card] = (*card_services.get(card, ()), name)
    pids = {c.id: _pids(facts, c) for c in active}
    return HostView(
        hd=hd,
        facts=facts,
        live=live,
        service_of=service_of,
        foreign=tuple(c for c in facts.containers if (c.active or c.comes_back) and c.id not in service_of),
        owner_of_pid={pid: c for c in active for pid in pids[c.id]},
        publisher={port: c for c in active for port, _ in c.published},
        placed=placed,
        card_services=card_services,
        windows=tuple((name, key, window) for name, a in placed for key, window in a.windows.items())
        + tuple((p.name, key, window) for p in hd.proxies for key, window in p.plan.proxy_windows.items()),
    )


def _overlap(a: PortWindow, b: PortWindow) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def required(hd: HostDeployment) -> tuple[Requirement, ...]:
    """What doctor asks of a host: the requirements of every configured card, used or not, since
    it judges the host as configured (the host check asks only for the cards its containers use)."""
    return requirements(range(hd.host.npus))


def _lacking(facts: HostFacts) -> list[str]:
    """What the host lacks of the Ascend driver and npu-smi, as npu-smi's failure shows it: the
    driver folder counts only while npu-smi fails too (one that answers found its driver elsewhere)."""
    driver = DRIVER_DIR in facts.missing and facts.npu_error is not None
    if facts.npu_smi_missing:
        return [f"the Ascend driver (no {DRIVER_DIR})"] * driver + [f"npu-smi ({facts.npu_error})"]
    return [f"the Ascend driver (no {DRIVER_DIR}; {facts.npu_error})"] if driver else []


def _unchecked(view: HostView) -> str:
    """What doctor reads through npu-smi, for a host where it cannot."""
    hd = view.hd
    parts = ["the cards' health and processes"]
    if hd.device_share_script is not None:
        parts.append(f"the device-share mode of card {','.join(map(str, hd.shared_cards))}")
    groups = [name for name, a in view.placed if len(a.cards) > 1]
    if groups:
        parts.append(f"the HCCS links of the tensor-parallel groups of {', '.join(groups)}")
    return ", ".join(parts)


def _judge_tools(view: HostView) -> list[Finding]:
    """The Ascend driver or npu-smi missing: the cause of every finding that needs them, so it comes
    first, and those findings are not judged (their advice assumes the tools are there)."""
    lacking = _lacking(view.facts)
    if not lacking:
        return []
    text = (
        f"host {view.name} lacks {' and '.join(lacking)}: install or repair the Ascend driver and npu-smi, "
        f"which every planned container mounts ({DRIVER_DIR}, {NPU_SMI}), and check that `npu-smi info` lists "
        f"the cards; until then no planned container can be created, and doctor could not check {_unchecked(view)}"
    )
    return [Finding("host", text)]


def _judge_host(view: HostView) -> list[Finding]:
    host, facts = view.hd.host, view.facts
    cause = _judge_tools(view)
    out = cause + [Finding("host", f"host {host.name}: {r.missing(r.path)}") for r in required(view.hd) if r.path in facts.missing]
    if facts.npu_error:
        out += [] if cause else [Finding("host", f"host {host.name}: {facts.npu_error}")]  # the cause quotes it
    elif facts.npu is not None:
        seen = {n.index for n in facts.npu.npus}
        absent = [c for c in range(host.npus) if c not in seen]
        if absent:
            out.append(
                Finding(
                    "host",
                    f"host {host.name}: npu-smi lists {len(seen)} cards, the config says {host.npus}; "
                    f"absent: {', '.join(map(str, absent))}",
                )
            )
        for npu in (n for n in facts.npu.npus if not n.healthy):
            users = view.card_services.get(npu.index)
            planned = f" (planned for {', '.join(users)})" if users else ""
            out.append(Finding("host", f"host {host.name}: card {npu.index} health is {npu.health}{planned}", card=npu.index))
    if facts.ss_error:
        out.append(Finding("host", f"host {host.name}: {facts.ss_error}: listeners not checked"))
    if facts.docker_error:
        out.append(Finding("host", f"host {host.name}: docker does not answer: {facts.docker_error}"))
    return out


def _judge_state(view: HostView) -> list[Finding]:
    out = []
    for c in view.hd.planned:
        name, live = c.name, view.live.get(c.name)
        if live is None and c.kind == names.MEMBER:
            continue  # its group cannot serve: `_judge_groups` says so
        if live is None:
            text = f"container {name} does not exist (planned {c.what}, API port {c.spec.api_port})"
            out.append(Finding("missing", text, service=name, container=name))
        elif live.status == "restarting":
            text = f"container {name} is restarting (last exit code {live.exit_code})"
            out.append(Finding("restarting", text, service=name, container=name))
        elif live.status != "running":
            text = f"container {name} is {live.status} (exit code {live.exit_code})"
            out.append(Finding("stopped", text, service=name, container=name))
        elif live.health == "unhealthy":
            out.append(Finding("unhealthy", f"container {name} is running but unhealthy", service=name, container=name))
    return out


def _judge_drift(view: HostView) -> list[Finding]:
    out = []
    for name, spec, _ in view.hd.containers:
        live = view.live.get(name)
        for key, want, actual in differences(spec, live, view.facts.image_ids) if live is not None else ():
            text = f"container {name}: {key}: {want} (plan) != {actual} (live)"
            out.append(Finding("drift", text, service=name, container=live.name, key=key))
    return out


def _judge_groups(view: HostView) -> list[Finding]:
    """Each member of a multi-host service on the host: present, and joining its leader's address and
    RPC port with the start rank and size the plan gives it (`ops.doctor.dp_flags`). vLLM's leader
    waits in its handshake for every engine of the group at the ranks it expects (vllm v0.20.2
    `v1/engine/utils.py` `wait_for_engine_startup`), so either is the whole group not serving."""
    out = []
    for md in view.hd.members:
        group, leader, live = md.group, md.group.leader, view.live.get(md.name)
        cards = ",".join(map(str, md.plan.assignment.cards))
        if live is None:
            text = (
                f"group {group.name} cannot serve: member {md.name} ({md.plan.role}, on cards {cards}, host network) "
                f"is missing on host {view.name}"
            )
            out.append(Finding("group", text, service=group.name, container=md.spec.name))
            continue
        runs, plan = joins(live.command), joins(group.args(md.plan))
        if runs == plan:
            continue
        verb = "waits for its followers at" if md.plan.member.leader else "joins"
        text = (
            f"group {group.name} cannot serve: {md.plan.role} {md.name} on {view.name} {verb} {shown(runs.text())}; "
            f"the plan: leader {leader.name} on {leader.host.name} at {plan.text()} (its command's drift shows the words)"
        )
        out.append(Finding("group", text, service=group.name, container=live.name, key="data-parallel flags"))
    return out


def _holds(c: LiveContainer, card: int) -> bool:
    return c.privileged or card in cards_of(c.device_files)


def _judge_foreign_cards(view: HostView) -> list[Finding]:
    out = []
    planned = view.card_services
    for c in view.foreign:
        if c.privileged and planned:
            text = (
                f"{view.describe(c)} is privileged: it sees every card, including planned cards "
                f"{', '.join(map(str, sorted(planned)))}{view.fix(c)}"
            )
            out.append(Finding("foreign-card", text, container=c.name))
            continue
        for card in sorted(cards_of(c.device_files) & set(planned)):
            text = f"{view.describe(c)} holds /dev/davinci{card}, planned for {', '.join(planned[card])}{view.fix(c)}"
            out.append(Finding("foreign-card", text, service=planned[card][0], container=c.name, card=card))
    for proc in view.facts.npu.processes if view.facts.npu is not None else ():
        users = planned.get(proc.npu)
        owner = view.owner_of_pid.get(proc.pid)
        if not users or (owner is not None and view.service_of.get(owner.id) in users):
            continue
        if owner is not None and owner in view.foreign and _holds(owner, proc.npu):
            continue  # reported above, as the container holding the card
        who = view.describe(owner) if owner is not None else "no container of this host (a process outside Docker or of an unknown container)"
        text = (
            f"card {proc.npu}: npu-smi shows process {proc.pid} ({proc.name}, {proc.memory_mb} MB) "
            f"of {who}; the card is planned for {', '.join(users)}{view.fix(owner) if owner is not None else ''}"
        )
        container = owner.name if owner is not None else None
        out.append(Finding("foreign-card", text, service=users[0], container=container, card=proc.npu))
    return out




def _bound_apart(view: HostView, name: str, key: str, address: str) -> bool:
    """A listener on one address leaves the port free on the host's other addresses: Linux refuses a bind
    only to the same address and port, or where either is the wildcard (ip(7), `SO_REUSEADDR`: "a socket
    may bind, except when there is an active listening socket bound to the address"). So a listener on an
    address other than a member's own does not hold that member's address-bound windows (`ADDRESS_BOUND`),
    nor one other than a prefill instance's its `kvPort` block (`_handshake_address`)."""
    md = next((m for m in view.hd.members if m.name == name), None)
    if md is not None:
        return key in ADDRESS_BOUND and _other_address(address, md.plan.host.nic_address)
    instance = next((i for i in view.hd.instances if i.name == name), None)
    return instance is not None and key == KV_PORT.key and _other_address(address, _handshake_address(instance))


def _other_address(address: str, own: str | None) -> bool:
    """`address` (as ss prints it: `[::]`, `127.0.0.53%lo`, `*`; or an HCCL_IF_IP) is one specific address,
    not `own`: a socket there leaves `own`'s port free. A wildcard, an unknown `own` or text that is no
    address count as the same address: judged as holding the port."""
    text = address.strip("[]").partition("%")[0]
    if not own or text in ("*", "0.0.0.0", "::"):
        return False
    try:
        return ipaddress.ip_address(text) != ipaddress.ip_address(own)
    except ValueError:
        return False


def _judge_listeners(view: HostView) -> list[Finding]:
    out = []
    for lst in view.facts.listeners:
        pids = {pid for _, pid in lst.processes}
        holder = next((view.owner_of_pid[p] for p in pids if p in view.owner_of_pid), None)
        if holder is None and (not pids or {n for n, _ in lst.processes} <= {"docker-proxy"}):
            holder = view.publisher.get(lst.port)
        for service, key, window in view.windows_at(lst.port):
            if _bound_apart(view, service, key, lst.address):
                continue
            own = view.live.get(service)
            if own is not None and own.active and (pids & view.pids_of(own) or (holder is not None and holder.id == own.id)):
                continue
            if holder is not None:
                who = view.describe(holder)
            elif lst.processes:
                who = ", ".join(f"process {n} (pid {p})" for n, p in lst.processes)
            else:
                who = "an unknown process (ss shows no owner)"
            fix = view.fix(holder) if holder is not None else ""
            text = f"port {lst.port} ({lst.address}) is held by {who}; it is in {service}'s {key} {window_text(window)}{fix}"
            container = holder.name if holder is not None else None
            out.append(Finding("foreign-port", text, service=service, container=container, port=lst.port, key=key))
    return out


def _judge_publishers(view: HostView) -> list[Finding]:
    listened = {lst.port for lst in view.facts.listeners}  # a running container's are judged as listeners
    out = []
    for c in view.foreign:
        for port in sorted({p for p, _ in c.published} - (listened if c.active else set())):
            for service, key, window in view.windows_at(port):
                text = f"{view.describe(c)} publishes port {port}, in {service}'s {key} {window_text(window)}{view.fix(c)}"
                out.append(Finding("foreign-port", text, service=service, container=c.name, port=port, key=key))
    return out


def _judge_hccl(view: HostView) -> list[Finding]:
    """Foreign containers on a planned card whose HCCL NPU socket range overlaps the plan's (a service's
    or a member's)."""
    default = (NPU_RANGE.unset_port, NPU_RANGE.unset_port)
    out = []
    for c in view.foreign:
        raw = c.env.get(NPU_RANGE.env)
        theirs = parse_port_list(raw) if raw is not None else [default]
        shared = set(view.card_services) if c.privileged else cards_of(c.device_files) & set(view.card_services)
        shown = raw if raw is not None else f"unset, so HCCL's default {NPU_RANGE.unset_port}"
        for name, a in view.placed if shared and theirs else ():
            cards = sorted(shared & set(a.cards))
            ours = a.windows.get(NPU_RANGE.key, default)
            clashes = [s for s in theirs or () if _overlap(ours, s)]
            if not cards or not clashes:
                continue
            text = (
                f"{view.describe(c)} shares card {', '.join(map(str, cards))} with {name} and its "
                f"{NPU_RANGE.env} ({shown}) overlaps {name}'s {window_text(ours)}: "
                f"HCCL will fail with 'Socket bind failed, address already in use'{view.fix(c)}"
            )
            port = max(ours[0], min(s[0] for s in clashes))
            out.append(
                Finding("foreign-port", text, service=name, container=c.name, card=cards[0], port=port, key=NPU_RANGE.key)
            )
    return out


HOST_SIDE = tuple(k for k in MEMBER_KINDS if k.env and k.netns)
"""HCCL's host-side windows a container's env sets (`HCCL_HOST_SOCKET_PORT_RANGE`, `HCCL_IF_BASE_PORT`
and the ports after it): host ports for a container on the host network."""
ADDRESS_BOUND = frozenset({DP_RPC.key, *(k.key for k in HOST_SIDE)})
"""A member's windows it binds on its host's address alone: the DP handshake on `--data-parallel-address`
(vllm v0.20.2 `v1/engine/utils.py` `launch_core_engines`), HCCL's host sockets on `HCCL_IF_IP` (hicann/hccl
`docs/zh/user_guide/hccl_env/HCCL_IF_IP.md`). Its API port, and every window of a single-host service, are
bound on every address."""


def _handshake_address(instance: InstanceDeployment) -> str:
    """Where a prefill instance binds its `kvPort` block: one address. vllm-ascend@v0.20.2rc1
    `mooncake_connector.py` `KVCacheSendingThread.run` binds each worker's ZMQ ROUTER socket on
    `tcp://{side_channel_host}:{kv_port + device_index}`, `side_channel_host` being vLLM's `get_ip()`
    (`MooncakeConnectorWorker.__init__`): `VLLM_HOST_IP` (the plan sets none), else the address of the host's
    route out (vllm v0.20.2 `vllm/utils/network_utils.py` `get_ip`: a UDP socket connected to 8.8.8.8, its
    `getsockname()`), taken as its host's `address` (when that is a host name, a listener on any address is
    judged as holding the block). A decode instance binds none of its block: it only connects
    (`KVCacheRecvingThread`, ZMQ REQ sockets, `bind=False`)."""
    assert instance.plan.host is not None  # always given (allocation.planner)
    return instance.plan.host.address


def _host_side(c: LiveContainer) -> list[tuple[str, str, PortWindow]]:
    """(variable, its value, window) of each host-side HCCL window a container's env sets."""
    out = []
    for kind in HOST_SIDE:
        raw = c.env.get(kind.env or "")
        windows = parse_port_list(raw) if raw is not None else None
        if windows and kind.shape == "port":
            windows = [(windows[0][0], windows[0][0] + kind.size - 1)]
        out += [(kind.env or "", raw or "", w) for w in windows or ()]
    return out


def _judge_host_network(view: HostView) -> list[Finding]:
    """Foreign containers on the host network whose host-side HCCL windows (their env) overlap a window of
    a planned container on the host network (a member of a multi-host service, a prefill or decode instance,
    a proxy), which are host ports too: whichever binds second fails, as HCCL's
    `Communication_Error_Bind_IP_Port(EI0019)` (vllm-ascend PR 16205: nightly runs "when jobs share a
    NIC"). A bound port shows as a listener (`_judge_listeners`); this sees it before it is bound, and
    in a stopped container that comes back. HCCL's defaults when unset lie in the kernel's ephemeral
    range, where no such window lies (docs/multi-host.md, docs/disaggregated.md)."""
    on_host = {c.name for c in view.hd.planned if c.spec.network_mode == HOST_NETWORK}
    ours = [(name, key, w) for name, key, w in view.windows if name in on_host and key != NPU_RANGE.key]
    out = []
    for c in (c for c in view.foreign if c.network_mode == HOST_NETWORK):
        # HCCL binds its host sockets on HCCL_IF_IP (`ADDRESS_BOUND`): another address of the host is apart.
        if _other_address(c.env.get("HCCL_IF_IP", ""), view.hd.host.nic_address):
            continue
        for env, raw, theirs in _host_side(c):
            for name, key, w in (x for x in ours if _overlap(x[2], theirs)):
                text = (
                    f"{view.describe(c)} runs on the host network and its {env} ({shown(raw, 40)}) overlaps "
                    f"{name}'s {key} {window_text(w)}: whichever binds second fails (HCCL's EI0019){view.fix(c)}"
                )
                out.append(Finding("foreign-port", text, service=name, container=c.name, port=max(w[0], theirs[0]), key=key))
    return out


def _share_on(said: str) -> bool:
    """The field itself, a line `Device-share Status : True`; not those words inside an error text."""
    return any(
        key.strip() == STATUS_KEY and sep and value.strip() == "True"
        for key, sep, value in (line.partition(":") for line in said.splitlines())
    )


def _judge_sharing(view: HostView) -> list[Finding]:
    """A shared card of a `deviceShare` host must be in device-share mode, or its second container
    cannot open it (after a reboot without the boot unit, say)."""
    hd = view.hd
    if hd.device_share_script is None or _lacking(view.facts):
        return []  # without npu-smi or the driver no card can switch: `_judge_tools` says so
    out = []
    for card in hd.shared_cards:
        said = view.facts.device_share.get(card, "no answer")
        if _share_on(said):
            continue
        users = " and ".join(view.card_services.get(card, ()))
        out.append(
            Finding(
                "sharing",
                f"host {view.name}: card {card} is shared by {users} but is not in device-share mode "
                f"(npu-smi: {' '.join(said.split())[:200]}), so only one container can open it. Stop its containers, run "
                f"`pulumi up` (the mode can only change on a free card), and check that {UNIT} is enabled",
                card=card,
            )
        )
    return out


UNREADABLE = (ValueError, TypeError, KeyError, AttributeError)
"""What `workers_of` raises for a body of another shape."""


def workers_of(body: str) -> dict[str, bool]:
    """Worker URL -> healthy, from a router's `/workers` body; only a JSON `true` is healthy (not
    `"false"`). Raises ValueError, TypeError, KeyError or AttributeError (`UNREADABLE`) on any other shape."""
    out = {}
    for w in loads(body, "the /workers body")["workers"]:
        if not isinstance(w["url"], str) or not isinstance(w["is_healthy"], bool):
            raise TypeError(f"worker {excerpt(str(w['url']))}: url or is_healthy of the wrong type")
        out[w["url"]] = w["is_healthy"]
    return out


HEALTHY, UNHEALTHY, NOT_LISTED = "healthy", "unhealthy", "not listed"
"""How a router sees a worker URL: in its list and healthy, in its list and unhealthy, or not in it."""


@dataclass(frozen=True)
class Worker:
    url: str
    seen: str
    """`HEALTHY`, `UNHEALTHY` or `NOT_LISTED`."""
    replica: str | None
    """The planned replica at that URL; None for a URL the router lists that no planned replica has."""


@dataclass(frozen=True)
class RouterWorkers:
    """What a router says of its workers (`GET /workers`, read on its host by the gather script)."""

    running: bool
    """Its container runs; a router that does not is judged by its state, its workers are not read."""
    workers: tuple[Worker, ...] = ()
    """Each planned replica in order, then the URLs it lists that no planned replica has."""
    error: str | None = None
    """Why its answer could not be read."""


def router_workers(view: HostView, rd: RouterDeployment) -> RouterWorkers:
    """A router's view of its replicas (vllm-router 0.1.17: `{"workers": [{"url", "is_healthy", ...}], ...}`)."""
    live = view.live.get(rd.name)
    if live is None or live.status != "running":
        return RouterWorkers(running=False)
    body = view.facts.router_workers.get(rd.name, "")
    try:
        seen = workers_of(body)
    except UNREADABLE as exc:
        return RouterWorkers(True, error=f"its /workers could not be read ({type(exc).__name__}: {excerpt(' '.join(body.split()), 200)})")
    planned = [Worker(sd.url, NOT_LISTED if sd.url not in seen else HEALTHY if seen[sd.url] else UNHEALTHY, sd.name) for sd in rd.replicas]
    urls = {sd.url for sd in rd.replicas}
    return RouterWorkers(True, (*planned, *(Worker(u, HEALTHY if ok else UNHEALTHY, None) for u, ok in seen.items() if u not in urls)))


def _judge_routers(view: HostView) -> list[Finding]:
    """Each running router's view of its replicas: a replica it sees as unhealthy, or does not list."""
    out = []
    for rd in view.hd.routers:
        said = router_workers(view, rd)  # a router that is not running: _judge_state says so
        if said.error is not None:
            out.append(Finding("router", f"router {rd.name}: {said.error}", service=rd.plan.service.name, container=rd.name))
        for w in (w for w in said.workers if w.replica is not None and w.seen != HEALTHY):
            if w.seen == NOT_LISTED:
                text = f"router {rd.name} does not list replica {w.replica} ({w.url}) among its workers"
            else:
                text = f"router {rd.name} sees replica {w.replica} ({w.url}) as unhealthy and sends it no requests"
            out.append(Finding("router", text, service=w.replica, container=rd.name))
    return out


def _judge_hccn_conf(view: HostView) -> list[Finding]:
    """Each prefill or decode instance's container mounts `/etc/hccn.conf` (from wherever the plan says): the
    Mooncake transfer reads the cards' device IPs from it, and an instance without it starts and serves with no
    error, its decoder answering wrong (vllm-ascend issue 7711: "the first output token is incorrect, followed
    by continuous repetition"; HCCL's plog says "'device ip' is not set correctly"). The mounts' `drift`
    names the words."""
    out = []
    for i in view.hd.instances:
        live = view.live.get(i.name)
        if live is None or any(target == HCCN_CONF for _, target, _ in live.mounts):
            continue  # a missing container: _judge_state says so
        text = (
            f"container {i.name} ({i.role} instance of {i.service.name}) does not mount {HCCN_CONF}: the Mooncake "
            "transfer reads the cards' device IPs from it, and without it the service starts with no error while its "
            "decoder answers wrong, the first token wrong and then repeated (vllm-ascend issue 7711); `pulumi up` "
            "re-creates it with the plan's read-only mount"
        )
        out.append(Finding("hccn-conf", text, service=i.service.name, container=live.name, key="mounts"))
    return out


def _judge_kv_ports(view: HostView) -> list[Finding]:
    """Each serving prefill instance listens on every port of its `kvPort` block (`ss`), where its decoders fetch
    its KV cache's handshake: each worker binds `kv_port + device_index` (vllm-ascend@v0.20.2rc1
    `mooncake_connector.py` `KVCacheSendingThread.run`) while the engine starts, before it serves. A decode
    instance binds none (`_handshake_address`). Another process on a port is `foreign-port`
    (`_judge_listeners`)."""
    if view.facts.ss_error:
        return []  # `_judge_host` says the listeners were not checked
    out = []
    for i in (i for i in view.hd.instances if i.role == "prefill"):
        live = view.live.get(i.name)
        if live is None or live.status != "running" or live.health not in (None, HEALTHY):
            continue  # not serving: _judge_state says so
        own = view.pids_of(live)
        bound = {lst.port for lst in view.facts.listeners if own & {pid for _, pid in lst.processes}}
        first, last = i.plan.kv_ports
        free = [p for p in range(first, last + 1) if p not in bound]
        if free:
            text = (
                f"prefill instance {i.name} of {i.service.name} serves but does not listen on port "
                f"{', '.join(map(str, free))} of its kvPort block {window_text(i.plan.kv_ports)} (each worker binds "
                "kv_port + its device index): its decoders cannot fetch its KV cache from those workers"
            )
            out.append(Finding("kv-transfer", text, service=i.service.name, container=live.name, port=free[0], key=KV_PORT.key))
    return out


def _judge_proxies(view: HostView) -> list[Finding]:
    """Each proxy on the host sends requests to the instances the plan gives it: its live `--prefiller-hosts`,
    `--prefiller-ports`, `--decoder-hosts` and `--decoder-ports`, read as its argparse reads them
    (`ops.doctor.pd_flags`), against the plan's."""
    out = []
    for p in view.hd.proxies:
        live = view.live.get(p.name)
        if live is None:
            continue  # _judge_state says so
        runs, plan = proxy_targets(live.command), proxy_targets(p.spec.command)
        if runs == plan:
            continue
        planned = ", ".join(f"{i.role} {i.name} at {i.plan.url[0]}:{i.plan.url[1]}" for i in p.instances)
        text = (
            f"proxy {p.name} of {p.plan.name} sends requests to {shown(runs.text())}; the plan: {planned} "
            "(its command's drift shows the words)"
        )
        out.append(Finding("proxy", text, service=p.plan.name, container=live.name, key="instances"))
    return out


def _judge_kv_cache(view: HostView) -> list[Finding]:
    """Each running service with `kvCacheGiB`: the KV cache its log says it reserved at its latest start
    against the plan's bytes (a log without the line says nothing either way)."""
    out = []
    for sd in view.hd.services:
        planned, live = sd.plan.kv_cache_bytes, view.live.get(sd.name)
        if planned is None or live is None or live.status != "running":
            continue  # _judge_state says so
        line = view.facts.kv_logs.get(sd.spec.name, "")
        logged = logged_gib(line)
        if logged is not None and differs(logged, planned):
            text = (
                f"container {sd.spec.name}: its log says it reserved {logged} GiB for its KV cache, the plan "
                f"fixes {planned / GIB:.2f} GiB (kvCacheGiB, --kv-cache-memory-bytes {planned}): "
                f"{excerpt(' '.join(line.split()), 200)}"
            )
            out.append(Finding("kv-cache", text, service=sd.name, container=sd.spec.name))
    return out


def _judge_topology(view: HostView) -> list[Finding]:
    """Each tensor-parallel group's cards, pair by pair, linked directly by HCCS (`npu-smi info -t topo`):
    the 8 x 910B A2 board links every pair, so another link (PIX, PHB, SYS...) is a board or a
    driver that is not as planned, and the group's HCCL traffic crosses PCIe instead."""
    groups = [(name, a) for name, a in view.placed if len(a.cards) > 1]
    topo, facts = view.facts.topology, view.facts
    if not groups or (topo is None and facts.npu_error):
        return []  # nothing to check, or npu-smi failing is already a `host` finding
    if topo is None:
        names = ", ".join(name for name, _ in groups)
        return [Finding("topology", f"host {view.name}: {shown(facts.topology_error or 'no answer')}; tensor-parallel groups of {names} not checked")]
    out = []
    for name, a in groups:
        cards = sorted(a.cards)
        slow = []
        for i, a in enumerate(cards):
            for b in cards[i + 1 :]:
                links = [topo.link(a, b) or "not listed", topo.link(b, a) or "not listed"]
                slow += [f"{a}-{b} {shown(link, 12)}" for link in links if link not in HCCS][:1]
        if slow:
            text = (
                f"the tensor-parallel group of {view.who(name)} (cards {','.join(map(str, cards))}) is not linked by HCCS "
                f"card to card: {', '.join(slow)} (npu-smi info -t topo); its HCCL traffic takes the slower path"
            )
            out.append(Finding("topology", text, service=name, card=cards[0]))
    return out


# Without Docker every process would look foreign, so only the host is judged then.
JUDGES_WITHOUT_DOCKER = (_judge_host, _judge_sharing, _judge_topology)
JUDGES = (
    _judge_host, _judge_state, _judge_groups, _judge_proxies, _judge_hccn_conf, _judge_drift, _judge_foreign_cards,
    _judge_listeners, _judge_kv_ports, _judge_publishers, _judge_hccl, _judge_host_network, _judge_sharing, _judge_routers,
    _judge_topology, _judge_kv_cache,
)  # fmt: skip


def host_findings(hd: HostDeployment, facts: HostFacts) -> list[Finding]:
    """Everything wrong on one reachable host, judged against its deployment."""
    view = view_of(hd, facts)
    judges = JUDGES_WITHOUT_DOCKER if facts.docker_error else JUDGES
    return [finding for judge in judges for finding in judge(view)]

