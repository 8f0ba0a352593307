"""What the doctor tests feed `host_findings`: a small fleet, the facts a clean host reports for it, and
gathered command output (npu-smi screens, `docker inspect`, the router's /workers) to change them with."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from ops.doctor.facts import HostFacts, Listener, LiveContainer
from ops.doctor.findings import host_findings
from ops.doctor.gather import MARK
from ops.framing import frame
from ops.npusmi import Npu, NpuProcess, NpuSmiInfo, parse_topology
from tests.conftest import live_container
from tests.support.stacks import fleet, host, service

PIDS = {"alpha": 1000, "beta": 2000, "gamma": 3000}
# `npu-smi info -t device-share` as gathered (one line); layout of the npu-smi reference.
DEVICE_SHARE_ON = "\tNPU ID                         : 0\n\tChip Count                     : 1\n\n\tDevice-share Status            : True\n\tChip ID                        : 0"
# `npu-smi info -t topo` of an 8 x 910B3 A2 board: every pair linked by HCCS (tests/data/npu-smi).
TOPO_SCREEN = (Path(__file__).resolve().parents[1] / "data/npu-smi/npu-smi-info-t-topo-910b3.txt").read_text()
FULL_MESH = parse_topology(TOPO_SCREEN)


def make_fleet(**extra: Any):
    return fleet(
        [host("npu-a")],
        [
            service("alpha", 1, 0.4, devices=[0]),
            service("beta", 1, 0.4, devices=[0]),
            service("gamma", 2, 0.5, devices=[2, 3]),
        ],
        **extra,
    )



def with_link(a: int, b: int, link: str, both: bool = True) -> str:
    """The A2 board's screen with the link between cards a and b printed as `link` (on a's row, and on b's if `both`)."""
    rows = TOPO_SCREEN.splitlines()
    for r, c in ((a, b), (b, a))[: 2 if both else 1]:
        cells = rows[r + 1].split()
        cells[c + 1] = link
        rows[r + 1] = "".join(cell.ljust(11) for cell in cells[:-1]) + cells[-1]
    return "\n".join(rows) + "\n"


def image_id(name: str) -> str:
    """The ID a host gives the image `name` here: one per name, as `docker image inspect` prints it."""
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


def host_image_ids(*specs) -> dict[str, str | None]:
    """What the gather script learns of the specs' image names (`HostFacts.image_ids`): each one's ID."""
    return {spec.image: image_id(spec.image) for spec in specs}


