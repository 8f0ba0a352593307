"""container_spec: the one mapping from a planned service to the container that runs it.

The Pulumi component, the compose/docker-run exporters and `doctor` all take
their container from here, so what is deployed, exported and checked cannot
drift apart. Pure: no Pulumi, no Docker, no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType
from typing import Mapping, Sequence

from allocation import names
from allocation.capacity import fixed_kv_bytes
from allocation.config import (
    CARDS_ENV, CONTAINER_ENV, HEALTH_URL_ENV, START_WAIT_ENV, VISIBLE_DEVICES_ENV, FleetConfig, Host, Mount, Service,
)  # fmt: skip
from allocation.plan import Assignment, DisaggregatedPlan, GroupPlan, MemberPlan, RolePlan, ServicePlan
from allocation.resolved import Resolved
from allocation.windows import KINDS, MEMBER_KINDS, ROLE_KINDS, WindowKind, window_text
from records.command import behind_gate
from records.health import probe_timing
from records.runtime import logs

LABEL_PREFIX = "ascend-fleet"
# The seed's tuning; defaults' and services' env override it.
TUNING_ENV = {
    "HCCL_BUFFSIZE": "512",
    "OMP_PROC_BIND": "false",
    "OMP_NUM_THREADS": "1",
    "TASK_QUEUE_ENABLE": "1",
    "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
}
CONTROL_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
DRIVER_DIR = "/usr/local/Ascend/driver"
NPU_SMI = "/usr/local/bin/npu-smi"
DRIVER_MOUNTS = (
    DRIVER_DIR,
    "/usr/local/dcmi",
    NPU_SMI,
    "/etc/ascend_install.info",
)
HEALTH_STEADY = (30, 10, 3)
"""A model's probes once it serves: every 30 s, 10 s to answer, unhealthy after 3 failures in a row."""
# Beyond the health wait: creating and starting the container, and the provider's own calls.
CREATE_MARGIN_SECONDS = 300
RESERVED_PORTS_SYSCTL = "net.ipv4.ip_local_reserved_ports"
HOST_NETWORK = "host"
"""Docker's host network: a multi-host service's members bind every port on the host itself, as
vllm-ascend's multi-node recipes run them (docs/multi-host.md)."""
# The start gate: every container on every host runs the same one, so a neighbour that comes, goes
# or is renamed never changes another container's inputs (each changed byte re-creates a container,
# and so reloads a model). Two instances loading or profiling on one card at the same time fail: vLLM
# counts a loading neighbour's memory as its own non-torch memory (vllm issue 55827,
# vllm/utils/mem_utils.py), and before vllm-ascend 0.18 every process's memory on the card is
# subtracted from a later instance's KV cache (issue 7308). So the gate takes one lock per card it
# uses, in ascending card order (no two gates can deadlock), from a host folder every container
# mounts; starts vLLM; and a background holder keeps the locks until the instance's own /health
# answers or vLLM's process is gone: never on a timer, since a neighbour let in while the model still
# loads fails as above. flock(1) locks belong to the open file description, so the holder keeps them
# after the shell closes its copies and `exec`s vLLM (PID 1, or docker-init's child: signals, exit
# codes). A container that dies releases its locks with it.
#
# The order on a shared card (issue 28): before the card locks, the gate waits for the instances that
# `pulumi up` started before it on each of its cards, as written on the host by the start-order step
# (records.card_order, which says why and how; the container only ever learns its own name). Each gate
# first takes a lifetime lock `alive-NAME` (fd 9, inherited by vLLM through `exec`) and stamps
# `started-NAME` with the host's boot id; the holder stamps `served-NAME` when /health answers. A
# predecessor is waited for until it has served this boot, or is not alive once the host has marked
# this boot `settled` (every container Docker restarts has started), or for the start timeout at most.
# A stopped or missing neighbour holds no lock and is not alive, so it never blocks anyone. Tools:
# POSIX sh, util-linux `flock`, grep and awk (vllm-ascend's images are built FROM
# quay.io/ascend/cann:*-ubuntu22.04, where util-linux and grep are Essential packages and mawk is of
# required priority), and wget or python3 for the probe, as in the health check.
LOCK_DIR_HOST = "/var/lib/ascend-fleet/locks"
"""On the host: persistent, so the folder exists when Docker restarts the containers after a reboot."""
LOCK_DIR = "/run/ascend-fleet/locks"
"""In every container: one file per card, `card-N`, and the start order's files (below)."""
ORDER_PREFIX = "order-card-"
"""`order-card-N`: the containers on shared card N in deploy-time rank, one name a line (records.card_order)."""
SETTLED = "settled"
"""The boot id of the last boot whose restarted containers have all started (records.card_order)."""
ALIVE_PREFIX, STARTED_PREFIX, SERVED_PREFIX = "alive-", "started-", "served-"
BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
"""The host kernel's boot id, the same inside every container (not namespaced)."""
"""In every container: one file per card, `card-N`."""
# A compile cache per service, kept on the host so that a re-created container reuses what the one
# before it compiled: vllm-ascend's own `docker run` mounts `/root/.cache` for this (DOMAIN.md). What
# lasts there is Triton's kernels, which run the Gated DeltaNet layers of Qwen3.5/3.6 on Ascend: Triton
# keeps them under TRITON_CACHE_DIR, default `~/.triton/cache` (triton python/triton/runtime/cache.py,
# `default_cache_dir`), outside `~/.cache`, so the env points it inside. torch.compile's graphs and the
# ACL graphs are compiled and captured again at every start: at v0.20.2rc1 vllm-ascend's compiler
# returns no handle (vllm_ascend/compilation/compiler_interface.py, `fusion_pass_compile` and
# `npugraph_ex_compile` return `compiled_fn, None`), which vLLM's CompilerInterface reads as "the
# compiler doesn't support caching" (vllm/compilation/compiler_interface.py), so vLLM's cache under
# VLLM_CACHE_ROOT (`~/.cache/vllm`) keeps nothing it can load. vllm-ascend's images run as root
# (HOME=/root). Per configured service, under the name it was created with: replicas of one model
# share their kernels, and a renamed service keeps its cache. Clearing it costs one slower load (the
# Triton kernels built again): `rm -rf` the folder.
CACHE_DIR_HOST = "/var/lib/ascend-fleet/cache"
CACHE_DIR = "/root/.cache"
CACHE_ENV = {"TRITON_CACHE_DIR": f"{CACHE_DIR}/triton"}
# How often the gate's holder asks the container's own /health before it releases the card locks:
# the same 2 s as the health probes' default (records.health), so the next instance on a card starts
# within seconds of its predecessor serving. Part of every container's command: changing it restarts
# every model (it changed from 5 together with the health checks, which re-create them anyway).
GATE_POLL_SECONDS = 2
START_GATE = "; ".join((
    "trap 'exit 143' TERM INT",
    f"wait_s=${START_WAIT_ENV}; dir={LOCK_DIR}; held=/tmp/.ascend-fleet-cards-held; rm -f \"$held\" \"$held.failed\"",
    f"boot=$(cat {BOOT_ID_FILE} 2>/dev/null); me=${CONTAINER_ENV}",
    # A name reaches a file name only if it is a Docker name.
    "case $me in '' | *[!A-Za-z0-9_.-]*) me= ;; esac",
    'say() { echo "ascend-fleet: start gate: $*"; }',
    'stamped() { [ -n "$boot" ] && [ "$(cat "$dir/$1" 2>/dev/null)" = "$boot" ]; }',
    f'alive() {{ [ -e "$dir/{ALIVE_PREFIX}$1" ] && ! flock -n -s "$dir/{ALIVE_PREFIX}$1" true; }}',
    # The lifetime lock (held by fd 9 until the container's last process exits) and this start's stamp.
    # (A failed `exec 9>` would end the shell: only into a folder it can write.)
    f'if [ -n "$me" ] && [ -w "$dir" ]; then exec 9>"$dir/{ALIVE_PREFIX}$me"; flock -w 10 9 || say "could not lock $dir/{ALIVE_PREFIX}$me"; '
    f'rm -f "$dir/{SERVED_PREFIX}$me"; printf "%s\\n" "$boot" > "$dir/{STARTED_PREFIX}$me"; fi',
    # Its predecessors, `name:card`: the names before its own in each of its cards' order files.
    f'preds=; if [ -n "$me" ]; then for card in $(echo "${CARDS_ENV}" | tr , " "); do f="$dir/{ORDER_PREFIX}$card"; '
    'if [ -r "$f" ] && grep -qxF -- "$me" "$f"; then preds="$preds $(awk -v me="$me" -v card="$card" '
    "'$0 == me { exit } /^[A-Za-z0-9][A-Za-z0-9_.-]*$/ { print $0 \":\" card }' \"$f\")\"; fi; done; fi",
    "waited=0; for pc in $preds; do p=${pc%:*}; said=; "
    f'until stamped "{SERVED_PREFIX}$p" || {{ stamped {SETTLED} && ! alive "$p"; }} || [ "$waited" -ge "$wait_s" ]; do '
    '[ -n "$said" ] || say "waiting for $p, which loads before $me on card ${pc##*:} (the order pulumi up used): until it '
    'serves, or is not running once every container of this boot has started"; said=1; '
    "sleep 1 & wait $!; waited=$((waited + 1)); done; done",
    '[ "$waited" -lt "$wait_s" ] || say "waited ${waited}s for the instances before $me on its cards, which neither served '
    'nor stopped; on to the card locks" >&2',
    # One `flock -w` per card, nested, in ascending order; the words are digits and a fixed path.
    f"chain=; IFS=,; for card in ${CARDS_ENV}; do chain=\"$chain flock -w $wait_s {LOCK_DIR}/card-$card\"; done; unset IFS",
    # The holder: marks the locks as held, keeps them until /health answers (then stamps `served`) or
    # vLLM's process ($3, this shell's after `exec`) is gone; says so once per start timeout past it.
    "( $chain sh -c 'touch \"$0\"; waited=0; next=$2; until wget -q -O /dev/null \"$1\" 2>/dev/null || python3 -c "
    '"import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)" "$1" 2>/dev/null; do '
    'kill -0 "$3" 2>/dev/null || { echo "ascend-fleet: start gate: vllm exited before it served; card locks released"; exit 0; }; '
    'if [ "$waited" -ge "$next" ]; then echo "ascend-fleet: start gate: still loading after ${waited}s (start timeout $2s): '
    'the card locks stay until /health answers or vllm exits"; next=$((waited + $2)); fi; '
    f"sleep {GATE_POLL_SECONDS}; waited=$((waited + {GATE_POLL_SECONDS})); done; "
    '[ -z "$4" ] || printf "%s\\n" "$5" > "$4"; '
    "echo \"ascend-fleet: start gate: card locks released after ${waited}s: /health answered\"' "
    f"\"$held\" \"${HEALTH_URL_ENV}\" \"$wait_s\" \"$$\" \"${{me:+$dir/{SERVED_PREFIX}$me}}\" \"$boot\" || : > \"$held.failed\" ) & "
    "waited=0; until [ -e \"$held\" ]; do "
    "if [ -e \"$held.failed\" ]; then "
    f"echo \"ascend-fleet: start gate: cards ${CARDS_ENV} still locked after ${{wait_s}}s by an instance that neither "
    f"served nor stopped; check the other containers on these cards (npu-smi info, {logs()})\" >&2; exit 1; fi; "
    f"[ \"$waited\" -ne 1 ] || echo \"ascend-fleet: start gate: waiting for cards ${CARDS_ENV}: another instance "
    "is loading on one of them\"; "
    "sleep 1 & wait $!; waited=$((waited + 1)); done",
    f"echo \"ascend-fleet: start gate: cards ${CARDS_ENV} locked; vllm serve starts\"",
    'exec "$@"',
))


