"""End to end on loopback: replicas, the real vLLM router and a real Prometheus, as the plan renders them.

Three stand-in vLLM servers (tests/fake_vllm.py) listen where the plan puts the three replicas
(hosts 127.0.0.1-3, one per replica), the real `vllm-router` (PyPI, pinned in requirements-dev.txt)
runs with exactly the argv of the plan's router container, and Debian's `prometheus` scrapes the
targets `render --format prometheus` writes. Nothing here is a model: what is real is the router's
balancing, retries and health checks, and Prometheus' reading of our files, labels and rules.

Timings follow the plan's router flags (health checks every 10 s, 3 failures to mark a worker
down, 2 successes to bring it back; vllm-router's defaults for the rest, such as its circuit
breaker's 60 s), so a failover and a rejoin take a minute or two: the test waits for them
instead of shortening the flags, so what is tested is what is deployed. Every wait polls for its
condition with a bound of minutes (tests/support/waits.py), far above what it takes on an idle machine, and
no assert counts on an even spread within a fixed number of requests: on a loaded machine a health
check may time out and take a replica out for a while. How long a failover takes is measured by
benchmarks/failover_bench.py, not asserted here.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cli.safe_write import write_set
from views.exports import prometheus
from ops.doctor.facts import HostFacts
from ops.doctor.findings import host_findings
from records import rollout
from views.exports.metric_names import NPU
from sim.host import free_port
from tests.conftest import live_container, require_binary
from tests.support.router_fleet import ADDRESSES, MODEL, Fleet, Replica, free_block, get, router_deployment, stack, traffic
from tests.support import router_fleet
from tests.support.waits import wait_for

ROUNDS = 10  # rounds of traffic (3 posts each) within which a healthy replica must serve


class NpuExporter(ThreadingHTTPServer):
    """A host's NPU exporter as MindCluster's serves it: npu_chip_info_* per card, label `id`."""

    def __init__(self, address: str, port: int) -> None:
        body = "".join(
            f'{NPU.hbm_used}{{id="{c}",model_name="Ascend910B3"}} {30000 + c}\n'
            f'{NPU.hbm_total}{{id="{c}",model_name="Ascend910B3"}} 65536\n'
            f'{NPU.utilization}{{id="{c}",model_name="Ascend910B3"}} 40\n'
            f'{NPU.health}{{id="{c}",model_name="Ascend910B3"}} 1\n'
            for c in range(8)
        ).encode()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__((address, port), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Iterator[Fleet]:
    f = Fleet(stack())
    try:
        for replica in f.replicas.values():
            replica.start()
        workers = tmp_path_factory.mktemp("router") / "workers"
        workers.write_text("".join(f"{url}\n" for url in f.router.workers))
        f.start_router(workers)
        # Ready means one worker is healthy; the tests start from all three in rotation.
        wait_for("every replica healthy in the router", lambda: f.workers() == dict.fromkeys(f.router.workers, True))
        yield f
    finally:
        f.stop()


def test_a_free_block_is_never_one_the_plan_would_move_the_api_port_out_of(monkeypatch):
    """A flake under load: the kernel handed out 60001, the plan moved the router to 60033 (past
    its reserved and HCCL windows) and the test's api_base + 1 no longer named it."""
    offered = iter([60001, 40000])
    monkeypatch.setattr(router_fleet, "free_port", lambda: next(offered))
    assert free_block() == 40000
    deployment = stack(api_base=40000)
    assert deployment.routers[0].plan.port == 40001


def test_a_free_block_leaves_every_port_of_the_fleet_free_the_routers_metrics_port_too(monkeypatch):
    """A flake: the router's Prometheus port (the one after the NPU exporters') was not among the
    ports checked free; when it was taken, vllm-router panicked at start and the test waited out
    its bound for a router that had exited."""
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    taken = busy.getsockname()[1]
    offered = iter([taken - 3, 40000])
    monkeypatch.setattr(router_fleet, "free_port", lambda: next(offered))
    with busy:
        assert router_deployment(3, taken - 3).routers[0].plan.metrics_port == taken
        assert free_block() == 40000


