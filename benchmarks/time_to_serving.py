"""Time to serving: from a container's start to its `healthy`, with today's and the new health probes.

Run as root where the simulated host can start (sim/, dockerd and sshd): `.venv/bin/python
benchmarks/time_to_serving.py [RUNS [CASE WORD...]]` (default 3 runs of every case). Stand-in models (sim/npu-sim) load in a fixed
NPU_SIM_LOAD_SECONDS (LOAD_SECONDS below) and then serve /health. Each step is the program's own:
containers exactly as `views.exports.render.docker_run_args` creates them from the deployment records (no
shortened probes, unlike tests/simhost/probes.py), each waited `healthy` before the next (the
docker provider's `wait`), in the plan's order. Three cases, each with `healthStartIntervalSeconds`
0 (today's 30 s probes) and 2 (the default), on this machine's engine only (Debian's dockerd
20.10.24: no `start_interval`, so the 2 s interval):

- one service alone (prod's bge-m3 on card 0);
- prod's shared card 0: bge-m3, then qwen-vl behind its start gate;
- a three-replica image upgrade through the real router (tests/simhost/test_rolling_upgrade.py's
  `Chain`: drain, stop, run, wait healthy, the serves step, replica after replica, and the router).

Per step: wasted = the moment Docker reports `health_status: healthy` (docker events) minus the
moment the stand-in serves (its "Starting vLLM API server" log line, docker logs -t), both from the
daemon's clock; and start to healthy. Medians over the runs.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from views.exports.render import docker_run_args  # noqa: E402
from records.containers import ContainerSpec  # noqa: E402
from records.router import ROUTER_OF_LABEL  # noqa: E402
from sim.host import IMAGE, SimHost  # noqa: E402
from tests.support.sim_stacks import prod_values_on_the_simulated_host  # noqa: E402
from sim.router_image import build_router_image  # noqa: E402
from tests.support.rolling import LOCAL_DOCKER, Chain, Stack, derived_image, values_of  # noqa: E402
from tests.support.pipeline import deployment_of  # noqa: E402

LOAD_SECONDS = 5
SETTINGS = {"today (30 s)": 0, "new (2 s)": 2}
SERVES = "Starting vLLM API server"


def _time(text: str) -> float:
    """An RFC 3339 time with nanoseconds (Docker's) as seconds since the epoch."""
    date, _, frac = text.rstrip("Z").partition(".")
    base = datetime.datetime.fromisoformat(date).replace(tzinfo=datetime.timezone.utc).timestamp()
    return base + float(f"0.{frac or 0}")


def measure(sim: SimHost, name: str) -> dict[str, float]:
    """A healthy container's start, serving and healthy moments, from the daemon."""
    info = json.loads(sim.docker("inspect", name).stdout)[0]
    started = _time(info["State"]["StartedAt"])
    out = sim.docker("logs", "-t", name)
    logs = out.stdout + out.stderr
    serves = min(_time(line.split()[0]) for line in logs.splitlines() if SERVES in line)
    events = sim.docker(
        "events", "--since", f"{started - 1:.3f}", "--until", f"{datetime.datetime.now().timestamp():.3f}",
        "--filter", f"container={info['Id']}", "--filter", "event=health_status", "--format", "{{.TimeNano}} {{.Status}}",
    ).stdout  # fmt: skip
    statuses = (line.split(" ", 1) for line in events.splitlines())
    healthy = min(int(t) / 1e9 for t, status in statuses if status.split()[-1] == "healthy")
    return {"wasted": healthy - serves, "start to healthy": healthy - started}


def create(sim: SimHost, spec: ContainerSpec) -> dict[str, float] | None:
    """Runs the container, waits for `healthy` (the provider's `wait`) and measures a model's at once:
    dockerd keeps only its last 256 events, and every probe makes three (an exec's). A router serves
    no model: not measured."""
    sim.docker("run", *docker_run_args(spec))
    sim.wait_healthy(spec.name, timeout=spec.start_timeout_seconds)
    return None if ROUTER_OF_LABEL in spec.labels else measure(sim, spec.name)


def prod_values(sim: SimHost, fast: int, services: tuple[str, ...]) -> dict:
    values = prod_values_on_the_simulated_host(sim)
    values["defaults"]["env"] = {"NPU_SIM_LOAD_SECONDS": str(LOAD_SECONDS)}
    values["defaults"]["startTimeoutSeconds"] = 300
    values["services"] = [s for s in values["services"] if s["name"] in services]
    return {**values, "healthStartIntervalSeconds": fast}


def in_order(sim: SimHost, fast: int, services: tuple[str, ...]) -> list[dict[str, float]]:
    """The services created one after another in the plan's order, each waited healthy."""
    deployment = deployment_of(prod_values(sim, fast, services), "prod")
    (hd,) = deployment.hosts
    for sd in hd.services:
        sim.make_model(sd.plan.service.model)
    for card in hd.shared_cards:
        sim.set_device_share(card)
    order = sorted(hd.services, key=lambda sd: len(sd.after))  # a card's chain: each after the ones before it
    try:
        return [create(sim, sd.spec) for sd in order]
    finally:
        sim.reset()


class Unshortened(Chain):
    """The rolling upgrade's steps with the planned probes, not the tests' one-second ones; `created`
    holds each replica's measurement, in the order they were created."""

    def create(self, spec: ContainerSpec, image: str) -> None:
        measured = create(self.sim, dataclasses.replace(spec, image=image))
        if measured is not None:
            self.created.append(measured)


def revision(sim: SimHost, image: str, fast: int) -> Stack:
    """The replicated stack with `image` and `fast`, its router's image built (or found)."""
    values = values_of(sim, image)
    values["defaults"]["env"] = {"NPU_SIM_LOAD_SECONDS": str(LOAD_SECONDS)}
    stack = Stack.of({**values, "healthStartIntervalSeconds": fast})
    build_router_image(LOCAL_DOCKER, stack.router.base_image)
    return stack


def rolling(sim: SimHost, fast: int) -> list[dict[str, float]]:
    """Three replicas and their router deployed, then upgraded to a new image, with `fast`."""
    chain = Unshortened(sim)
    chain.created = []
    sim.make_model("/srv/models/emb")
    try:
        chain.up(revision(sim, IMAGE, 2))  # the first deploy only sets the stage: with the fast probes
        chain.created = []
        chain.up(revision(sim, derived_image("ascend-fleet/npu-sim:v2"), fast))
        return chain.created
    finally:
        sim.reset()


CASES = {
    "single service": lambda sim, fast: in_order(sim, fast, ("bge-m3",)),
    "prod card 0 (2 in order)": lambda sim, fast: in_order(sim, fast, ("bge-m3", "qwen-vl")),
    "3-replica rolling upgrade": rolling,
}


def main(runs: int, only: list[str]) -> None:
    rows = []
    with SimHost() as sim:
        for case, run in CASES.items():
            if only and not any(word in case for word in only):
                continue
            for label, fast in SETTINGS.items():
                results = [run(sim, fast) for _ in range(runs)]
                wasted = [statistics.median(r[i]["wasted"] for r in results) for i in range(len(results[0]))]
                total = [statistics.median(r[i]["start to healthy"] for r in results) for i in range(len(results[0]))]
                rows.append((case, label, wasted, total))
                print(f"{case}, {label}: wasted per step {[round(w, 1) for w in wasted]} s", flush=True)
    print(f"\n| case | probes | wasted per step (s, median of {runs}) | start to healthy per step (s) |")
    print("|---|---|---|---|")
    for case, label, wasted, total in rows:
        print(f"| {case} | {label} | {', '.join(f'{w:.1f}' for w in wasted)} | {', '.join(f'{t:.1f}' for t in total)} |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3, sys.argv[2:])
