"""`doctor`'s facts: the text `gather_script` prints, parsed into frozen values. Pure.

Only what the judges compare is kept: per container its state, restart policy
and every setting of its container record (ops.doctor.drift says where Docker
keeps each); the host's listeners, `npu-smi` view,
and the required paths it lacks. Output the script could not have printed (cut
short, or not the JSON docker prints) raises `FactsError`, never anything else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from allocation.windows import PortWindow
from ops.doctor.gather import MARK
from ops.bounded_json import JsonError, excerpt, loads
from ops.framing import LIMIT, FrameError, read_frames
from ops.npusmi import NpuSmiError, NpuSmiInfo, Topology, parse_npu_smi, parse_topology
from ops.npusmi import number as number_of


class FactsError(ValueError):
    """The gathered output cannot be read."""


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket in the host's network namespace."""

    address: str
    port: int
    processes: tuple[tuple[str, int], ...] = ()
    """(process name, pid) of every owner; empty when ss could not tell."""


@dataclass(frozen=True)
class LiveHealth:
    """Config.Healthcheck: its durations as Docker keeps them, in nanoseconds."""

    test: tuple[str, ...]
    interval_ns: int
    timeout_ns: int
    start_period_ns: int
    retries: int
    start_interval_ns: int = 0
    """`StartInterval`: absent (0) on engines before 25, which drop it (records.health)."""

    @classmethod
    def from_inspect(cls, data: Mapping[str, Any] | None) -> LiveHealth | None:
        if not data:
            return None
        return cls(
            test=_strings(data.get("Test")),
            interval_ns=_whole(data.get("Interval") or 0),
            timeout_ns=_whole(data.get("Timeout") or 0),
            start_period_ns=_whole(data.get("StartPeriod") or 0),
            retries=_whole(data.get("Retries") or 0),
            start_interval_ns=_whole(data.get("StartInterval") or 0),
        )


@dataclass(frozen=True)
class LiveContainer:
    """The parts of `docker inspect` doctor compares."""

    id: str
    name: str
    image: str
    """Config.Image: what the container was created with, a name (`docker run NAME`) or an image ID (the
    docker provider, given the ID the program passes)."""
    status: str
    """created, running, paused, restarting, exited, dead."""
    health: str | None
    exit_code: int
    pid: int
    env: Mapping[str, str]
    labels: Mapping[str, str]
    device_files: frozenset[str]
    """Host paths of the devices passed in."""
    privileged: bool
    ipc_mode: str
    sysctls: Mapping[str, str]
    log_opts: Mapping[str, str]
    """After dockerd merged daemon.json's log-opts in: what the provider reads back too."""
    published: frozenset[tuple[int, int]]
    """(host port, container port) of every TCP port binding."""
    command: tuple[str, ...] = ()
    """Config.Cmd."""
    entrypoint: tuple[str, ...] = ()
    """Config.Entrypoint: the image's, or what the container was created with."""
    mounts: frozenset[tuple[str, str, bool]] = frozenset()
    """(source, target, read-only) of every bind mount: HostConfig.Mounts of type bind (the docker
    provider's `mounts`) and HostConfig.Binds (`docker run -v SRC:DST[:ro]`)."""
    restart: str = "no"
    """HostConfig.RestartPolicy.Name; Docker's empty name is `no`."""
    shm_size_bytes: int = 0
    init: bool = False
    """`HostConfig.Init`: Docker's init runs as PID 1 (`docker run --init`, the provider's `init`)."""
    log_driver: str = ""
    stop_timeout_seconds: int | None = None
    """Config.StopTimeout, seconds; None when unset (Docker then waits its default 10 s)."""
    healthcheck: LiveHealth | None = None
    started_at: str = ""
    """State.StartedAt, RFC 3339 as Docker prints it (`status` shows the uptime from it)."""
    finished_at: str = ""
    """State.FinishedAt: when it last stopped; Docker's zero time `0001-01-01T00:00:00Z` if never."""
    image_id: str = ""
    """`.Image`: the ID of the image the container runs, however it was named at creation."""
    network_mode: str = ""
    """HostConfig.NetworkMode: `host` on the host network."""

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
            if proto not in ("", "tcp") or number_of(number) is None:
                continue
            for binding in bindings or ():
                host_port = number_of(str((binding or {}).get("HostPort") or ""))
                if host_port is not None:
                    published.add((host_port, int(number)))
        return cls(
            id=data.get("Id", ""),
            name=str(data.get("Name", "")).lstrip("/"),
            image=config.get("Image") or data.get("Image", ""),
            status=state.get("Status", "unknown"),
            health=(state.get("Health") or {}).get("Status"),
            exit_code=_whole(state.get("ExitCode") or 0),
            pid=_whole(state.get("Pid") or 0),
            env=env,
            labels=dict(config.get("Labels") or {}),
            device_files=frozenset(d.get("PathOnHost", "") for d in host_config.get("Devices") or ()),
            privileged=host_config.get("Privileged") is True,
            ipc_mode=str(host_config.get("IpcMode") or ""),
            sysctls=dict(host_config.get("Sysctls") or {}),
            log_opts=dict((host_config.get("LogConfig") or {}).get("Config") or {}),
            published=frozenset(published),
            command=_strings(config.get("Cmd")),
            entrypoint=_strings(config.get("Entrypoint")),
            mounts=_bind_mounts(host_config),
            restart=str((host_config.get("RestartPolicy") or {}).get("Name") or "no"),
            shm_size_bytes=_whole(host_config.get("ShmSize") or 0),
            init=host_config.get("Init") is True,
            log_driver=str((host_config.get("LogConfig") or {}).get("Type") or ""),
            stop_timeout_seconds=None if config.get("StopTimeout") is None else _whole(config["StopTimeout"]),
            healthcheck=LiveHealth.from_inspect(config.get("Healthcheck")),
            started_at=str(state.get("StartedAt") or ""),
            finished_at=str(state.get("FinishedAt") or ""),
            image_id=str(data.get("Image") or ""),
            network_mode=str(host_config.get("NetworkMode") or ""),
        )

    @property
    def comes_back(self) -> bool:
        """Stopped, but Docker starts it again when the daemon restarts (a reboot): restart policy
        `always`, which brings back even a container stopped by hand ("If it's manually stopped, it's
        restarted only when Docker daemon restarts", docs.docker.com/engine/containers/start-containers-automatically/).
        `unless-stopped` stays down once stopped ("when the container is stopped (manually or otherwise),
        it isn't restarted even after Docker daemon restarts"; `docker inspect` does not show whether
        it was stopped by hand, and a running daemon restarts one that exited on its own, so a stopped
        one was stopped); `on-failure` "doesn't restart the container if the daemon restarts"."""
        return not self.active and self.status in ("exited", "created") and self.restart == "always"