def test_a_router_that_cannot_start_fails_the_wait_at_once_with_its_own_words(tmp_path):
    """The real vllm-router with its Prometheus port taken panics ("failed to install Prometheus
    metrics exporter"); the harness says so as soon as the process is gone."""
    fleet = Fleet(stack())
    workers = tmp_path / "workers"
    workers.write_text("".join(f"{url}\n" for url in fleet.router.workers))
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", fleet.router.plan.metrics_port))
        busy.listen()
        try:
            with pytest.raises(AssertionError, match="Address already in use"):  # not "timed out after"
                fleet.start_router(workers)
        finally:
            fleet.stop()


def test_requests_of_every_kind_pass_and_spread_over_the_replicas(fleet):
    before = {name: r.served() for name, r in fleet.replicas.items()}
    results: list[tuple[str, int]] = []

    def every_replica_served():
        results.extend(traffic(fleet, 1))
        return all(r.served() > before[name] for name, r in fleet.replicas.items())

    # round_robin: each replica serves within a few rounds (one, when all three stay healthy).
    wait_for("every replica to serve a request", every_replica_served, every=0)
    assert [r for r in results if r[1] != 200] == []
    gained = {name: r.served() - before[name] for name, r in fleet.replicas.items()}
    posted = sum(1 for what, _ in results if what != "models")
    assert sum(gained.values()) == posted, "every posted request served once, by one replica"


