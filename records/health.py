"""Health probe timing per host, from the Docker Engine the stack declares for it.

Docker changes a container's health status only when a probe runs, and the docker provider's
`wait` returns only once the status is `healthy`, so the probe interval is time lost between a
model being ready and everything that waits for it (the next instance on a shared card, the next
replica of a rolling upgrade, the router). Two ways to probe soon after readiness:

- Docker Engine 25 and later (API 1.44) have `start_interval`: probes at that interval while the
  container is `starting` within its start period, then at `interval` (Dockerfile reference,
  https://docs.docker.com/reference/dockerfile/#healthcheck, `--start-interval`, Docker Engine 25;
  the Engine API's version history, https://docs.docker.com/reference/api/engine/version-history/,
  and its `HealthConfig.StartInterval`, API 1.44, moby/moby#40894; moby daemon/health.go
  `monitor`, whose `getInterval` returns `StartInterval` only while the status is `starting`).
- Older engines store a container without `StartInterval` (checked with Debian's dockerd 20.10.24,
  /work/shared/DOMAIN.md), so there the short interval is `interval` itself, for the container's
  life. moby's monitor runs the next probe `interval` after the previous one ended
  (`intervalTimer.Reset` after the result), so a hung server, whose probes each last `timeout`, is
  marked unhealthy after `retries x (interval + timeout)`; `retries` is raised to keep that at
  least what it was with the 30 s interval. A server that refuses connections fails each probe at
  once: it is marked unhealthy after `retries x interval`, sooner than before (20 s, not 90 s).

The timing never depends on a live host: the engine is declared (`dockerEngine`), and the host
check stops `pulumi up` when the host runs an engine on the other side of version 25. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

START_INTERVAL_ENGINE = 25
"""The first Docker Engine major version with `start_interval`."""


@dataclass(frozen=True)
class ProbeTiming:
    interval_seconds: int
    retries: int
    start_interval_seconds: int | None
    """Set only for engines that keep it: an older engine drops it, and the provider would read back
    a health check other than the one sent (a diff on every preview)."""


def engine_major(version: str) -> int:
    """`"20.10"` -> 20, `"28.5.2"` -> 28."""
    return int(version.split(".")[0])


def has_start_interval(version: str) -> bool:
    return engine_major(version) >= START_INTERVAL_ENGINE


def probe_timing(engine: str, fast_seconds: int, interval_seconds: int, timeout_seconds: int, retries: int) -> ProbeTiming:
    """The probes of a container whose steady `interval_seconds`/`retries` are given, on `engine`,
    with `fast_seconds` the fleet's `healthStartIntervalSeconds` (0: today's probes unchanged)."""
    if fast_seconds == 0 or fast_seconds >= interval_seconds:
        return ProbeTiming(interval_seconds, retries, None)
    if has_start_interval(engine):
        return ProbeTiming(interval_seconds, retries, fast_seconds)
    hung = retries * (interval_seconds + timeout_seconds)
    return ProbeTiming(fast_seconds, -(-hung // (fast_seconds + timeout_seconds)), None)


def unhealthy_after_seconds(timing: ProbeTiming, timeout_seconds: int) -> tuple[int, int]:
    """How long after the start period a server that hangs, and one that refuses connections, is
    marked unhealthy: (retries x (interval + timeout), retries x interval)."""
    return timing.retries * (timing.interval_seconds + timeout_seconds), timing.retries * timing.interval_seconds
