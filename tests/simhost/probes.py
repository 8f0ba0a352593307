"""Planned containers on the simulated host, their health probed every second instead of every 30 s.

The plan probes a container's /health every 30 s (records/containers.py), and Docker runs the
first probe one interval after the start (moby daemon/health.go, `defaultProbeInterval`: "Also
the time before the first probe"; the `--health-start-interval` that would probe sooner during the
start period needs Docker 25, this machine's dockerd is 20.10). So a planned container turns
`healthy` about 30 s after it serves, and a test that starts the prod layout a few times waited
minutes for nothing. What the simulated-host tests check is which container serves, in what
order, on which cards and ports: the same probe command, timeout, start period and retries, run
every second, reach the same verdicts sooner. The start gate's own wait for /health (in the
container's command) is untouched.
"""

from __future__ import annotations

import dataclasses

from records.containers import ContainerSpec

PROBE_SECONDS = 1


def probed_often(spec: ContainerSpec) -> ContainerSpec:
    """The spec with its health probed every PROBE_SECONDS; everything else as planned."""
    return dataclasses.replace(spec, healthcheck=dataclasses.replace(spec.healthcheck, interval_seconds=PROBE_SECONDS))


def script_probed_often(script: str, containers: int) -> str:
    """A `render --format docker-run` script with each of its `containers` health-probed every
    PROBE_SECONDS. Fails when the script does not have exactly that many planned intervals, so a
    change in how render writes them cannot leave the test waiting 30 s unnoticed."""
    planned = [part for part in script.split() if part.startswith("--health-interval=")]
    assert len(planned) == containers, f"expected {containers} health intervals in the script, found {planned}"
    for flag in set(planned):
        script = script.replace(f" {flag} ", f" --health-interval={PROBE_SECONDS}s ")
    return script