@dataclass(frozen=True)
class HealthCheck:
    test: tuple[str, ...]
    interval_seconds: int
    timeout_seconds: int
    start_period_seconds: int
    retries: int
    start_interval_seconds: int | None = None
    """Docker Engine 25+ only (records.health): the probe interval while the container starts."""

    def to_json(self) -> dict[str, object]:
        """`startIntervalSeconds` only when set: a container without it prints as before, so turning the
        setting off, or an old engine, leaves `plan --against` with nothing to report."""
        out: dict[str, object] = {
            "test": list(self.test),
            "intervalSeconds": self.interval_seconds,
            "timeoutSeconds": self.timeout_seconds,
            "startPeriodSeconds": self.start_period_seconds,
            "retries": self.retries,
        }
        if self.start_interval_seconds is not None:
            out["startIntervalSeconds"] = self.start_interval_seconds
        return out


@dataclass(frozen=True)
class Site:
    """Where a container runs, and all a container record reads of the stack: the stack's name (its
    labels), its host, the Docker Engine declared for the host and the fleet's health start interval
    (its health check). Never the whole fleet, so a record cannot reach a neighbour's settings."""

    stack: str
    host: Host
    docker_engine: str
    health_start_interval_seconds: int

    @classmethod
    def of(cls, fleet: FleetConfig, host: Host) -> Site:
        return cls(fleet.fleet_name, host, fleet.docker_engine_of(host), fleet.health_start_interval_seconds)


