"""What `doctor` reads of a cluster (pods, ResourceClaims, ResourceSlices, nodes), parsed. Pure.

Every object comes from the API server, which anyone with write access to the namespace fills:
each field is taken only when it has the type the API defines (kubernetes/kubernetes
`staging/src/k8s.io/api/core/v1/types.go` for pods and nodes, `staging/src/k8s.io/api/resource/v1/
types.go` for claims and slices), and is otherwise absent; nothing here raises on a malformed object.
Strings keep their full value for comparison; messages cut and escape them (`ops.doctor.drift.shown`).

- a pod: its `ascend-fleet/instance` label (the renderer's, `views.exports.kubernetes`), `spec.nodeName`,
  the claims it names (`spec.resourceClaims[].resourceClaimName`), each container's env values (an
  entry set from a ConfigMap or field reference has no value here, and counts as absent), `status.phase`,
  the `Ready` condition, and its containers' `started` flags and waiting reasons;
- a claim: its allocation, `status.allocation.devices.results[]` (`driver`, `pool`, `device`), or None;
- a slice: each device's `physicId` attribute (`attributes[...].int`), by (node, driver, pool, device);
- a node: the value of the stack's `hostnameLabel`, which names the planned host (its `nodeSelector`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from views.exports.kubernetes import INSTANCE_LABEL

Device = tuple[str, str, str]
"""(driver, pool, device) of an allocation result."""


@dataclass(frozen=True)
class LivePod:
    name: str
    instance: str | None
    node: str | None
    phase: str
    ready: bool
    started: bool
    """Every container has passed its startup probe (`containerStatuses[].started`)."""
    waiting: str | None
    """A container's waiting reason (`CrashLoopBackOff`, `ImagePullBackOff`...), if any."""
    claims: tuple[str, ...]
    env: Mapping[str, Mapping[str, str]]
    """Container name -> its env entries that carry a value."""


@dataclass(frozen=True)
class LiveClaim:
    name: str
    devices: tuple[Device, ...] | None
    """The allocation's devices; None when the claim is not allocated."""


@dataclass(frozen=True)
class ClusterFacts:
    pods: tuple[LivePod, ...]
    claims: Mapping[str, LiveClaim]
    node_host: Mapping[str, str]
    """Node name -> the value of its hostname label (the planned host it is)."""
    physic_id: Mapping[tuple[str, str, str, str], int]
    """(node, driver, pool, device) -> the device's `physicId`, from the node's ResourceSlices."""


def _d(value: Any, key: str) -> dict[str, Any]:
    inner = value.get(key) if isinstance(value, dict) else None
    return inner if isinstance(inner, dict) else {}


def _l(value: Any, key: str) -> list[Any]:
    inner = value.get(key) if isinstance(value, dict) else None
    return [x for x in inner if isinstance(x, dict)] if isinstance(inner, list) else []


def _s(value: Any, key: str) -> str | None:
    inner = value.get(key) if isinstance(value, dict) else None
    return inner if isinstance(inner, str) else None


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in _l(container, "env") if isinstance(e.get("name"), str) and isinstance(e.get("value"), str)}


def parse_pod(obj: Any) -> LivePod:
    meta, spec, status = _d(obj, "metadata"), _d(obj, "spec"), _d(obj, "status")
    statuses = _l(status, "containerStatuses")
    ready = any(_s(c, "type") == "Ready" and _s(c, "status") == "True" for c in _l(status, "conditions"))
    waiting = next((r for c in statuses if (r := _s(_d(_d(c, "state"), "waiting"), "reason"))), None)
    return LivePod(
        name=_s(meta, "name") or "",
        instance=_s(_d(meta, "labels"), INSTANCE_LABEL),
        node=_s(spec, "nodeName") or None,
        phase=_s(status, "phase") or "Unknown",
        ready=ready,
        started=bool(statuses) and all(c.get("started") is True for c in statuses),
        waiting=waiting,
        claims=tuple(n for c in _l(spec, "resourceClaims") if (n := _s(c, "resourceClaimName"))),
        env={n: _env(c) for c in _l(spec, "containers") if (n := _s(c, "name"))},
    )


def parse_claim(obj: Any) -> LiveClaim:
    allocation = _d(_d(obj, "status"), "allocation")
    results = _l(_d(allocation, "devices"), "results")
    devices = tuple((_s(r, "driver") or "", _s(r, "pool") or "", _s(r, "device") or "") for r in results)
    return LiveClaim(_s(_d(obj, "metadata"), "name") or "", devices if allocation else None)


def slice_devices(obj: Any) -> dict[tuple[str, str, str, str], int]:
    spec = _d(obj, "spec")
    node, driver, pool = _s(spec, "nodeName"), _s(spec, "driver"), _s(_d(spec, "pool"), "name")
    if not (node and driver and pool):
        return {}
    out = {}
    for device in _l(spec, "devices"):
        value = _d(_d(device, "attributes"), "physicId").get("int")
        name = _s(device, "name")
        if name and isinstance(value, int) and not isinstance(value, bool):
            out[(node, driver, pool, name)] = value
    return out


def parse_cluster(pods: list[Any], claims: list[Any], slices: list[Any], nodes: list[Any], hostname_label: str) -> ClusterFacts:
    """The facts of the lists the API answered."""
    physic: dict[tuple[str, str, str, str], int] = {}
    for obj in slices:
        physic |= slice_devices(obj)
    node_host = {}
    for obj in nodes:
        meta = _d(obj, "metadata")
        name, host = _s(meta, "name"), _s(_d(meta, "labels"), hostname_label)
        if name and host:
            node_host[name] = host
    parsed = (parse_claim(c) for c in claims)
    return ClusterFacts(tuple(parse_pod(p) for p in pods), {c.name: c for c in parsed if c.name}, node_host, physic)
