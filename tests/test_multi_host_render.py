"""`render` of a multi-host service: each host's compose file and docker-run block carries its member on the
host network, publishing nothing, as docker-compose and sh accept them."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from ruamel.yaml import YAML

from cli.stackfile import StackFile, stack_values
from records.runtime import named
from views.exports.render import compose_files, docker_run_args, render
from tests.conftest import require_binary
from tests.support.pipeline import deployment_of

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "Pulumi.deepseek-r1.yaml"


def example():
    return deployment_of(stack_values(StackFile("deepseek-r1", EXAMPLE)), "deepseek-r1")


def test_each_hosts_compose_file_carries_its_member_on_the_host_network_without_ports_as_docker_compose_accepts(tmp_path):
    deployment = example()
    files = compose_files(deployment)
    command = require_binary("docker-compose", "docker-compose")
    for hd in deployment.hosts:
        file = f"{hd.name}.compose.yaml"
        doc = YAML(typ="safe").load(files[file])
        [md] = hd.members
        member = doc["services"][md.spec.name]
        assert member["network_mode"] == "host" and "ports" not in member and member["sysctls"] == {}
        assert member["environment"] == {k: v.replace("$", "$$") for k, v in md.spec.env.items()}
        assert [w.replace("$$", "$") for w in member["command"]] == list(md.spec.command)
        assert member["labels"]["ascend-fleet.group-digest"] == md.spec.labels["ascend-fleet.group-digest"]
        assert all("network_mode" not in s and s["ports"] for n, s in doc["services"].items() if n != md.spec.name)
        (tmp_path / file).write_text(files[file])
        result = subprocess.run([command, "-f", str(tmp_path / file), "config", "-q"], capture_output=True, text=True,
                                cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})  # fmt: skip
        assert result.returncode == 0, f"{file}:\n{result.stdout}{result.stderr}"


def test_the_docker_run_script_runs_each_member_on_its_host_with_network_host_and_no_publish():
    deployment = example()
    script = render(deployment, "docker-run")
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
    runs = [shlex.split(line) for line in script.splitlines() if line.startswith("docker run")]
    for hd in deployment.hosts:
        [md] = hd.members
        args = docker_run_args(md.spec)
        assert ["docker", "run", *args] in runs
        assert args[args.index("--network") + 1] == "host" and "--publish" not in args
        assert not any(a.startswith("--sysctl") for a in args)
        block = script.index(f"export DOCKER_HOST={shlex.quote(hd.docker_url)}")
        found = script.index(named(md.spec.name), block)
        assert script.index('docker rm -f -- "$id"', found) < script.index(f"--name {md.spec.name} ", found)
    assert len(runs) == 6 and sum("--network" in r for r in runs) == 4