def health_check(site: Site, test: tuple[str, ...], steady: tuple[int, int, int], start_period: int) -> HealthCheck:
    """A container's health check at `site`: `steady` is (interval, timeout, retries) after the start;
    how soon the container turns healthy comes from the fleet's setting and the host's declared engine."""
    interval, timeout, retries = steady
    timing = probe_timing(site.docker_engine, site.health_start_interval_seconds, interval, timeout, retries)
    return HealthCheck(
        test=test,
        interval_seconds=timing.interval_seconds,
        timeout_seconds=timeout,
        start_period_seconds=start_period,
        retries=timing.retries,
        start_interval_seconds=timing.start_interval_seconds,
    )


@dataclass(frozen=True)
class ContainerSpec:
    """Everything Docker needs to run one service, in Docker's own terms."""

    name: str
    image: str
    command: tuple[str, ...]
    env: Mapping[str, str]
    device_files: tuple[str, ...]
    """Host `/dev` paths, passed in at the same path."""
    mounts: tuple[Mount, ...]
    api_port: int
    """Published on the host at the same number, unless on the host network (`network_mode`), where
    nothing is published: there, the port its health check asks (a follower's is its leader's)."""
    labels: Mapping[str, str]
    healthcheck: HealthCheck
    privileged: bool
    restart: str
    shm_size_mib: int
    start_timeout_seconds: int
    """How long a deployment waits for the container to turn healthy."""
    ipc_mode: str
    stop_grace_seconds: int
    sysctls: Mapping[str, str]
    """Namespaced kernel settings: the service's windows kept out of its ephemeral ports."""
    log_opts: Mapping[str, str]
    log_driver: str = "json-file"
    metrics_port: int | None = None
    """A second published port, for Prometheus (a router's)."""
    init: bool = True
    """Docker's init (tini) runs as PID 1: vLLM, exec'd by the start gate, would otherwise be PID 1,
    which never reaps orphans such as the gate's lock holder (docker run --init; the provider's `init`).
    It forwards signals, so `docker stop` still reaches vLLM."""
    entrypoint: tuple[str, ...] | None = None
    """Replaces the image's ENTRYPOINT; None keeps the image's (every model and router container).
    For an image whose entrypoint does not run its program (the NPU exporter's, records.exporter)."""
    network_mode: str | None = None
    """`host` for a member of a multi-host service (`member_spec`); None keeps Docker's default bridge
    network (every other container)."""

    @property
    def ports(self) -> tuple[int, ...]:
        """Every port published on the host, at the same number inside; none on the host network, where
        every port the container binds is a host port already."""
        if self.network_mode == HOST_NETWORK:
            return ()
        return (self.api_port,) if self.metrics_port is None else (self.api_port, self.metrics_port)

    def to_json(self) -> dict[str, object]:
        """Everything that reaches the container: the plan JSON's `container`, which `plan --against`
        compares key by key (`records.restarts` says which keys re-create it). `entrypoint` and
        `networkMode` only when set: every container that keeps its image's and Docker's default
        network prints as before."""
        entrypoint = {} if self.entrypoint is None else {"entrypoint": list(self.entrypoint)}
        network = {} if self.network_mode is None else {"networkMode": self.network_mode}
        return {
            "name": self.name,
            "image": self.image,
            **entrypoint,
            "command": list(self.command),
            "env": dict(self.env),
            "privileged": self.privileged,
            "deviceFiles": list(self.device_files),
            "mounts": [{"source": m.source, "target": m.target, "readOnly": m.read_only} for m in self.mounts],
            "ipcMode": self.ipc_mode,
            **network,
            "shmSizeMiB": self.shm_size_mib,
            "ports": list(self.ports),
            "labels": dict(self.labels),
            "extraHosts": {},
            "restart": self.restart,
            "sysctls": dict(self.sysctls),
            "logDriver": self.log_driver,
            "logOpts": dict(self.log_opts),
            "stopGraceSeconds": self.stop_grace_seconds,
            "init": self.init,
            "startTimeoutSeconds": self.start_timeout_seconds,
            "healthcheck": self.healthcheck.to_json(),
        }

    @property
    def create_timeout_seconds(self) -> int:
        """The deployment's bound on creating the container: the health wait and a margin."""
        return self.start_timeout_seconds + CREATE_MARGIN_SECONDS

    @property
    def delete_timeout_seconds(self) -> int:
        return self.stop_grace_seconds + CREATE_MARGIN_SECONDS


