"""The real vllm-router in front of stand-in replicas on loopback addresses: the fleet's deployment
on free ports, the processes, and the requests the failover tests and failover_bench send."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from records.deployment import Deployment
from records.rollout import WORKERS_ENV
from sim.host import free_port
from tests.support.pipeline import deployment_of
from tests.support.waits import wait_for

MODEL = "bge"
ROOT = Path(__file__).resolve().parents[2]
ADDRESSES = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


def stack(replicas: int = 3, api_base: int | None = None) -> Deployment:
    """`router_deployment` from `api_base` (by default free ports), its ports where asked."""
    api_base = free_block() if api_base is None else api_base
    deployment = router_deployment(replicas, api_base)
    assert ports_kept(deployment, api_base), f"asked for {api_base}: {planned_ports(deployment)}"
    return deployment


class Fleet:
    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        (self.router,) = deployment.routers
        where = {ps.name: (hp.host.address, ps.assignment.api_port) for hp, ps in deployment.plan.services()}
        self.replicas = {sd.name: Replica(sd.name, *where[sd.name]) for sd in self.router.replicas}
        self.process: subprocess.Popen | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.router.plan.port}"

    def start_router(self, workers_file: Path) -> None:
        """The router container's own command, as Docker runs it: sh reads the worker file the
        deployment writes (here `workers_file`) and execs the real vllm-router."""
        env = {**os.environ, **self.router.spec.env, WORKERS_ENV: str(workers_file),
               "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # fmt: skip
        argv = list(self.router.spec.command)
        log = workers_file.with_name("router.log")
        with log.open("wb") as out:
            self.process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        process = self.process

        def ready() -> bool:
            if process.poll() is not None:  # vllm-router panics on a port it cannot bind
                raise AssertionError(f"vllm-router exited {process.returncode}: {log.read_text()[-2000:]}")
            return get(f"{self.base}/readiness", 1)[0] == 200

        wait_for("the router to be ready", ready)
        cmdline = Path(f"/proc/{self.process.pid}/cmdline").read_bytes()
        assert not cmdline.startswith(b"sh\0"), "sh execs vllm-router, which keeps its process (PID 1 in Docker)"

    def workers(self) -> dict[str, bool]:
        return {w["url"]: w["is_healthy"] for w in json.loads(get(f"{self.base}/workers")[1])["workers"]}

    def stop(self) -> None:
        for p in [self.process, *(r.process for r in self.replicas.values())]:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()


def traffic(f: Fleet, rounds: int) -> list[tuple[str, int]]:
    """Every kind of request a client sends through the router: (what, status) of each."""
    out = []
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(rounds):
        out.append(("chat", post(f"{f.base}/v1/chat/completions", chat)[0]))
        status, body = post(f"{f.base}/v1/chat/completions", {**chat, "stream": True})
        out.append(("stream", status if body.rstrip().endswith(b"data: [DONE]") else -1))
        out.append(("embeddings", post(f"{f.base}/v1/embeddings", {"model": MODEL, "input": "hi"})[0]))
        status, body = get(f"{f.base}/v1/models")
        out.append(("models", status if status != 200 or json.loads(body)["data"][0]["id"] == MODEL else -1))
    return out


def free_block() -> int:
    """An `apiBase` for the test's fleet (`router_deployment`) whose every port, as planned, is free on
    every replica address right now, away from any other run's on this machine (another checkout
    running this module, say), and where the plan keeps the API ports: it moves one asked for
    where its own ports lie, such as HCCL's default 60000-60031 (`ports.reserved`), and the
    kernel hands out free ports up to 60999."""
    for _ in range(100):
        base = free_port()
        deployment = router_deployment(3, base)
        if not ports_kept(deployment, base):
            continue
        with contextlib.ExitStack() as bound:
            try:
                for port, address in itertools.product(sorted(fleet_ports(deployment)), ADDRESSES):
                    bound.enter_context(socket.socket()).bind((address, port))
            except OSError:
                continue
            return base
    raise AssertionError(f"no free ports for the test's fleet on {ADDRESSES}")


def router_deployment(replicas: int, api_base: int) -> Deployment:
    """The plan's deployment of `replicas` replicas, one per loopback host, asking for the API
    ports from `api_base`."""
    values = {
        "hosts": [{"name": f"lo-{i}", "address": f"127.0.0.{i}"} for i in (1, 2, 3)],
        "services": [{"name": MODEL, "model": "/m/bge", "memoryFraction": 0.1, "replicas": replicas,
                      "router": {"policy": "round_robin"}}],
        "ports": {"apiBase": api_base},
        "metrics": {"npuExporterPort": api_base + 2, "scrapeIntervalSeconds": 1},
    }  # fmt: skip
    return deployment_of(values, "e2e")


def planned_ports(deployment: Deployment) -> tuple[set[int], int]:
    """The replicas' API ports and the router's port, as planned."""
    (router,) = deployment.routers
    return {ps.assignment.api_port for _, ps in deployment.plan.services()}, router.plan.port


def ports_kept(deployment: Deployment, api_base: int) -> bool:
    """Whether the plan gave the replicas `api_base` and the router the next port, as asked."""
    return planned_ports(deployment) == ({api_base}, api_base + 1)


def get(url: str, timeout: float = 5) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def post(url: str, body: dict, timeout: float = 30) -> tuple[int, bytes]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


class Replica:
    """One stand-in `vllm serve` process at a replica's planned address and port."""

    def __init__(self, name: str, address: str, port: int) -> None:
        self.name, self.address, self.port = name, address, port
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    def start(self) -> None:
        argv = [sys.executable, str(ROOT / "tests/fake_vllm.py"), "--host", self.address, "--port", str(self.port),
                "--served-model-name", MODEL, "--replica", self.name]  # fmt: skip
        self.process = subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": str(ROOT)})
        wait_for(f"{self.name} to listen", lambda: get(f"{self.url}/health", 1)[0] == 200, every=0.1)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def served(self) -> int:
        """Requests this process served, from its own /metrics."""
        for line in get(f"{self.url}/metrics")[1].decode().splitlines():
            if line.startswith("vllm:request_success_total{"):
                return int(float(line.rsplit(" ", 1)[1]))
        raise AssertionError(f"{self.name}: no vllm:request_success_total in /metrics")


def fleet_ports(deployment: Deployment) -> set[int]:
    """Every port the test's fleet listens on: the replicas' API ports, the router's API and
    Prometheus ports, and the NPU exporters'."""
    (router,) = deployment.routers
    api_ports, router_port = planned_ports(deployment)
    return {*api_ports, router_port, router.plan.metrics_port, deployment.plan.fleet.metrics.npu_exporter_port}
