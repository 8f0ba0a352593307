"""Planned containers on the simulated host, their /health asked every second instead of the
plan's interval (Docker's probe) and every GATE_POLL_SECONDS (the start gate's holder).

The plan probes a container's /health every 2 s on this machine's dockerd 20.10 (records/health.py;
every 30 s with `healthStartIntervalSeconds: 0`), and Docker runs the first probe one interval
after the start (moby daemon/health.go, `defaultProbeInterval`: "Also the time before the first
probe"). So a planned container turns `healthy` up to one interval after it serves. Likewise the
start gate's holder keeps a card's locks until its own /health answers, asking every
GATE_POLL_SECONDS, so a neighbour waiting for the card starts up to that long after the model
serves. What the simulated-host tests check is which container serves, in what order, on which
cards and ports: the same probes (command, timeout, start period, retries, the gate's locks and its
timeout), asked every second, reach the same verdicts sooner. benchmarks/time_to_serving.py
measures the planned probes themselves.
"""

from __future__ import annotations

import dataclasses

from records.command import START_GATE_NAME
from records.containers import GATE_POLL_SECONDS, ContainerSpec
from records.deployment import Deployment

PROBE_SECONDS = 1
GATE_POLL = f"sleep {GATE_POLL_SECONDS}; waited=$((waited + {GATE_POLL_SECONDS}))"
GATE_POLL_OFTEN = f"sleep {PROBE_SECONDS}; waited=$((waited + {PROBE_SECONDS}))"


def _gate_polled_often(text: str, gates: int) -> str:
    """`text` with each of its `gates` start gates asking /health every PROBE_SECONDS. Fails when
    the text has another count, so a change in the gate cannot leave a test waiting unnoticed."""
    assert text.count(GATE_POLL) == gates, f"expected {gates} start gate(s) polling {GATE_POLL!r}"
    return text.replace(GATE_POLL, GATE_POLL_OFTEN)


def probed_often(spec: ContainerSpec) -> ContainerSpec:
    """The spec with its health probed every PROBE_SECONDS, by Docker and by its start gate
    (if it has one); everything else as planned."""
    command = spec.command
    if START_GATE_NAME in command:
        gate = command.index(START_GATE_NAME) - 1
        command = (*command[:gate], _gate_polled_often(command[gate], 1), *command[gate + 1 :])
    healthcheck = dataclasses.replace(spec.healthcheck, interval_seconds=PROBE_SECONDS)
    return dataclasses.replace(spec, healthcheck=healthcheck, command=command)


def script_probed_often(script: str, containers: int) -> str:
    """A `render --format docker-run` script with each of its `containers` health-probed every
    PROBE_SECONDS, by Docker and by its start gate. Fails when the script does not have exactly that
    many planned intervals and gates, so a change in how render writes them cannot leave the test
    waiting unnoticed."""
    planned = [part for part in script.split() if part.startswith("--health-interval=")]
    assert len(planned) == containers, f"expected {containers} health intervals in the script, found {planned}"
    for flag in set(planned):
        script = script.replace(f" {flag} ", f" --health-interval={PROBE_SECONDS}s ")
    return _gate_polled_often(script, containers)


def probed_deployment(deployment: Deployment) -> Deployment:
    """The deployment with every model container's and proxy's health probed every PROBE_SECONDS, as
    `tests.support.sim_stacks.run_args` starts them: what doctor compares, since it compares the health check
    too. A proxy's record holds its host's very instance records (`records.disaggregated`), so it gets the
    probed ones."""

    def probed(record):
        return dataclasses.replace(record, spec=probed_often(record.spec))

    def host(hd):
        instances = {id(i): probed(i) for i in hd.instances}
        proxies = tuple(
            dataclasses.replace(probed(p), instances=tuple(instances.get(id(i), i) for i in p.instances)) for p in hd.proxies
        )
        return dataclasses.replace(
            hd, services=tuple(map(probed, hd.services)), members=tuple(map(probed, hd.members)),
            instances=tuple(instances.values()), proxies=proxies,
        )  # fmt: skip

    return dataclasses.replace(deployment, hosts=tuple(map(host, deployment.hosts)))