def _command(planned: ServicePlan) -> tuple[str, ...]:
    """`vllm serve` with what the plan owns first, then defaults' and the service's `args`."""
    i = planned.instance
    return _serve(i.service, i.served_model_name, planned.assignment.api_port, planned.gpu_memory_utilization, i.resolved)


def _serve(
    s: Service, served: str, port: int | None, utilization: Decimal, r: Resolved, owned: Sequence[str] = ()
) -> tuple[str, ...]:
    """`vllm serve` of `s`: the plan's flags (`--host` and `--port` only with a `port`), then `owned` (more of
    the plan's: a member's data-parallel flags), then defaults' and the service's `args`."""
    command = ["vllm", "serve", s.model, "--served-model-name", served]
    command += ["--host", "0.0.0.0", "--port", str(port)] if port is not None else []
    command += ["--tensor-parallel-size", str(s.tensor_parallel_size), "--gpu-memory-utilization", str(utilization)]
    kv_bytes = fixed_kv_bytes(s)
    if kv_bytes is not None:
        command += ["--kv-cache-memory-bytes", str(kv_bytes)]
    if s.max_model_len is not None:
        command += ["--max-model-len", str(s.max_model_len)]
    if s.max_num_seqs is not None:
        command += ["--max-num-seqs", str(s.max_num_seqs)]
    return (*command, *owned, *r.args)


