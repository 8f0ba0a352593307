"""`doctor` and routers: the router is a planned container, and what it says of its replicas counts.

The `/workers` bodies are the real shape vllm-router 0.1.17 answers (seen on a running router:
`{"workers": [{"url", "model_id", "worker_type", "is_healthy", ...}], "total", "stats"}`);
test_router_e2e.py reads the same endpoint from the real router.
"""

from __future__ import annotations

import subprocess

import pytest

from ops.doctor.facts import HostFacts, parse_facts
from ops.doctor.findings import host_findings, required
from ops.doctor.gather import gather_script
from tests.conftest import live_container
from tests.support.doctor import gathered
from tests.support.doctor import router_findings, workers_body
from tests.support.pipeline import deployment_of


@pytest.fixture(scope="module")
def host():
    values = {
        "hosts": [{"name": "npu-a", "address": "192.0.2.10"}],
        "services": [{"name": "bge", "model": "/m/bge", "memoryFraction": 0.1, "replicas": 2}],
    }
    (hd,) = deployment_of(values, "t").hosts
    return hd


def test_a_router_seeing_every_replica_healthy_is_no_finding(host):
    (rd,) = host.routers
    assert router_findings(host, workers_body({url: True for url in rd.workers})) == []


def test_a_replica_the_router_sees_as_unhealthy_is_a_router_finding_naming_the_replica(host):
    (rd,) = host.routers
    found = router_findings(host, workers_body({rd.workers[0]: True, rd.workers[1]: False}))
    assert [(f.kind, f.service, f.container) for f in found] == [("router", "bge-2", "bge-router")]
    assert "sees replica bge-2 (http://192.0.2.10:8001) as unhealthy" in found[0].message


def test_a_replica_missing_from_the_routers_workers_or_an_unreadable_answer_is_reported(host):
    (rd,) = host.routers
    found = router_findings(host, workers_body({rd.workers[0]: True}))
    assert [f.message for f in found] == [f"router bge-router does not list replica bge-2 ({rd.workers[1]}) among its workers"]
    (found,) = router_findings(host, "curl: (7) Failed to connect")
    assert found.kind == "router" and "could not be read" in found.message and "Failed to connect" in found.message


def test_a_router_that_is_not_running_is_reported_by_its_state_not_its_workers(host):
    assert [f.kind for f in router_findings(host, None, router_status="exited")] == ["stopped"]
    (rd,) = host.routers
    facts = HostFacts(containers=tuple(live_container(sd.spec) for sd in host.services))
    (missing,) = [f for f in host_findings(host, facts) if f.kind == "missing"]
    assert missing.container == "bge-router" and "planned as the router of bge" in missing.message


def test_the_gather_script_reads_each_routers_workers_and_the_facts_keep_the_body(host, tmp_path):
    (rd,) = host.routers
    script = gather_script(required(host), (), [(rd.name, rd.plan.port)])
    assert f"http://127.0.0.1:{rd.plan.port}/workers" in script
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
    body = workers_body({url: True for url in rd.workers})
    text = gathered(("router-workers", rd.name, body))
    assert parse_facts(text).router_workers == {rd.name: body}
