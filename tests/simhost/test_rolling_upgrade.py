"""A rolling image upgrade of a replicated service on the simulated host, through its real router.

Three replicas of one service on three cards of the simulated host, and its router: the real
vllm-router 0.1.17 in the stand-in router image (sim/router_image.py; on a real host the
program's build script makes that image, here it finds the tag and skips the build). Every
step is the program's own: the deployment records (`records.deployment.deploy`), the
containers as `views.exports.render.docker_run_args` creates them, the router's build and workers
scripts and each replica's serve and drain scripts (`records.rollout`), run over SSH on
the host as the program's commands run them. The order is the program's own: the real
`__main__.py` runs under Pulumi's mocks (tests/pulumi_harness.py) and its resources for the
router and the replicas are taken in the order of their dependencies; the graph must leave
one container or serves step ready at a time, or the engine would run them together. It
gives, for a first deploy and for an image upgrade (every replica and the router replaced):
the router's build and workers scripts (they depend only on the image, so they may run
first); replica 1's container; the router's container (after replica 1); replica 1's serves
step; replica 2's container (after that step); its serves step; and so on. A replacement
deletes before it creates, and first deletes the dependant replaced with it, the replica's
old serves step, whose `delete` is the drain: drain, `docker stop` with the grace period,
`docker rm`, `docker run` from the new image, waited healthy (the provider's `wait`), then
the serves step that re-registers the replica.

Meanwhile one thread sends `GET /v1/models` through the router's published port every 0.2 s
(the route the npu-sim `vllm` serves; vllm-router does not retry it, so a request routed to a
replica that is going down fails: the drain is what keeps them succeeding) and another samples
the replicas' state. Timings are printed (`pytest -s`); no assert depends on them. The
containers' health is probed every second instead of the plan's 30 s (tests/simhost/probes.py):
the waits for `healthy` end sooner, and what is checked (the order, the drain, one replica down
at a time) is the same.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from allocation.config import parse_fleet
from records.containers import ContainerSpec
from records.deployment import Deployment, RouterDeployment, deploy
from allocation.planner import plan_fleet
from records.rollout import workers_dir
from views.exports.render import docker_run_args
from sim.host import CLAIMS_DIR, DOCKER_SOCKET, IMAGE, ContainerFailed, SimHost
from components.router import SERVES_SUFFIX
from sim.router_image import build_router_image
from tests.pulumi_harness import CONTAINER, REMOTE_COMMAND, Registration, run_program
from tests.simhost.probes import probed_often

pytestmark = pytest.mark.simhost

STACK = "rolling-on-sim"
SERVICE = "emb"
REPLICAS = 3
NEW_IMAGE = "ascend-fleet/npu-sim:v2"
BROKEN_IMAGE = "ascend-fleet/npu-sim:broken"
# The observers read the daemon through its local socket: they watch, they do not deploy.
LOCAL_DOCKER = ["docker", "-H", f"unix://{DOCKER_SOCKET}"]


def derived_image(tag: str, *lines: str) -> str:
    """A new release of the service image: the npu-sim image plus `lines`, so a new image id."""
    dockerfile = f"FROM {IMAGE}\nLABEL ascend-fleet.test.release={tag}\n" + "".join(f"{line}\n" for line in lines)
    subprocess.run([*LOCAL_DOCKER, "build", "-q", "-t", tag, "-"], input=dockerfile, text=True, check=True,
                   capture_output=True, env={"DOCKER_BUILDKIT": "0", "PATH": "/usr/bin:/bin"})  # fmt: skip
    return tag


def host_address(sim: SimHost) -> str:
    """The host as its containers reach it (their default gateway): the router reaches its workers
    there, as a router on a real host reaches them at the host's address."""
    route = sim.docker("run", "--rm", "--network", "bridge", "--entrypoint", "ip", IMAGE, "route").stdout
    return next(line.split()[2] for line in route.splitlines() if line.startswith("default via "))