def _gated(
    command: tuple[str, ...], env: dict[str, str], name: str, cards: Sequence[int], health: str, wait: int
) -> tuple[str, ...]:
    """The command behind the start gate, and the gate's settings (the container's own name, cards,
    the health URL its holder asks and start timeout: never a neighbour's) in `env`."""
    env[CONTAINER_ENV] = name
    env[CARDS_ENV] = ",".join(map(str, sorted(cards)))
    env[HEALTH_URL_ENV] = health
    env[START_WAIT_ENV] = str(wait)
    return behind_gate(START_GATE, command)


PLACEMENT_ENV = {k.env: (k.key,) for k in KINDS if k.env} | {
    VISIBLE_DEVICES_ENV: ("devices",),
    "VLLM_WORKER_MULTIPROC_METHOD": ("devices",),  # set only for tensor parallelism
}
"""Env variables that only render a placement or port field of the plan (the fields each renders):
the diff reports the field's change, not the variable's again."""


@dataclass(frozen=True)
class _Placed:
    """What a model container's env and labels are made of: a service's instance or a group's member alike."""

    name: str
    """The container's name: the one it was created with, kept across renames."""
    service: Service
    resolved: Resolved
    assignment: Assignment
    cards: int
    """How many cards it runs on: numbered from 0 inside, unless every card is visible."""
    kinds: tuple[WindowKind, ...]
    """The window kinds its labels write (every one, empty when it has none)."""


