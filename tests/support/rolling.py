"""A replicated service on the simulated host, rolled the program's way: the stack, the chain of
containers and serves steps in the order the mocked program registers them, and a watch on the
router's traffic. Shared by the simulated-host upgrade test, the engine suite and time_to_serving."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import threading
import time
import urllib.error
import urllib.request

from components.router import SERVES_SUFFIX
from views.exports.render import docker_run_args
from records.containers import ContainerSpec
from records.deployment import Deployment, RouterDeployment
from sim.host import CLAIMS_DIR, DOCKER_SOCKET, IMAGE, SimHost
from tests.simhost.probes import probed_often
from tests.support.pulumi_harness import CONTAINER, Registration, REMOTE_COMMAND, run_program
from tests.support.pipeline import deployment_of

SERVICE = "emb"
# The observers read the daemon through its local socket: they watch, they do not deploy.
LOCAL_DOCKER = ["docker", "-H", f"unix://{DOCKER_SOCKET}"]
STACK = "rolling-on-sim"
REPLICAS = 3


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
        return cls(deployment_of(values, STACK), tuple(_dependency_order(mine)))

    @property
    def router(self) -> RouterDeployment:
        (rd,) = self.deployment.routers
        return rd

    def spec(self, name: str) -> ContainerSpec:
        return self.router.spec if name == self.router.name else next(
            sd.spec for sd in self.deployment.services() if sd.name == name
        )


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
