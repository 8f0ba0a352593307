"""`status`, `logs` and `endpoints` against simulated hosts, run as an operator runs them
(`python -m allocation ...`): prod on the simulated 910B host, staging on three simulated hosts
(sim/fleet.py) with its real router, and hosts that never answer.

The containers are started as `render --format docker-run` starts them (tests/support/sim_stacks.py),
health probed every second; what `status` reads is what doctor reads, in the same round trip."""

from __future__ import annotations

import json
import shutil
import socket
import time
from pathlib import Path

import pytest

from records.rollout import workers_dir
from sim.fleet import SimFleet
from sim.host import IMAGE, SimHost, free_port
from tests.support.sim_stacks import allocation, prod_on_the_simulated_host, staging_on_the_simulated_fleet, start_prod, start_staging

pytestmark = pytest.mark.simhost

WIDTH = 120
SILENT = "127.0.0.2"  # a loopback address whose port accepts and never says a word: ssh waits for ConnectTimeout
REFUSED = "127.0.0.3"  # a loopback address with nothing listening: refused at once


def status(config: Path, *args: str) -> tuple[dict, int]:
    result = allocation("status", "--config", str(config), "--format", "json", *args)
    assert result.stderr == "" and result.stdout, result.stderr
    return json.loads(result.stdout), result.returncode


def planned(doc: dict) -> dict[tuple[str, str], dict]:
    return {(h["name"], c["name"]): c for h in doc["hosts"] for c in h["containers"] if c["planned"]}


def endpoints(config: Path) -> dict[str, str]:
    result = allocation("endpoints", "--config", str(config), "--format", "json")
    assert result.returncode == 0, result.stderr
    return {e["name"]: e["endpoint"] for e in json.loads(result.stdout)["endpoints"]}


def one_paragraph_error(*args: str) -> str:
    result = allocation(*args)
    assert (result.returncode, result.stdout) == (1, "") and len(result.stderr.splitlines()) == 1, result.stderr
    return result.stderr


def test_status_lists_prods_containers_serving_then_one_stopped_by_hand_as_stopped(sim_host: SimHost, tmp_path: Path, boot_files):
    start_prod(sim_host, tmp_path)
    config = tmp_path / "Pulumi.prod-on-sim.yaml"
    doc, code = status(config)
    urls = endpoints(config)
    rows = planned(doc)
    assert sorted(rows) == [("npu-a", "bge-m3"), ("npu-a", "qwen-long"), ("npu-a", "qwen-vl")]
    for (_, name), row in rows.items():
        assert (row["state"], row["health"], row["image"], row["endpoint"]) == ("running", "healthy", IMAGE, urls[name])
        assert row["uptimeSeconds"] >= 0 and row["startedAt"]
    assert (code, doc["ok"]) == (0, True)
    table = allocation("status", "--config", str(config)).stdout
    assert max(map(len, table.splitlines())) <= WIDTH and "3 of 3 planned containers running and healthy" in table

    sim_host.docker("stop", "qwen-long")
    doc, code = status(config)
    stopped = planned(doc)[("npu-a", "qwen-long")]
    assert (stopped["state"], stopped["serving"], code, doc["ok"]) == ("exited", False, 1, False)
    table = allocation("status", "--config", str(config)).stdout
    assert any(line.startswith("  qwen-long ") and " exited (" in line for line in table.splitlines()), table


