"""Exports carry exactly the containers of container_spec, the function Pulumi uses too."""

from __future__ import annotations

import shlex
import subprocess

from ruamel.yaml import YAML

from records.deployment import deploy
from allocation.planner import plan_fleet
from cli.stackfile import load_fleet
from records.runtime import named
from views.exports.render import docker_run_args, render
from tests.support.docker_fakes import container_id, resolving_docker
from tests.support.pipeline import deployment_of
from tests.support.stacks import fleet, host, service


def prod():
    fleet, _ = load_fleet("prod")
    return fleet, plan_fleet(fleet)


def test_compose_services_match_the_container_specs():
    fleet, plan = prod()
    [doc] = list(YAML(typ="safe").load_all(render(deploy(plan), "compose")))
    specs = {sd.name: sd.spec for sd in deploy(plan).services()}
    assert doc["name"] == "ascend-fleet-prod"
    for _, ps in plan.services():
        spec = specs[ps.name]
        svc = doc["services"][ps.name]
        assert svc["environment"] == dict(spec.env)
        assert [w.replace("$$", "$") for w in svc["command"]] == list(spec.command), "compose reads $$ as $"
        assert svc["devices"] == [f"{d}:{d}" for d in spec.device_files]
        assert svc["ports"] == [f"{spec.api_port}:{spec.api_port}"]
        assert svc["healthcheck"]["start_period"] == "1800s"
        assert svc["privileged"] is False and svc["ipc"] == "private"
    assert doc["services"]["qwen-long"]["environment"]["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2,3"
    assert "/dev/davinci4:/dev/davinci4" in doc["services"]["qwen-long"]["devices"]
    assert "/dev/davinci0:/dev/davinci0" not in doc["services"]["qwen-long"]["devices"]


def test_a_multi_host_stack_gives_one_compose_document_per_host():
    fleet, _ = load_fleet("staging")
    plan = plan_fleet(fleet)
    docs = list(YAML(typ="safe").load_all(render(deploy(plan), "compose")))
    assert len(docs) == len(fleet.hosts) == 3
    containers = [ps.name for _, ps in plan.services()] + [r.name for r in plan.routers]
    assert sorted(n for d in docs for n in d["services"]) == sorted(containers)
    router = docs[0]["services"]["bge-m3-router"]
    assert router["depends_on"] == {"bge-m3-1": {"condition": "service_healthy"}}
    assert router["ports"] == ["7007:7007", f"{plan.routers[0].metrics_port}:{plan.routers[0].metrics_port}"]


def test_the_docker_run_script_is_valid_shell_and_deletes_before_it_creates():
    fleet, plan = prod()
    script = render(deploy(plan), "docker-run")
    specs = {sd.name: sd.spec for sd in deploy(plan).services()}
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
    runs = [shlex.split(line) for line in script.splitlines() if line.startswith("docker run")]
    assert len(runs) == 3
    for _, ps in plan.services():
        spec = specs[ps.name]
        assert ["docker", "run", *docker_run_args(spec)] in runs
        found = script.index(named(ps.name))
        assert script.index('docker rm -f -- "$id"', found) < script.index(f"--name {ps.name} ", found)
    assert "export DOCKER_HOST=ssh://root@192.0.2.10:22" in script


def test_the_docker_run_script_replaces_only_the_container_of_each_name_never_one_whose_id_begins_with_it(tmp_path):
    """A service's container not created yet: Docker would read its name as an ID prefix (moby
    `GetContainer`), and the script's delete-before-create would remove that container."""
    resolving_docker(tmp_path)
    unrelated, name = "unrelated", container_id("unrelated")[:8]
    (tmp_path / "containers").write_text(f"{unrelated}|running|always\nqwen|running|always\n")
    local = host("laptop", dockerHost="unix:///var/run/docker.sock")
    stack = fleet([local], [service(name, devices=[0], host="laptop"), service("qwen", devices=[1], host="laptop")])
    script = render(deployment_of(stack), "docker-run")
    env = {"PATH": f"{tmp_path}/bin:/usr/bin:/bin"}
    result = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "containers").read_text() == f"{unrelated}|running|always\n", "qwen replaced, unrelated kept"


def test_the_docker_run_script_builds_each_router_image_on_its_host_then_runs_the_router():
    fleet, _ = load_fleet("staging")
    deployment = deployment_of(fleet)
    script = render(deployment, "docker-run")
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
    (rd,) = deployment.routers
    build = script.index("ssh ")
    block = script[script.index("# host npu-s1") : script.index("# host npu-s2")]
    assert rd.build_script.rstrip("\n") in block
    assert block.index(rd.build_script.rstrip("\n")) < block.index("--name bge-m3-router ")
    assert block.index(rd.build_script.rstrip("\n")) < block.index(rd.workers_script.rstrip("\n"))
    assert block.index(rd.workers_script.rstrip("\n")) < block.index("--name bge-m3-router "), "it reads the list at start"
    assert build < script.index("--name bge-m3-router ")
    assert shlex.join(["docker", "run", *docker_run_args(rd.spec)]) in block