def _strings(value: Any) -> tuple[str, ...]:
    """A JSON list of strings (Cmd, a health check's Test); null is none."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{excerpt(str(value))} is not a list of strings")
    return tuple(value)


def _bind_mounts(host_config: Mapping[str, Any]) -> frozenset[tuple[str, str, bool]]:
    """Bind mounts as created: HostConfig.Mounts of type bind, and HostConfig.Binds
    (`SRC:DST[:OPTIONS]`, read-only when an option is `ro`)."""
    out = set()
    for m in host_config.get("Mounts") or ():
        if m.get("Type") == "bind":
            out.add((str(m.get("Source", "")), str(m.get("Target", "")), m.get("ReadOnly") is True))
    for bind in host_config.get("Binds") or ():
        source, _, rest = str(bind).partition(":")
        target, _, options = rest.partition(":")
        out.add((source, target, "ro" in options.split(",")))
    return frozenset(out)


def _whole(value: Any) -> int:
    """A JSON integer as docker prints it; a string, a bool or a fraction is not one."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{excerpt(str(value))} is not a whole number")
    return value


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
    npu_smi_missing: bool = False
    """`npu-smi` is no command on the host: the shell exits 127 for a command it cannot find (POSIX
    sh, "Command Search and Execution"), where a failing npu-smi exits with its own code."""
    topology: Topology | None = None
    """`npu-smi info -t topo`: the links between cards."""
    topology_error: str | None = None
    missing: frozenset[str] = frozenset()
    """Paths of the host requirements table (records.host_requirements) the host lacks."""
    device_share: Mapping[int, str] = field(default_factory=dict)
    """Card -> what `npu-smi info -t device-share` said of it, its lines as printed (gathered for shared cards)."""
    router_workers: Mapping[str, str] = field(default_factory=dict)
    """Router container -> the body of its `GET /workers` (or the error fetching it)."""
    clock: int | None = None
    """The host's clock when it answered, seconds since the epoch (`date +%s`): `status` counts
    uptimes on the host's clock, never this machine's."""
    kv_logs: Mapping[str, str] = field(default_factory=dict)
    """Container -> the last KV cache line of its log (`ops.doctor.kv_log`), empty when it has none."""
    image_ids: Mapping[str, str | None] = field(default_factory=dict)
    """Image name of the plan -> the image ID it names on the host (`docker image inspect`), None
    where the host answered with anything but an ID (no such image)."""


IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")
"""An image ID as `docker image inspect --format '{{.Id}}'` prints it."""

_SS_USER = re.compile(r'\("(?P<name>[^"]*)",pid=(?P<pid>[0-9]{1,9})\b')