def values_of(sim: SimHost, image: str) -> dict:
    return {
        "hosts": [{"name": "sim-910b", "address": host_address(sim), "sshPort": sim.ssh_port}],
        "defaults": {
            "image": image,
            "startTimeoutSeconds": 120,
            # The replicas' loads never overlap a neighbour's here: the simulator's shortest load will do.
            "env": {"NPU_SIM_LOAD_SECONDS": "1"},
            "mounts": [{"source": str(CLAIMS_DIR), "target": str(CLAIMS_DIR), "readOnly": False}],
        },
        "services": [{"name": SERVICE, "model": "/srv/models/emb", "memoryFraction": 0.2, "replicas": REPLICAS,
                      "router": {"policy": "round_robin"}}],
    }  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Stack:
    """One revision of the stack: its deployment records, and the Pulumi program's own resources for
    the router and its replicas (run under the mocks) in an order their dependencies allow."""

    deployment: Deployment
    resources: tuple[Registration, ...]

    @classmethod
    def of(cls, values: dict) -> Stack:
        run = run_program(STACK, values)
        mine = [r for r in run.registrations if r.type in (CONTAINER, REMOTE_COMMAND) and r.name.startswith(f"{SERVICE}-")]
        return cls(deploy(plan_fleet(parse_fleet(STACK, values))), tuple(_dependency_order(mine)))

    @property
    def router(self) -> RouterDeployment:
        (rd,) = self.deployment.routers
        return rd

    def spec(self, name: str) -> ContainerSpec:
        return self.router.spec if name == self.router.name else next(
            sd.spec for sd in self.deployment.services() if sd.name == name
        )


def _dependency_order(resources: list[Registration]) -> list[Registration]:
    """The resources in an order the engine may run them: each after everything it depends on. The
    router's image and worker scripts depend on nothing else here and run first; of the containers and
    serves steps, the graph must leave one ready at a time, or the engine would run them in parallel
    (as it did before the chain: all replicas down at once)."""
    urns = {r.urn for r in resources}
    done: set[str] = set()
    order = []
    while len(order) < len(resources):
        ready = [r for r in resources if r.urn not in done and urns & set(r.dependencies) <= done]
        scripts = [r for r in ready if r.type == REMOTE_COMMAND and not r.name.endswith(SERVES_SUFFIX)]
        assert scripts or len(ready) == 1, f"run together by the engine: {[r.name for r in ready]}"
        step = (scripts or ready)[0]
        order.append(step)
        done.add(step.urn)
    return order


class Chain:
    """The Pulumi program's steps for one router and its replicas, run on the simulated host: each
    resource by what its deployment record says (and the program registered the same), in the order
    of the program's dependencies."""

    def __init__(self, sim: SimHost) -> None:
        self.sim = sim
        self.events: list[tuple[float, str]] = []
        self.stack: Stack | None = None
        self.router_image = ""

    def mark(self, what: str) -> float:
        now = time.monotonic()
        self.events.append((now, what))
        return now

    def script(self, text: str) -> subprocess.CompletedProcess:
        """A command resource: the script run by a shell on the host over SSH."""
        return self.sim.run(text, check=False, timeout=600)

    def create(self, spec: ContainerSpec, image: str) -> None:
        """A docker.Container with `wait`: created, then waited healthy for its start timeout."""
        self.sim.docker("run", *docker_run_args(probed_often(dataclasses.replace(spec, image=image))))
        self.sim.wait_healthy(spec.name, timeout=spec.start_timeout_seconds)

    def delete(self, spec: ContainerSpec) -> None:
        """The provider's delete: stop with the grace period, then remove."""
        self.sim.docker("stop", "--time", str(spec.stop_grace_seconds), spec.name, timeout=spec.stop_grace_seconds + 60)
        self.sim.docker("rm", "-f", spec.name)

    def up(self, new: Stack) -> None:
        """`pulumi up` to `new`: every resource of the router and its replicas created, or, when a
        previous revision runs, replaced (an image change replaces them all). Replacements delete
        before they create (`delete_before_replace`), and the dependant that is replaced with a
        container (its serves step, by its triggers) is deleted first, which runs its drain (pulumi/pulumi
        pkg/resource/deploy/step_generator.go `calculateDependentReplacements`: the dependants a
        delete-before-replace would replace are deleted before it).
        Raises at the first step that fails, as `pulumi up` stops there."""
        old, self.stack = self.stack, new
        rd = new.router
        for resource in new.resources:
            name, inputs = resource.name, resource.inputs
            if resource.type == REMOTE_COMMAND:
                assert inputs["create"] in (rd.build_script, rd.workers_script, *(h.serve_script for h in rd.handovers))
                ran = self.script(inputs["create"])
                assert ran.returncode == 0, f"{name}: {ran.stderr}"
                if name.endswith("-image"):
                    self.router_image = ran.stdout.split()[-1]
                elif name.endswith(SERVES_SUFFIX):
                    self.mark(f"{name.removesuffix(SERVES_SUFFIX)} serves")
                continue
            spec = new.spec(inputs["name"])
            assert inputs["command"] == list(spec.command) and resource.delete_before_replace
            image = self.router_image if spec.name == rd.name else spec.image
            if old is not None:
                self.mark(f"{spec.name} down")
                step = next((r for r in old.resources if r.name == f"{spec.name}{SERVES_SUFFIX}"), None)
                if step is not None:
                    drained = self.script(step.inputs["delete"])
                    assert drained.returncode == 0, drained.stderr
                self.delete(old.spec(spec.name))
            self.create(spec, image)  # raises ContainerFailed for an image that never serves
            self.mark(f"{spec.name} up")