def inspect_of(spec, *, cid: str, pid: int, status: str = "running", health: str | None = "healthy",
               env: dict[str, str] | None = None, image: str | None = None, runs: str | None = None, devices=None,
               ports: dict | None = None, labels: dict | None = None, name: str | None = None,
               privileged: bool | None = None, log_opts: dict | None = None, restart: str | None = None) -> dict[str, Any]:  # fmt: skip
    """A `docker inspect` object of the container a spec describes, with overrides, created the way the
    docker provider creates it: by the ID of the spec's image (components/model_service.py passes
    `RemoteImage.image_id`), which the provider sends as `Config.Image` as it is given
    (kreuzwerker/terraform-provider-docker v4.5.0 `internal/provider/resource_docker_container_funcs.go`
    lines 49 and 69-70, `resourceDockerContainerCreate`: `image := d.Get("image").(string)`,
    `config := &container.Config{Image: image, ...}`). `image`: created with another name or ID instead;
    `runs`: the ID it runs (`.Image`; default the ID `image` names)."""
    created = image or image_id(spec.image)
    full_env = {"PATH": "/usr/local/sbin:/usr/bin", "LANG": "C.UTF-8", **spec.env, **(env or {})}
    return {
        "Id": cid,
        "Name": f"/{name or spec.name}",
        "Image": runs or (created if created.startswith("sha256:") else image_id(created)),
        "Config": {
            "Image": created,
            "Cmd": list(spec.command),
            "Entrypoint": None if spec.entrypoint is None else list(spec.entrypoint),
            "Env": [f"{k}={v}" for k, v in full_env.items()],
            # Docker merges the image's labels in: doctor compares only the plan's.
            "Labels": {"org.opencontainers.image.vendor": "Huawei", **spec.labels} if labels is None else labels,
            "StopTimeout": spec.stop_grace_seconds,
            "Healthcheck": {
                "Test": list(spec.healthcheck.test),
                "Interval": spec.healthcheck.interval_seconds * 10**9,
                "Timeout": spec.healthcheck.timeout_seconds * 10**9,
                "StartPeriod": spec.healthcheck.start_period_seconds * 10**9,
                "Retries": spec.healthcheck.retries,
                **({"StartInterval": spec.healthcheck.start_interval_seconds * 10**9} if spec.healthcheck.start_interval_seconds else {}),
            },
        },
        "State": {
            "Status": status,
            "Pid": pid if status in ("running", "restarting") else 0,
            "ExitCode": 0 if status == "running" else 137,
            **({"Health": {"Status": health}} if health else {}),
        },
        "HostConfig": {
            "Devices": [
                {"PathOnHost": d, "PathInContainer": d, "CgroupPermissions": "rwm"}
                for d in (spec.device_files if devices is None else devices)
            ],
            "Privileged": spec.privileged if privileged is None else privileged,
            "Init": spec.init,
            # As the docker provider creates them (HostConfig.Mounts); `docker run -v` fills Binds instead.
            "Mounts": [{"Type": "bind", "Source": m.source, "Target": m.target, "ReadOnly": m.read_only} for m in spec.mounts],
            "Binds": None,
            "RestartPolicy": {"Name": restart or spec.restart, "MaximumRetryCount": 0},
            "ShmSize": spec.shm_size_mib * 1024 * 1024,
            "IpcMode": spec.ipc_mode,
            "NetworkMode": spec.network_mode or "bridge",
            "Sysctls": dict(spec.sysctls),
            "LogConfig": {"Type": spec.log_driver, "Config": {**spec.log_opts, **(log_opts or {})}},
            "PortBindings": (
                {f"{p}/tcp": [{"HostIp": "", "HostPort": str(p)}] for p in spec.ports} if ports is None else ports
            ),
        },
    }


def clean_facts(plan) -> HostFacts:
    """The host running exactly the plan: healthy containers, their ranks on their cards, docker-proxy on API ports."""
    inspects, pids, listeners, procs = [], {}, [], []
    for sd in plan.hosts[0].services:
        ps, spec = sd.plan, sd.spec
        base = PIDS[ps.name]
        cid = f"{ps.name}-id"
        inspects.append(inspect_of(spec, cid=cid, pid=base))
        ranks = [base + 10 + i for i, _ in enumerate(ps.assignment.cards)]
        pids[cid] = frozenset({base, *ranks})
        procs += [(card, rank) for card, rank in zip(ps.assignment.cards, ranks)]
        listeners.append(Listener("0.0.0.0", spec.api_port, (("docker-proxy", base + 500),)))
    listeners.append(Listener("0.0.0.0", 22, (("sshd", 1),)))
    return HostFacts(
        containers=tuple(LiveContainer.from_inspect(i) for i in inspects),
        pids=pids,
        listeners=tuple(listeners),
        npu=npu_info(procs),
        device_share={c: DEVICE_SHARE_ON for c in plan.hosts[0].shared_cards},
        topology=FULL_MESH,
        image_ids=host_image_ids(*(spec for _, spec, _ in plan.hosts[0].containers)),
    )


def group_values() -> dict[str, Any]:
    """A two-host service (DP 2, one rank of 4 cards per host; npu-a leads) beside a single-host service on npu-a."""
    return {
        "hosts": [host("npu-a", address="10.0.0.1", nic={"interface": "eth1"}), host("npu-b", address="10.0.0.2")],
        "services": [service("ds", 4, 0.9, dataParallel={"size": 2, "perHost": 1}), service("solo", 1, 0.5)],
    }