def test_status_lists_stagings_containers_on_three_hosts_and_logs_reads_a_named_replica(sim_host: SimHost, tmp_path: Path):
    made = not Path(workers_dir("bge-m3-router")).exists()
    try:
        with SimFleet(sim_host, tmp_path / "fleet") as fleet:
            fleet.add(3)
            config = staging_on_the_simulated_fleet(fleet, tmp_path)
            start_staging(sim_host, fleet, config)
            doc, code = status(config)
            urls = endpoints(config)
            rows = planned(doc)
            assert sorted(rows) == [
                ("npu-s1", "bge-m3-1"), ("npu-s1", "bge-m3-router"), ("npu-s1", "qwen-72b"),
                ("npu-s2", "bge-m3-2"), ("npu-s2", "qwen-long"), ("npu-s2", "qwen-vl"), ("npu-s3", "bge-m3-3"),
            ]  # fmt: skip
            for (_, name), row in rows.items():
                assert (row["state"], row["health"], row["endpoint"]) == ("running", "healthy", urls[name]), row
            [router] = next(h for h in doc["hosts"] if h["name"] == "npu-s1")["routers"]
            assert [(w["replica"], w["url"], w["seen"]) for w in router["workers"]] == [
                (f"bge-m3-{i}", urls[f"bge-m3-{i}"].removesuffix("/v1"), "healthy") for i in (1, 2, 3)
            ]
            assert (code, doc["ok"]) == (0, True)
            table = allocation("status", "--config", str(config)).stdout
            assert max(map(len, table.splitlines())) <= WIDTH and "router bge-m3-router sees: bge-m3-1 healthy" in table

            # the last lines of replica 2, as docker logs gives them on its host
            want = sim_host.local_docker("logs", "--tail", "3", "bge-m3-2").stdout.splitlines()
            result = allocation("logs", "--config", str(config), "bge-m3", "--replica", "2", "--tail", "3")
            assert result.returncode == 0 and result.stdout.splitlines() == want and len(want) == 3, result.stderr
            # both refuse an unknown service in one paragraph naming the known ones
            for command in ("status", "logs"):
                said = one_paragraph_error(command, "--config", str(config), "bge-m4")
                assert said.startswith(f"error: {command} bge-m4: stack staging-on-sim has no ") and "(did you mean 'bge-m3'?)" in said
                assert "its services: bge-m3 (replicas 1 to 3, router bge-m3-router), qwen-72b, qwen-long, qwen-vl" in said
    finally:
        if made:
            shutil.rmtree(workers_dir("bge-m3-router"), ignore_errors=True)


def test_a_host_that_does_not_answer_is_shown_unreachable_within_the_connect_timeout(sim_host: SimHost, tmp_path: Path):
    config = prod_on_the_simulated_host(sim_host, tmp_path)
    values = json.loads(config.read_text())
    silent = socket.socket()
    silent.bind((SILENT, 0))
    silent.listen(8)  # the kernel completes the handshake; nobody ever sends an SSH banner
    values["config"]["ascend-fleet:hosts"] += [
        {"name": "silent", "address": SILENT, "sshPort": silent.getsockname()[1]},
        {"name": "refused", "address": REFUSED, "sshPort": free_port()},
    ]
    values["config"]["ascend-fleet:ssh"]["connectTimeoutSeconds"] = 2
    config.write_text(json.dumps(values))
    try:
        start = time.monotonic()
        doc, code = status(config)
        seconds = time.monotonic() - start
    finally:
        silent.close()
    hosts = {h["name"]: h for h in doc["hosts"]}
    assert (code, doc["ok"], hosts["npu-a"]["reachable"]) == (2, False, True)
    assert [c["state"] for c in hosts["npu-a"]["containers"]] == ["missing"] * 3
    for name, address in (("silent", SILENT), ("refused", REFUSED)):
        assert hosts[name]["reachable"] is False and address in hosts[name]["error"], hosts[name]
    assert "timed out" in hosts["silent"]["error"] and "refused" in hosts["refused"]["error"]
    # Hosts are read in parallel and the silent one costs ConnectTimeout (2 s), not the kernel's SYN
    # retries or the 60 s deadline; the bound is generous for a loaded machine ("timed out" above
    # says which path was taken).
    assert seconds < 60, f"status took {seconds:.1f}s with two hosts that do not answer"
    print(f"status with two hosts that do not answer took {seconds:.2f}s")