@dataclasses.dataclass
class Watch:
    """Requests through the router and samples of the replicas' state, every 0.2 s, until stopped."""

    router_port: int
    replicas: list[str]
    requests: list[tuple[float, float, int | str]] = dataclasses.field(default_factory=list)
    """(start, end, HTTP status or the error's name) of each request."""
    samples: list[tuple[float, dict[str, str]]] = dataclasses.field(default_factory=list)
    """(time, replica -> docker status) of each sample."""
    stopped: threading.Event = dataclasses.field(default_factory=threading.Event)

    def __enter__(self) -> Watch:
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self._send, self._sample)]
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        for t in self.threads:
            t.join(30)

    def _send(self) -> None:
        url = f"http://127.0.0.1:{self.router_port}/v1/models"
        while not self.stopped.wait(0.2):
            start = time.monotonic()
            try:
                with urllib.request.urlopen(url, timeout=10) as r:
                    ok = r.status == 200 and json.loads(r.read())["data"][0]["id"] == SERVICE
                    result: int | str = 200 if ok else "wrong answer"
            except urllib.error.HTTPError as err:
                result = err.code
            except (OSError, ValueError) as err:
                result = type(err).__name__
            self.requests.append((start, time.monotonic(), result))

    def _sample(self) -> None:
        ps = [*LOCAL_DOCKER, "ps", "-a", "--filter", f"name=^{SERVICE}-", "--format", "{{.Names}}\t{{.Status}}"]
        while not self.stopped.wait(0.2):
            out = subprocess.run(ps, capture_output=True, text=True).stdout
            status = dict(line.split("\t", 1) for line in out.splitlines())
            self.samples.append((time.monotonic(), {r: status.get(r, "absent") for r in self.replicas}))

    def sent_at_least(self, count: int, timeout: float = 300) -> None:
        """Wait until `count` requests went out (however slowly a loaded machine sends them)."""
        deadline = time.monotonic() + timeout
        while len(self.requests) < count:
            assert time.monotonic() < deadline, f"only {len(self.requests)} requests sent in {timeout:.0f}s"
            time.sleep(0.2)

    def down(self) -> list[tuple[float, list[str]]]:
        """Per sample, the replicas not running healthy."""
        return [(t, [r for r, s in state.items() if not (s.startswith("Up") and "(healthy)" in s)])
                for t, state in self.samples]  # fmt: skip


@pytest.fixture(scope="module")
def chain(sim_host_session: SimHost) -> Iterator[Chain]:
    """The stack running on the simulated host with the npu-sim image, deployed once for this
    module: each test rolls it to a new image from whatever revision runs (they pass in any order)."""
    sim = sim_host_session
    made = not Path(workers_dir(f"{SERVICE}-router")).exists()
    try:
        sim.make_model("/srv/models/emb")
        running = Chain(sim)
        running.up(revision(sim, IMAGE))
        yield running
    finally:
        # The router is a descendant of the npu-sim image, so `reset` removes it with the replicas.
        sim.reset()
        if made:
            shutil.rmtree(workers_dir(f"{SERVICE}-router"), ignore_errors=True)


def revision(sim: SimHost, image: str) -> Stack:
    """The stack with `image`, its router's image built (or found)."""
    stack = Stack.of(values_of(sim, image))
    build_router_image(LOCAL_DOCKER, stack.router.base_image)
    return stack


def replicas(chain: Chain) -> list[str]:
    """The running replicas' names in their chain's order."""
    return [h.replica for h in chain.stack.router.handovers]


