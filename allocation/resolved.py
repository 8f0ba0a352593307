"""A service's container settings with the defaults applied, worked out once by the planner.

A setting a service leaves unset comes from `ascend-fleet:defaults`, and when that leaves it unset
too, from the project's default below. The planner resolves every service once; the container and
router records, the capacity check and the config reference read these values and never look a
default up again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping

from allocation.defaults import (
    DEFAULT_IMAGE,
    DEFAULT_IMAGES,
    DEFAULT_IPC_MODE,
    DEFAULT_RESTART,
    DEFAULT_SHM_SIZE_MIB,
    DEFAULT_START_TIMEOUT_SECONDS,
    DEFAULT_STOP_GRACE_SECONDS,
    LOG_OPTS,
    REQUEST_TIMEOUT_SECONDS,
    ROUTER_HEALTH_FAILURES,
    ROUTER_HEALTH_INTERVAL_SECONDS,
    ROUTER_SHM_SIZE_MIB,
    ROUTER_STARTUP_MARGIN_SECONDS,
    ROUTER_STOP_GRACE_SECONDS,
)
from allocation.kv_cache import prefix_caching
from allocation.vllm_args import read_args

if TYPE_CHECKING:
    from allocation.config import ContainerSettings, Mount, Service



@dataclass(frozen=True)
class Resolved:
    """What one service runs with: its own setting, else the defaults', else the project's."""

    image: str
    vllm_ascend_version: tuple[int, int] | None
    """(major, minor): configured, else read from the image tag; None when neither says."""
    env: Mapping[str, str]
    """The defaults' env, then the service's over it."""
    args: tuple[str, ...]
    """The defaults' `args`, then the service's."""
    mounts: tuple[Mount, ...]
    """The defaults' mounts, then the service's."""
    all_devices: bool
    ipc_mode: str
    shm_size_mib: int
    start_timeout_seconds: int
    stop_grace_seconds: int
    restart: str
    log_opts: Mapping[str, str]
    graph_memory_gi_b: Decimal | None
    """Per-card NPU graph pool, outside the fraction (`graphMemoryGiB`), as a startup log reported it;
    None: unmeasured (`allocation.graph_estimate` estimates it from the profile)."""

    @property
    def captures_graphs(self) -> bool:
        """vLLM-Ascend captures NPU graphs unless `--enforce-eager` (read as vLLM reads `args`:
        `allocation.vllm_args`): vllm-ascend@v0.20.2rc1 `worker/worker.py` l. 507 `if not
        self.model_config.enforce_eager: ... capture_model()`."""
        return read_args(self.args).enforce_eager is not True


def resolve(service: ContainerSettings, defaults: ContainerSettings, board: str = "a2") -> Resolved:
    """The settings of `service` over `defaults` over the project's defaults; `board`: the host's,
    whose build of the image is the default."""
    s, d = service, defaults
    image = s.image or _board_default(d.image, board)
    return Resolved(
        image=image,
        vllm_ascend_version=version_of(s.vllm_ascend_version or d.vllm_ascend_version, image),
        env=MappingProxyType({**(d.env or {}), **(s.env or {})}),
        args=(*(d.args or ()), *(s.args or ())),
        mounts=(*(d.mounts or ()), *(s.mounts or ())),
        all_devices=bool(_first(s.all_devices, d.all_devices, False)),
        ipc_mode=s.ipc_mode or d.ipc_mode or DEFAULT_IPC_MODE,
        # Zero is no setting of these (the config refuses it), but a stop grace period of 0 is one.
        shm_size_mib=s.shm_size_mib or d.shm_size_mib or DEFAULT_SHM_SIZE_MIB,
        start_timeout_seconds=s.start_timeout_seconds or d.start_timeout_seconds or DEFAULT_START_TIMEOUT_SECONDS,
        stop_grace_seconds=_first(s.stop_grace_seconds, d.stop_grace_seconds, DEFAULT_STOP_GRACE_SECONDS),
        restart=s.restart or d.restart or DEFAULT_RESTART,
        log_opts=MappingProxyType(dict(s.log_opts or d.log_opts or LOG_OPTS)),
        graph_memory_gi_b=s.graph_memory_gi_b if s.graph_memory_gi_b is not None else d.graph_memory_gi_b,
    )


def _board_default(image: str | None, board: str) -> str:
    """The image `defaults` gives a service on `board`. `Pulumi.yaml` names the project's default for every
    stack, the A2 build: on an A3 board that stands for the A3 build (`DEFAULT_IMAGES`), which
    vllm-ascend publishes beside it. Another image is the operator's own, taken as it is on every board
    (the plan warns when a vllm-ascend one is the other board's build)."""
    if image is None or (image == DEFAULT_IMAGE and board != "a2"):
        return DEFAULT_IMAGES[board]
    return image


@dataclass(frozen=True)
class ResolvedRouter:
    """What the router of a replicated service runs with, every default applied: its `router:`
    settings, else what its service implies, else the project's. `records.router` only renders it."""

    policy: str
    """`router.policy`, else `cache_aware` where its replicas cache prefixes (a shared prefix goes to
    the replica that cached it), else `round_robin`."""
    request_timeout_seconds: int
    startup_timeout_seconds: int
    """How long it waits for its first worker: the slowest replica's start timeout and a margin,
    since it exits when no worker answers in time."""
    health_interval_seconds: int
    health_failures: int
    base_image: str
    """The image its image is built from: `router.baseImage`, else the service's."""
    log_opts: Mapping[str, str]
    """The defaults' log options: a router has no container settings of its own."""
    restart: str = DEFAULT_RESTART
    ipc_mode: str = DEFAULT_IPC_MODE
    shm_size_mib: int = ROUTER_SHM_SIZE_MIB
    stop_grace_seconds: int = ROUTER_STOP_GRACE_SECONDS


def resolve_router(service: Service, defaults: ContainerSettings, load_seconds: int) -> ResolvedRouter:
    """The router of `service` resolved once; `load_seconds`: its replicas' longest start timeout."""
    settings, resolved = service.router, resolve(service, defaults)
    hybrid = service.profile is not None and service.profile.attention == "hybrid"
    default_policy = "cache_aware" if prefix_caching(resolved.args, hybrid) else "round_robin"
    return ResolvedRouter(
        policy=(settings.policy if settings else None) or default_policy,
        request_timeout_seconds=(settings.request_timeout_seconds if settings else None) or REQUEST_TIMEOUT_SECONDS,
        startup_timeout_seconds=load_seconds + ROUTER_STARTUP_MARGIN_SECONDS,
        health_interval_seconds=ROUTER_HEALTH_INTERVAL_SECONDS,
        health_failures=ROUTER_HEALTH_FAILURES,
        base_image=(settings.base_image if settings else None) or resolved.image,
        log_opts=MappingProxyType(dict(defaults.log_opts or LOG_OPTS)),
    )


def _first(*values):
    """The first value that is set: 0 and False are settings, not absences."""
    return next(v for v in values if v is not None)


def version_of(configured: str | None, image: str) -> tuple[int, int] | None:
    """(major, minor) of `configured` (`0.11.0`), else of the image's tag (`:v0.20.2rc1`); None if unknown."""
    text = configured
    if text is None:
        tag = image.partition("@")[0].rpartition(":")[2]  # `@sha256:...` after the tag
        text = tag if "/" not in tag else ""
    match = re.match(r"v?([0-9]{1,4})\.([0-9]{1,4})(?![0-9])", text)
    return (int(match.group(1)), int(match.group(2))) if match else None