def running_facts(hd) -> HostFacts:
    """Any host running exactly its plan (`HostDeployment.planned`): healthy containers, their ranks on their
    cards; a service's API port held by docker-proxy, a member's or instance's ports (on the host network) by
    its own processes: the leader's, an instance's and the proxy's API port, the HCCL base port of every
    member and instance, and each rank of a prefill instance on its port of the `kvPort` block, on its host's
    address (`records.disaggregated` says why)."""
    inspects, pids, listeners, procs = [], {}, [Listener("0.0.0.0", 22, (("sshd", 1),))], []
    blocks = {i.name: i.plan.kv_ports for i in hd.instances if i.role == "prefill"}
    for i, c in enumerate(hd.planned):
        base, cid = 1000 * (i + 1), f"{c.name}-id"
        inspects.append(inspect_of(c.spec, cid=cid, pid=base))
        ranks = [base + 10 + k for k, _ in enumerate(c.cards)]
        pids[cid] = frozenset({base, *ranks})
        procs += list(zip(c.cards, ranks))
        if c.spec.network_mode is None:
            listeners.append(Listener("0.0.0.0", c.spec.api_port, (("docker-proxy", base + 500),)))
            continue
        if c.role != "follower":
            listeners.append(Listener("0.0.0.0", c.spec.api_port, (("python3" if c.kind == "proxy" else "vllm", base),)))
        if "HCCL_IF_BASE_PORT" in c.spec.env:
            listeners.append(Listener("10.0.0.1", int(c.spec.env["HCCL_IF_BASE_PORT"]), (("python3", ranks[0]),)))
        if c.name in blocks:
            listeners += [Listener(hd.host.address, blocks[c.name][0] + k, (("python3", rank),)) for k, rank in enumerate(ranks)]
    return HostFacts(
        containers=tuple(LiveContainer.from_inspect(i) for i in inspects), pids=pids, listeners=tuple(listeners),
        npu=npu_info(procs), topology=FULL_MESH, image_ids=host_image_ids(*(c.spec for c in hd.planned)),
    )  # fmt: skip


def with_container(facts: HostFacts, inspect: dict[str, Any], pids: set[int] = frozenset()) -> HostFacts:
    """The facts with one container replaced (same name) or added."""
    live = LiveContainer.from_inspect(inspect)
    containers = tuple(c for c in facts.containers if c.name != live.name) + (live,)
    all_pids = dict(facts.pids)
    if pids:
        all_pids[live.id] = frozenset(pids)
    return dataclasses.replace(facts, containers=containers, pids=all_pids)


def gathered(*sections: tuple[str, str, str]) -> str:
    """What the gather script prints: each section framed, then `end`."""
    return "".join(frame(MARK, kind, arg, payload) for kind, arg, payload in (*sections, ("end", "", "")))


def workers_body(health: dict[str, bool]) -> str:
    workers = [
        {"url": url, "model_id": "unknown", "worker_type": "regular", "is_healthy": ok, "load": 0,
         "connection_mode": "Http", "priority": 50, "cost": 1.0}
        for url, ok in health.items()
    ]  # fmt: skip
    return json.dumps({"workers": workers, "total": len(workers), "stats": {"regular_count": len(workers)}})


def router_findings(hd, body: str | None, router_status: str = "running"):
    (rd,) = hd.routers
    containers = [live_container(sd.spec) for sd in hd.services] + [live_container(rd.spec, router_status)]
    facts = HostFacts(containers=tuple(containers), router_workers={rd.name: body} if body is not None else {})
    return [f for f in host_findings(hd, facts) if f.kind in ("router", "missing", "stopped", "drift")]


def npu_info(processes: list[tuple[int, int]], unhealthy: dict[int, str] | None = None) -> NpuSmiInfo:
    unhealthy = unhealthy or {}
    return NpuSmiInfo(
        version="24.1.rc2",
        npus=tuple(Npu(index=c, name="910B3", health=unhealthy.get(c, "OK")) for c in range(8)),
        processes=tuple(NpuProcess(npu=card, pid=pid, name="python3", memory_mb=26214) for card, pid in processes),
    )


def findings(plan, facts):
    return host_findings(plan.hosts[0], facts)