def _env_and_labels(stack: str, placed: _Placed, all_devices: bool) -> tuple[dict, dict]:
    s, a, name, r = placed.service, placed.assignment, placed.name, placed.resolved
    env = TUNING_ENV | CACHE_ENV
    if r.ipc_mode == "host":
        # One /dev/shm for every service and the host: ATB's shared-memory names must not meet.
        env["ATB_SHARE_MEMORY_NAME_SUFFIX"] = f"_{name}"
    if s.tensor_parallel_size > 1:
        env["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
    env.update(r.env)
    # With only its own /dev/davinciN mounted, the runtime numbers a container's
    # cards from 0; in all-devices mode every card is visible under its physical index.
    visible = a.cards if all_devices else range(placed.cards)
    env[VISIBLE_DEVICES_ENV] = ",".join(map(str, visible))
    labels = {
        f"{LABEL_PREFIX}.stack": stack,
        f"{LABEL_PREFIX}.service": name,
        f"{LABEL_PREFIX}.host": a.host_name,
        f"{LABEL_PREFIX}.devices": ",".join(map(str, a.cards)),
    }
    for kind in placed.kinds:
        window = a.windows.get(kind.key)
        text = kind.text(window) if window else ""
        if kind.env and window:
            env[kind.env] = text
        labels[f"{LABEL_PREFIX}.{kind.label}"] = text
    return dict(sorted(env.items())), labels


def http_probe(port: int, path: str) -> str:
    """A health check's shell command: succeeds when the container answers `path` on `port` with 2xx.
    vllm-ascend images carry python3; minimal images (the simulator) busybox wget."""
    return url_probe(f"http://127.0.0.1:{port}{path}")


def url_probe(url: str) -> str:
    """A health check's shell command: succeeds when `url` answers with 2xx."""
    return (
        f"wget -q -O /dev/null {url} 2>/dev/null || "
        f"python3 -c 'import urllib.request; urllib.request.urlopen(\"{url}\", timeout=5)'"
    )


# What every container mounts from the host: the driver (read-only) and the start gate's lock folder.
# Made once: a model validates each field, and 5,000 containers made them 30,000 times.
HOST_MOUNTS = (
    *(Mount(source=p, target=p) for p in DRIVER_MOUNTS),
    Mount(source=LOCK_DIR_HOST, target=LOCK_DIR, read_only=False),
)


def created_on_host(source: str) -> bool:
    """A mount source the host check creates rather than requires: the start gate's lock folder and
    the compile caches (Docker refuses a bind mount whose source is missing)."""
    return source == LOCK_DIR_HOST or source.startswith(CACHE_DIR_HOST + "/")


def cache_dir(service: Service) -> str:
    """The host folder of the service's compile cache: one per configured service, by the name its
    containers were created with (Docker names: `[a-z0-9-]`, safe in a path)."""
    return f"{CACHE_DIR_HOST}/{service.original_name}"


def _mounts(s: Service, r: Resolved) -> tuple[Mount, ...]:
    """The host's, the model's, the compile cache's (unless the service mounts its own there: Docker
    refuses two mounts on one target) and the service's own."""
    own_cache = any(m.target == CACHE_DIR for m in r.mounts)
    cache = () if own_cache else (Mount(source=cache_dir(s), target=CACHE_DIR, read_only=False),)
    return (*HOST_MOUNTS, Mount(source=s.model, target=s.model), *cache, *r.mounts)


def container_spec(planned: ServicePlan, site: Site, *, shared: bool = False) -> ContainerSpec:
    """The container of `planned` at `site` (its host). `shared`: one of its cards is used by another
    service too. Nothing about its neighbours reaches it: adding, removing or renaming one leaves this
    container as it is."""
    s, a, r, host = planned.service, planned.assignment, planned.resolved, site.host
    all_devices = r.all_devices or (shared and host.card_sharing == "privileged")
    name = planned.instance.original_name
    placed = _Placed(name, s, r, a, s.tensor_parallel_size, KINDS)
    env, labels = _env_and_labels(site.stack, placed, all_devices)
    cards = range(host.npus) if all_devices else a.cards
    device_files = tuple(f"/dev/davinci{c}" for c in cards) + CONTROL_DEVICES
    health = f"http://127.0.0.1:{a.api_port}/health"
    command = _gated(_command(planned), env, name, a.cards, health, r.start_timeout_seconds)
    reserved = ",".join(window_text(a.windows[k.key]) for k in KINDS if k.netns and k.key in a.windows)
    return ContainerSpec(
        # What reaches Docker carries the name the container was created with: a renamed service
        # (`previousNames`) keeps its container, whose name the docker provider cannot change in place.
        name=name,
        image=r.image,
        command=command,
        env=MappingProxyType(dict(sorted(env.items()))),
        device_files=device_files,
        mounts=_mounts(s, r),
        api_port=a.api_port,
        labels=MappingProxyType(labels),
        healthcheck=health_check(
            site, ("CMD-SHELL", http_probe(a.api_port, "/health")), HEALTH_STEADY, r.start_timeout_seconds
        ),
        privileged=all_devices,
        ipc_mode=r.ipc_mode,
        stop_grace_seconds=r.stop_grace_seconds,
        sysctls=MappingProxyType({RESERVED_PORTS_SYSCTL: reserved}),
        restart=r.restart,
        shm_size_mib=r.shm_size_mib,
        start_timeout_seconds=r.start_timeout_seconds,
        log_opts=r.log_opts,
    )


GROUP_LABEL = f"{LABEL_PREFIX}.group"
"""On every member of a multi-host service: the service's name (the one its containers were created with)."""


def member_health_url(group: GroupPlan, mp: MemberPlan) -> str:
    """What a member's health check and its start gate's holder ask: the leader its own /health on its
    API port; a follower the leader's, on the leader's NIC address. A `--headless` follower serves no
    HTTP at all (vllm v0.20.2 `entrypoints/cli/serve.py`: `--headless` sets `api_server_count = 0`, and
    `run_headless` starts only the engine processes, which join the leader's handshake), so a follower
    is healthy when its group serves."""
    port = group.leader.assignment.api_port
    if mp.member.leader:
        return f"http://127.0.0.1:{port}/health"
    address = group.address
    return f"http://{f'[{address}]' if ':' in address else address}:{port}/health"


def member_spec(group: GroupPlan, mp: MemberPlan, site: Site) -> ContainerSpec:
    """The container of member `mp` of `group` at `site` (its host), before its group's digest label
    (records.group): a service's container (`container_spec`) on Docker's host network, publishing
    nothing, with the group's data-parallel flags (`GroupPlan.args`) after the plan's own, its host's
    NIC variables (`Host.nic_env`) and HCCL windows in its env, its cards alone, the same start
    gate, and the health check of `member_health_url`."""
    m, a = mp.member, mp.assignment
    s, r = m.service, m.resolved
    name = names.original_name(m.name, m.previous_names)
    env, labels = _env_and_labels(site.stack, _Placed(name, s, r, a, len(a.cards), MEMBER_KINDS), r.all_devices)
    env |= site.host.nic_env()
    labels[GROUP_LABEL] = s.original_name
    port = a.api_port if m.leader else None
    command = _serve(s, s.served_model_name or s.original_name, port, m.memory_fraction, r, group.args(mp))
    health = member_health_url(group, mp)
    return _on_host_network(name, r, a.cards, site, (command, env, labels), health, group.leader.assignment.api_port, _mounts(s, r))


def _on_host_network(
    name: str, r: Resolved, cards: Sequence[int], site: Site, made: tuple[tuple[str, ...], dict, dict], health: str,
    api_port: int, mounts: tuple[Mount, ...],
) -> ContainerSpec:
    """A model's container on Docker's host network, publishing nothing: `made` is its `vllm serve` command,
    env and labels, put behind the start gate for its `cards`; `health` what its health check and gate ask."""
    command, env, labels = made
    command = _gated(command, env, name, cards, health, r.start_timeout_seconds)
    visible = range(site.host.npus) if r.all_devices else cards
    return ContainerSpec(
        name=name,
        image=r.image,
        command=command,
        env=MappingProxyType(dict(sorted(env.items()))),
        device_files=tuple(f"/dev/davinci{c}" for c in visible) + CONTROL_DEVICES,
        mounts=mounts,
        api_port=api_port,
        labels=MappingProxyType(labels),
        healthcheck=health_check(site, ("CMD-SHELL", url_probe(health)), HEALTH_STEADY, r.start_timeout_seconds),
        privileged=r.all_devices,
        ipc_mode=r.ipc_mode,
        stop_grace_seconds=r.stop_grace_seconds,
        # None: Docker refuses `net.*` sysctls on the host network (docker/cli man/docker-run.1.md, --sysctl:
        # "If you use the --network=host option using these sysctls are not allowed"); a member's and a
        # prefill or decode instance's windows lie outside the kernel's ephemeral range instead (docs/multi-host.md).
        sysctls=MappingProxyType({}),
        restart=r.restart,
        shm_size_mib=r.shm_size_mib,
        start_timeout_seconds=r.start_timeout_seconds,
        log_opts=r.log_opts,
        network_mode=HOST_NETWORK,
    )


HCCN_CONF = "/etc/hccn.conf"
"""The NPUs' network settings (`hccn_tool` writes them on the host). A prefill or decode instance mounts it
read-only, as vllm-ascend@v0.20.2rc1's `pd_disaggregation_mooncake_single_node.md` runs its container
(`-v /etc/hccn.conf:/etc/hccn.conf`, "If using Docker, mount it into the container"): without it a decode
instance starts normally and answers wrongly (vllm-ascend issue 7711). The host check asks for it."""
DISAGGREGATED_LABEL = f"{LABEL_PREFIX}.disaggregated"
"""On every prefill and decode instance: its disaggregated service's name (the one its containers were created with)."""
ROLE_LABEL = f"{LABEL_PREFIX}.role"
"""On every prefill and decode instance: `prefill` or `decode`."""


def kv_transfer_flag(d: DisaggregatedPlan, rp: RolePlan) -> tuple[str, str]:
    """`--kv-transfer-config` and the plan's `kvTransferConfig` of `rp` as compact JSON, in the plan's key order,
    one word as the tutorials quote it: vLLM reads a config-typed flag such as this `KVTransferConfig` from a
    JSON string (vllm@0.20.2 `engine/arg_utils.py`)."""
    return "--kv-transfer-config", json.dumps(d.kv_transfer_config(rp), separators=(",", ":"))


def role_spec(d: DisaggregatedPlan, rp: RolePlan, site: Site) -> ContainerSpec:
    """The container of prefill or decode instance `rp` of `d` at `site` (its host): a service's container on
    Docker's host network as the tutorials run it (`docker run --net=host`; its peers and the proxy reach it at
    its host's address), publishing nothing, with its `--kv-transfer-config` after the plan's own flags, its
    host's NIC variables (`Host.nic_env`: the tutorials export `HCCL_IF_IP`, `GLOO_SOCKET_IFNAME`,
    `TP_SOCKET_IFNAME` and `HCCL_SOCKET_IFNAME` for each instance) and HCCL windows in its env, its cards alone,
    `/etc/hccn.conf` mounted read-only (`HCCN_CONF`), the same start gate, and its own
    /health as health check. Its compile cache is its service's, which both roles share, as replicas do."""
    ri, a = rp.role_instance, rp.assignment
    s, r = ri.service, ri.resolved
    name = ri.original_name
    env, labels = _env_and_labels(site.stack, _Placed(name, s, r, a, s.tensor_parallel_size, ROLE_KINDS), r.all_devices)
    env |= site.host.nic_env()
    labels |= {DISAGGREGATED_LABEL: ri.parent.original_name, ROLE_LABEL: ri.role}
    command = _serve(s, ri.served_model_name, a.api_port, rp.gpu_memory_utilization, r, kv_transfer_flag(d, rp))
    mounts = _mounts(ri.parent, r)
    # Unless the service mounts its own there: Docker refuses two mounts on one target.
    own = any(m.target == HCCN_CONF for m in mounts)
    mounts += () if own else (Mount(source=HCCN_CONF, target=HCCN_CONF),)
    health = f"http://127.0.0.1:{a.api_port}/health"
    return _on_host_network(name, r, a.cards, site, (command, env, labels), health, a.api_port, mounts)
