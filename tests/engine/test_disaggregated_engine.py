"""Prefill and decode apart under the real engine, on the simulated host: the 1P1D example
(examples/Pulumi.pd-1p1d.yaml, prefill on cards 0-3, decode on 4-7) as its stack, with the simulated
host's address, image and model.

`pulumi up` runs the host check (its /etc/hccn.conf, its HCCL_IF_IP), creates both instances on the host
network and then the proxy (records.disaggregated: the proxy after every instance); a completion through
the proxy is answered with the KV the decoder pulled from the prefiller's kvPort block (sim/README.md,
"Prefill and decode"). A second preview changes nothing and `doctor` finds nothing.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from cli.stackfile import StackFile, stack_values
from sim.docker_cli import LOCAL_DOCKER
from sim.host import CLAIMS_DIR, SimHost
from sim.pd_proxy_image import PD_IMAGE, build_pd_image
from tests.engine.engine import (
    CONTAINER, REPO, Project, assert_doctor_clean, destroyed_after, assert_preview_changes_no_container, container_name, health, urn_type,
)

pytestmark = pytest.mark.engine

STACK = "pd-engine"
EXAMPLE = REPO / "examples" / "Pulumi.pd-1p1d.yaml"
INSTANCES = ("qwen-pd-prefill", "qwen-pd-decode")
PROXY = "qwen-pd-proxy"


def values(host: SimHost) -> dict[str, Any]:
    """The example with the simulated host's SSH endpoint, the stand-in image (which carries vllm-ascend's
    proxy example where vllm-ascend's image does, sim/pd_proxy_image.py) and a model folder there."""
    values = stack_values(StackFile("pd-1p1d", EXAMPLE))
    [h] = values["hosts"]
    h.update(address=host.address, sshPort=host.ssh_port)
    values["services"][0]["model"] = str(host.make_model("pd-engine-model"))
    values["ssh"] = {"identityFile": str(host.identity_file), "knownHostsFile": str(host.known_hosts_file)}
    values["defaults"] = {
        "image": PD_IMAGE,
        "vllmAscendVersion": "0.20.2rc1",
        "mounts": [{"source": str(CLAIMS_DIR), "target": str(CLAIMS_DIR), "readOnly": False}],
        "env": {"NPU_SIM_LOAD_SECONDS": "0"},
        "startTimeoutSeconds": 300,
        "stopGraceSeconds": 10,
        "shmSizeMiB": 64,
    }
    return values


@pytest.fixture(scope="module")
def project(engine_host: SimHost, engine_env, tmp_path_factory: pytest.TempPathFactory):
    build_pd_image(LOCAL_DOCKER)
    with destroyed_after(Project.create(tmp_path_factory.mktemp("pd"), STACK, values(engine_host), engine_env), engine_host) as project:
        yield project


def complete(endpoint: str, served: str) -> dict[str, Any]:
    body = json.dumps({"model": served, "prompt": "hello", "max_tokens": 4}).encode()
    request = urllib.request.Request(f"{endpoint}/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)


def test_up_creates_both_instances_then_the_proxy_and_a_completion_goes_through_it(project, engine_host):
    outcome = project.run("up")
    created = {container_name(u) for u in outcome.urns("create")}
    assert created == {*INSTANCES, PROXY}, outcome.explain()
    started = {container_name(u): at for u, at in outcome.positions("resourcePreEvent").items() if urn_type(u) == CONTAINER}
    done = {container_name(u): at for u, at in outcome.positions("resOutputsEvent").items() if urn_type(u) == CONTAINER}
    assert all(done[i] < started[PROXY] for i in INSTANCES), (started, done)
    for name in INSTANCES:
        assert health(engine_host, name) == "healthy", engine_host.docker("logs", name).stderr[-3000:]
        mode = engine_host.docker("inspect", "-f", "{{.HostConfig.NetworkMode}}", name).stdout.strip()
        assert mode == "host", name
    endpoint = project.outputs()["services"]["qwen-pd"]["endpoint"]
    answer = complete(endpoint, project.values()["services"][0]["servedModelName"])
    assert answer["choices"][0]["text"], answer
    logs = engine_host.docker("logs", INSTANCES[1])
    assert "KV cache transfer for request" in logs.stderr, (logs.stdout + logs.stderr)[-3000:]
    print(f"up: {outcome.seconds:.1f} s")


def test_a_second_preview_changes_nothing(project):
    assert_preview_changes_no_container(project)


def test_doctor_finds_nothing(project):
    assert_doctor_clean(project)