def test_an_image_upgrade_rolls_one_replica_at_a_time_and_requests_keep_succeeding_through_the_router(chain, capsys):
    sim, names = chain.sim, replicas(chain)
    new = revision(sim, derived_image(NEW_IMAGE))
    router = new.router
    assert router.spec.image != chain.stack.router.spec.image, "a new service image is a new router image"

    with Watch(router.plan.port, names) as watch:
        watch.sent_at_least(5)
        start = chain.mark("upgrade starts")
        chain.up(new)
        end = chain.mark("upgrade done")
        watch.sent_at_least(len(watch.requests) + 5)

    # Every replica and the router run the new release, and the router serves through all of them.
    for name in [*names, router.name]:
        assert sim.state(name)["Running"] is True
    running = sim.docker("inspect", "-f", "{{.Config.Image}}", *names).stdout.split()
    assert running == [NEW_IMAGE] * REPLICAS
    workers = json.loads(sim.run(f"wget -q -O - http://127.0.0.1:{router.plan.port}/workers").stdout)["workers"]
    assert {w["url"]: w["is_healthy"] for w in workers} == dict.fromkeys(router.workers, True)

    # At most one replica down at any sample, and each of them seen down once (the watch can see it).
    down = watch.down()
    assert [(t - start, d) for t, d in down if len(d) > 1] == []
    assert {r for _, d in down for r in d} == set(names)

    # Every request succeeded, but while the router itself was replaced (docs/replicas.md: "The router itself
    # restarts once during an image change of its service, after replica 1 ... a few seconds in
    # which the endpoint refuses connections"): there a request may only fail to connect.
    events = {what: t for t, what in chain.events if t >= start}
    router_down, router_up = events[f"{router.name} down"], events[f"{router.name} up"]
    failed = [(s, e, result) for s, e, result in watch.requests if result != 200]
    outside = [(s - start, result) for s, e, result in failed if e < router_down or s > router_up]
    assert outside == [], "a request failed while the router was up: a replica went down undrained"
    assert {result for _, _, result in failed} <= {"URLError", "ConnectionResetError", "RemoteDisconnected"}
    # ...and the watch did look: requests went out while each replica was replaced.
    for n in names:
        sent = [s for s, _, _ in watch.requests if events[f"{n} down"] <= s <= events[f"{n} serves"]]
        assert sent, f"no request sent while {n} was replaced"

    per_replica = [round(events[f"{n} serves"] - events[f"{n} down"], 1) for n in names]
    refused = f"{failed[-1][1] - failed[0][0]:.1f}s" if failed else "never"
    worst = max(len(d) for _, d in down)
    with capsys.disabled():
        print(
            f"\nrolling upgrade of {REPLICAS} replicas: {end - start:.1f}s in all; per replica (drain to serving "
            f"again) {per_replica}s; router replaced in {router_up - router_down:.1f}s, refusing connections "
            f"for {refused}; {len(watch.requests)} requests, {len(failed)} failed, all while the router was "
            f"replaced; {len(watch.samples)} samples, at most {worst} replica down (min healthy {REPLICAS - worst})"
        )


def test_a_new_image_that_never_serves_stops_the_rollout_at_its_replica_while_the_others_keep_serving(chain, capsys):
    sim, names = chain.sim, replicas(chain)
    broken = derived_image(
        BROKEN_IMAGE,
        # A release whose vllm dies at start, as one with a broken dependency does.
        "RUN printf '#!/bin/sh\\necho \"ImportError: libascend_hal.so: cannot open shared object file\" >&2\\nexit 1\\n'"
        " > /usr/local/bin/vllm",
    )
    new = revision(sim, broken)
    router = chain.stack.router.name
    before = {n: sim.docker("inspect", "-f", "{{.Id}}", n).stdout.strip() for n in [*names, router]}

    with Watch(new.router.plan.port, names) as watch:
        start = chain.mark("upgrade starts")
        with pytest.raises(ContainerFailed) as failure:
            chain.up(new)
        end = chain.mark("upgrade stopped")
        watch.sent_at_least(len(watch.requests) + 10)

    assert failure.value.args[0].startswith(f"{names[0]} ")
    assert "ImportError: libascend_hal.so" in sim.logs(names[0])
    # The chain stopped at replica 1: replicas 2 and 3 and the router are the containers they were.
    after = {n: sim.docker("inspect", "-f", "{{.Id}}", n).stdout.strip() for n in before if n != names[0]}
    assert after == {n: i for n, i in before.items() if n != names[0]}
    assert all(sim.state(n)["Running"] for n in after)
    down = watch.down()
    assert {r for _, d in down for r in d} == {names[0]}, "only the replica with the new image went down"
    failed = [(s - start, result) for s, _, result in watch.requests if result != 200]
    assert failed == [], "the drained replica took no request: the others served them all"
    assert [s for s, _, _ in watch.requests if s > end], "requests went on after the rollout stopped"
    with capsys.disabled():
        print(
            f"\nbroken image: rollout stopped at {names[0]} after {end - start:.1f}s; {len(watch.requests)} "
            f"requests through the router, {len(failed)} failed; {REPLICAS - 1} replicas served throughout"
        )
