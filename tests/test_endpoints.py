"""`endpoints`: the URLs clients use, from the records alone; the same the program exports as `services`,
on the docker target and on Kubernetes."""

from __future__ import annotations

import json

import pytest

from cli.stackfile import load_fleet
from tests.support.pipeline import deployment_of
from tests.support.pulumi_harness import run_program, unwrap
from tests.support.stacks import values_of
from views.endpoints import endpoints, render
from views.report import WIDTH


def test_a_replicated_services_router_comes_first_then_its_replicas_then_the_other_services():
    deployment = deployment_of(load_fleet("staging")[0])
    rows = [(e.service, e.name, e.kind, e.host, e.endpoint) for e in endpoints(deployment)]
    assert rows == [
        ("bge-m3", "bge-m3-router", "router", "npu-s1", "http://192.0.2.21:7007/v1"),
        ("bge-m3", "bge-m3-1", "replica", "npu-s1", "http://192.0.2.21:8000/v1"),
        ("bge-m3", "bge-m3-2", "replica", "npu-s2", "http://192.0.2.22:8000/v1"),
        ("bge-m3", "bge-m3-3", "replica", "npu-s3", "http://192.0.2.23:8000/v1"),
        ("qwen-72b", "qwen-72b", "service", "npu-s1", "http://192.0.2.21:8001/v1"),
        ("qwen-long", "qwen-long", "service", "npu-s2", "http://192.0.2.22:6006/v1"),
        ("qwen-vl", "qwen-vl", "service", "npu-s2", "http://192.0.2.22:9009/v1"),
    ]
    doc = json.loads(render(deployment, "json"))
    assert doc["stack"] == "staging" and doc["endpoints"][0] == {
        "service": "bge-m3", "name": "bge-m3-router", "kind": "router", "host": "npu-s1", "endpoint": "http://192.0.2.21:7007/v1",
    }  # fmt: skip
    table = render(deployment, "table")
    assert "  bge-m3     bge-m3-router  router   npu-s1  http://192.0.2.21:7007/v1" in table
    assert max(map(len, table.splitlines())) <= WIDTH


@pytest.mark.parametrize("target", ["docker", "kubernetes"])
def test_the_endpoints_are_the_ones_the_program_exports(target):
    """The stack output `services` (a replicated service's entry is its router's, under the service's name)."""
    values = values_of("staging") | ({"target": "kubernetes"} if target == "kubernetes" else {})
    exported = unwrap(run_program("staging", values).stack_outputs["services"])
    found = endpoints(deployment_of(values, "staging"))
    shown = {e.service if e.kind == "router" else e.name: e.endpoint for e in found}
    assert shown == {name: entry["endpoint"] for name, entry in exported.items()}
    if target == "kubernetes":
        assert shown["bge-m3"] == "http://bge-m3.default.svc:7007/v1" and shown["qwen-vl"] == "http://qwen-vl.default.svc:9009/v1"


def test_python_m_allocation_endpoints_prints_json(cli):
    result = cli("endpoints", "--stack", "prod", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert [e["endpoint"] for e in json.loads(result.stdout)["endpoints"]] == [
        "http://192.0.2.10:7007/v1", "http://192.0.2.10:6006/v1", "http://192.0.2.10:9009/v1",
    ]  # fmt: skip