def parse_ss(text: str) -> tuple[Listener, ...]:
    """Listeners from `ss -ltnpH` (a header line, if any, is skipped); one per (address, port)."""
    out: dict[tuple[str, int], Listener] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 5 or fields[0] == "State":
            continue
        local = fields[3]
        address, _, port = local.rpartition(":")
        if number_of(port) is None:
            continue
        procs = tuple((m.group("name"), int(m.group("pid"))) for m in _SS_USER.finditer(" ".join(fields[5:])))
        out.setdefault((address, int(port)), Listener(address, int(port), procs))
    return tuple(out.values())


def _sections(text: str) -> tuple[dict[str, str], set[str]]:
    """`kind arg` -> payload text of every frame, and the sections cut at the frame limit."""
    try:
        frames = read_frames(text, MARK)
    except FrameError as exc:
        raise FactsError(str(exc)) from None
    sections = {f"{f.kind} {f.arg}".strip(): f.text.strip("\n") for f in frames}
    return sections, {f"{f.kind} {f.arg}".strip() for f in frames if f.cut}


NOT_FOUND = "127"
"""The exit status of the gather script's `npu-smi info` when the shell finds no such command."""


def parse_facts(text: str) -> HostFacts:
    """HostFacts from the output of `gather_script`; FactsError if it cannot be read."""
    sec, cut = _sections(text)
    if "end" not in sec:
        raise FactsError("the fact-gathering script did not finish (output cut short)")
    containers: tuple[LiveContainer, ...] = ()
    docker_error = sec.get("docker-error")
    if docker_error is None and "docker-inspect" in cut:
        docker_error = f"docker inspect printed more than {LIMIT} bytes"
    elif docker_error is None:
        try:
            raw = loads(sec.get("docker-inspect") or "[]", "docker inspect's output")
        except JsonError as exc:
            docker_error = str(exc)
        else:
            try:
                containers = tuple(LiveContainer.from_inspect(c) for c in raw)
            except (AttributeError, TypeError, ValueError) as exc:
                docker_error = f"docker inspect printed JSON of an unexpected shape: {exc}"
    pids = {}
    for name, body in sec.items():
        if name.startswith("top "):
            numbers = (line.strip() for line in body.splitlines())
            pids[name[4:].strip()] = frozenset(n for n in map(number_of, numbers) if n is not None)
    npu = npu_error = None
    rc = sec.get("npu-smi-rc", "").strip()
    if rc != "0":
        npu_error = f"npu-smi info exited {rc or '?'}: {' '.join((sec.get('npu-smi') or '').split())[:300]}"
    else:
        try:
            npu = parse_npu_smi(sec.get("npu-smi", ""))
        except NpuSmiError as exc:
            npu_error = str(exc)
    topology, topology_error = _topology(sec)
    return HostFacts(
        topology=topology,
        topology_error=topology_error,
        containers=containers,
        docker_error=docker_error,
        pids=pids,
        listeners=parse_ss(sec.get("ss", "")),
        ss_error=sec.get("ss-error"),
        npu=npu,
        npu_error=npu_error,
        npu_smi_missing=rc == NOT_FOUND,
        missing=frozenset(line.strip() for line in sec.get("missing", "").splitlines() if line.strip()),
        device_share={
            int(name.split()[1]): body
            for name, body in sec.items()
            if name.startswith("device-share ") and number_of(name.split()[1]) is not None
        },
        router_workers={name.split(None, 1)[1]: body for name, body in sec.items() if name.startswith("router-workers ")},
        clock=_epoch(sec.get("clock", "")),
        kv_logs={name.split(None, 1)[1]: body for name, body in sec.items() if name.startswith("kv-log ")},
        image_ids={
            name.split(None, 1)[1]: body.strip() if IMAGE_ID.fullmatch(body.strip()) else None
            for name, body in sec.items()
            if name.startswith("image ")
        },
    )


def _epoch(text: str) -> int | None:
    """Seconds since the epoch as `date +%s` prints them (ASCII digits, at most 12), else None."""
    text = text.strip()
    return int(text) if re.fullmatch(r"[0-9]{1,12}", text) else None


def _topology(sec: Mapping[str, str]) -> tuple[Topology | None, str | None]:
    """The links between cards, or why they cannot be read."""
    rc, out = sec.get("npu-topo-rc", "").strip(), sec.get("npu-topo") or ""
    if rc != "0":
        return None, f"npu-smi info -t topo exited {rc or '?'}: {' '.join(out.split())[:300]}"
    try:
        return parse_topology(out), None
    except NpuSmiError as exc:
        return None, str(exc)


def parse_port_list(value: str) -> list[PortWindow] | None:
    """`16666-16681`, `61000,61050-61100` -> windows; None for `auto` or anything unreadable."""
    windows = []
    for item in value.replace(" ", "").split(","):
        first, sep, last = item.partition("-")
        if number_of(first) is None or (sep and number_of(last) is None):
            return None
        windows.append((int(first), int(last) if sep else int(first)))
    return windows or None