def test_prometheus_scrapes_every_target_with_the_plans_labels_and_joins_cards_to_services(fleet, tmp_path):
    binary = require_binary("prometheus", "prometheus")
    exporters = [NpuExporter(address, fleet.deployment.plan.fleet.metrics.npu_exporter_port) for address in ADDRESSES]
    prometheus_port = free_port()
    out = tmp_path / "prometheus"
    write_set(out, prometheus.files(fleet.deployment))
    argv = [binary, f"--config.file={out / prometheus.CONFIG}", f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{prometheus_port}"]  # fmt: skip
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api = f"http://127.0.0.1:{prometheus_port}/api/v1"
    try:

        def targets():
            active = json.loads(get(f"{api}/targets")[1])["data"]["activeTargets"]
            return active if len(active) == 7 and all(t["health"] == "up" for t in active) else None

        active = wait_for("every target up", targets, 60)
        labels = {(t["labels"]["job"], t["labels"]["service"]): t["labels"] for t in active}
        assert labels[("vllm", "bge-2")] | {"instance": ""} == {
            "job": "vllm", "instance": "", "stack": "e2e", "service": "bge-2", "replica_of": MODEL, "host": "lo-2",
            "cards": "0",
        }  # fmt: skip
        assert labels[("vllm-router", "bge-router")]["replica_of"] == MODEL
        assert {k[0] for k in labels} == {"vllm", "vllm-router", "npu-exporter"}

        def joined():
            query = urllib.parse.quote(f'{prometheus.HBM_USED}{{service="bge-2"}}')
            result = json.loads(get(f"{api}/query?query={query}")[1])["data"]["result"]
            return result or None

        (series,) = wait_for("the HBM join", joined, 30)
        assert series["metric"] == {"__name__": prometheus.HBM_USED, "stack": "e2e", "host": "lo-2", "card": "0",
                                    "service": "bge-2", "replica_of": MODEL}  # fmt: skip
        assert float(series["value"][1]) == pytest.approx(30000 / 65536)
        query = urllib.parse.quote('sum by (replica_of) (vllm:num_requests_running{replica_of="bge"})')
        assert json.loads(get(f"{api}/query?query={query}")[1])["data"]["result"][0]["metric"] == {"replica_of": MODEL}
    finally:
        server.terminate()
        server.wait(10)
        for e in exporters:
            e.shutdown()
            e.server_close()


def test_a_killed_replica_costs_no_request_shows_unhealthy_and_rejoins_when_restarted(fleet):
    victim = fleet.replicas["bge-2"]
    victim.kill()
    failed: list[tuple[str, int]] = []

    def down():
        failed.extend(r for r in traffic(fleet, 1) if r[1] != 200)
        return fleet.workers()[victim.url] is False

    wait_for("the router to mark bge-2 unhealthy", down, every=0)
    # Completions and embeddings are retried on another replica (vllm-router retries connection
    # errors and 5xx up to 5 times); GET /v1/models goes to one worker and is not retried, so
    # until the health checks mark the replica down it fails when that worker is picked.
    assert [r for r in failed if r[0] != "models"] == [], "retries on the other replicas hide the dead one"
    assert {status for _, status in failed} <= {500, 502, 503}
    assert [r for r in traffic(fleet, 3) if r[1] != 200] == []
    assert get(f"{fleet.base}/readiness")[0] == 200
    assert get(f"{fleet.base}/health")[0] == 503, "why the container's health check reads /readiness, not /health"

    # doctor reads the same /workers and names the replica.
    hd = next(h for h in fleet.deployment.hosts if h.routers)
    facts = HostFacts(
        containers=(live_container(fleet.router.spec),),
        router_workers={fleet.router.name: get(f"{fleet.base}/workers")[1].decode()},
    )
    found = [f for f in host_findings(hd, facts) if f.kind == "router"]
    assert [(f.service, f.container) for f in found] == [("bge-2", "bge-router")]

    victim.start()
    wait_for("bge-2 to be healthy again", lambda: fleet.workers()[victim.url], every=1)
    # The failed attempts also opened bge-2's circuit breaker (10 failures; open for 60 s by
    # default), so it takes requests again once that closes, whatever its health says.
    failed.clear()

    def serving():
        failed.extend(r for r in traffic(fleet, 1) if r[1] != 200)
        return victim.served() > 0

    wait_for("bge-2 to take requests again", serving, every=1)
    assert failed == []
    assert takes_its_share(fleet, victim), "the restarted replica takes its share again"


def takes_its_share(f: Fleet, replica: Replica) -> bool:
    """Whether `replica` serves 3 of at most ROUNDS rounds of traffic through the router, every
    request passing. A count, not a time: round_robin over three healthy replicas gives it one
    post in three whatever the load, and a circuit breaker holding it back gives it none."""
    before = replica.served()
    for _ in range(ROUNDS):
        assert [r for r in traffic(f, 1) if r[1] != 200] == []
        if replica.served() - before >= 3:
            return True
    return False


# --- scaling and rolling replacement, through the scripts the deployment runs on the router's host ---

# Stands in for the docker CLI on the router's host, for the scripts of records.rollout:
# `exec <container> cmd...` runs cmd here (the router "container" is the local process);
# `inspect` says the router runs once $FAKE_DOCKER_ROOT/running exists; `run ... -v SRC:TARGET IMAGE -c SCRIPT` runs SCRIPT with
# TARGET standing for $FAKE_DOCKER_ROOT/SRC. Anything else is refused.
FAKE_DOCKER = """\
import os, sys
args = sys.argv[1:]
if args[0] == "exec":
    os.execvp(args[2], args[2:])
if args[0] == "inspect":
    print("true" if os.path.exists(os.environ["FAKE_DOCKER_ROOT"] + "/running") else "false")
    sys.exit(0)
if args[0] == "run":
    source, target = args[args.index("-v") + 1].rsplit(":", 1)
    local = os.environ["FAKE_DOCKER_ROOT"] + source
    os.makedirs(local, exist_ok=True)
    os.execvp("sh", ["sh", "-c", args[-1].replace(target + "/", local + "/")])
sys.exit("fake docker: not supported: " + " ".join(args))
"""


class Host:
    """The router's host: runs records.rollout's scripts with `sh`, docker as above."""

    def __init__(self, root: Path) -> None:
        self.root = root
        bin_dir = root / "bin"
        bin_dir.mkdir()
        (bin_dir / "docker").write_text(f"#!{sys.executable}\n{FAKE_DOCKER}")
        (bin_dir / "docker").chmod(0o755)
        self.env = {**os.environ, "FAKE_DOCKER_ROOT": str(root),
                    "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}"}  # fmt: skip

    def run(self, script: str) -> subprocess.CompletedProcess:
        return subprocess.run(["sh", "-c", script], env=self.env, capture_output=True, text=True, timeout=300)

    def workers_file(self, router: str) -> Path:
        return Path(f"{self.root}{rollout.workers_dir(router)}/workers")

    def start_router(self, fleet: Fleet, router: str) -> None:
        fleet.start_router(self.workers_file(router))  # reads the file the workers script wrote
        (self.root / "running").touch()


def test_scaling_rewrites_the_worker_list_and_reconciles_the_running_router_whose_container_stays(tmp_path):
    api_base = free_block()
    two, three = stack(2, api_base), stack(3, api_base)
    (r2,), (r3,) = two.routers, three.routers
    assert r2.spec == r3.spec, "the router's container is the same for 2 and 3 replicas: scaling restarts nothing"
    host = Host(tmp_path)
    f2, f3 = Fleet(two), Fleet(three)
    try:
        for replica in f3.replicas.values():
            replica.start()
        assert host.run(r2.workers_script).returncode == 0
        host.start_router(f2, r2.name)
        assert f2.workers() == {url: True for url in r2.workers}

        up = host.run(r3.workers_script)
        assert up.returncode == 0, up.stderr
        assert host.workers_file(r2.name).read_text().split() == list(r3.workers)
        assert set(f2.workers()) == set(r2.workers), "a replica joins through its own serve step, not the list"
        joined = host.run(r3.handovers[2].serve_script)
        assert joined.returncode == 0, joined.stderr
        wait_for("the third replica in the running router", lambda: f2.workers() == dict.fromkeys(r3.workers, True))

        down = host.run(r2.workers_script)
        assert down.returncode == 0, down.stderr
        wait_for("the third replica out again", lambda: set(f2.workers()) == set(r2.workers))
        assert [r for r in traffic(f2, 3) if r[1] != 200] == []
    finally:
        f2.stop()
        f3.stop()


def test_a_re_created_replica_serves_at_once_after_its_step_a_drained_one_costs_nothing_and_a_dead_one_stops_the_rollout(
    tmp_path, monkeypatch
):
    deployment = stack(3)
    (rd,) = deployment.routers
    host = Host(tmp_path)
    f = Fleet(deployment)
    try:
        for replica in f.replicas.values():
            replica.start()
        assert host.run(rd.workers_script).returncode == 0
        host.start_router(f, rd.name)
        victim, step = f.replicas["bge-2"], rd.handovers[1]
        assert step.replica == "bge-2" and step.url == victim.url

        # Its container re-created with no drain before (a crash, or a step that never ran): the
        # router marks it down and the failed requests open its circuit breaker (60 s) ...
        victim.kill()
        wait_for("the router to mark bge-2 down", lambda: traffic(f, 1) and f.workers()[victim.url] is False, every=0)
        victim.start()
        # ... and its step re-registers it afresh: it takes its share of the very next requests.
        served = host.run(step.serve_script)
        assert served.returncode == 0, served.stderr
        assert f.workers()[victim.url] is True
        assert takes_its_share(f, victim), "no circuit breaker or stale health holds it back"

        # Its container removed: the drain takes it out of the router first, so no request meets it.
        drained = host.run(step.drain_script)
        assert drained.returncode == 0, drained.stderr
        assert set(f.workers()) == set(rd.workers) - {victim.url}
        victim.kill()
        assert [r for r in traffic(f, 3) if r[1] != 200] == []

        # A new image that never answers: the step fails with one paragraph, and the router keeps
        # serving through the others (the next replica's container is never touched).
        victim.kill()
        monkeypatch.setattr(rollout, "SERVE_MARGIN_SECONDS", 5)
        dead = rollout.handover(rd.name, rd.plan.port, "bge-2", victim.url, start_timeout_seconds=0)
        failed = host.run(dead.serve_script)
        assert failed.returncode == 1
        stopped = f"ascend-fleet: replica bge-2 ({victim.url}) does not serve through router bge-router within 5s"
        assert stopped in failed.stderr
        assert "The rolling replacement stops here" in failed.stderr and "Traceback" not in failed.stderr
        assert [r for r in traffic(f, 3) if r[1] != 200] == []
    finally:
        f.stop()
