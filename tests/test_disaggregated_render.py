"""`render` of a disaggregated service: each host's compose file and docker-run block carry its prefill and decode
instances and its proxy on the host network, publishing nothing, the proxy after the instances, as docker-compose
and sh accept them."""

from __future__ import annotations

import shlex
import subprocess

from ruamel.yaml import YAML

from records.containers import HCCN_CONF
from views.exports.render import compose_files, docker_run_args, render
from tests.conftest import require_binary
from tests.support.disaggregated import example, pd, values
from tests.support.pipeline import deployment_of
from tests.support.stacks import host


def apart():
    """Prefill on a, decode on b, the proxy on c."""
    vals = values(pd(disaggregated={"prefill": {"tensorParallelSize": 4, "replicaPins": [{"host": "a"}]},
                                    "decode": {"tensorParallelSize": 4, "replicaPins": [{"host": "b"}]},
                                    "proxy": {"host": "c"}}))  # fmt: skip
    vals["hosts"].append(host("c", address="10.0.0.3"))
    return deployment_of(vals)


def test_the_compose_file_runs_both_instances_and_the_proxy_after_them_on_the_host_network_as_docker_compose_accepts(tmp_path):
    deployment = example()
    (file, text), = compose_files(deployment).items()
    services = YAML(typ="safe").load(text)["services"]
    assert list(services) == ["qwen-pd-decode", "qwen-pd-prefill", "qwen-pd-proxy"]
    for name, service in services.items():
        assert service["network_mode"] == "host" and "ports" not in service and service["sysctls"] == {}
    prefill = services["qwen-pd-prefill"]
    assert {"type": "bind", "source": HCCN_CONF, "target": HCCN_CONF, "read_only": True} in prefill["volumes"]
    spec = deployment.disaggregated[0].instances[0].spec
    assert [w.replace("$$", "$") for w in prefill["command"]] == list(spec.command)
    assert services["qwen-pd-proxy"]["depends_on"] == {
        "qwen-pd-prefill": {"condition": "service_healthy"}, "qwen-pd-decode": {"condition": "service_healthy"}}
    assert services["qwen-pd-proxy"]["command"] == list(deployment.disaggregated[0].proxy.spec.command)
    command = require_binary("docker-compose", "docker-compose")
    (tmp_path / file).write_text(text)
    result = subprocess.run([command, "-f", str(tmp_path / file), "config", "-q"], capture_output=True, text=True,
                            cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})  # fmt: skip
    assert result.returncode == 0, f"{file}:\n{result.stdout}{result.stderr}"


def test_a_proxy_away_from_its_instances_waits_for_none_in_its_file_and_its_header_says_to_start_it_after_them():
    files = compose_files(apart())
    proxy = YAML(typ="safe").load(files["c.compose.yaml"])["services"]["pd-proxy"]
    assert "depends_on" not in proxy and proxy["network_mode"] == "host"
    assert "# start pd-proxy once pd-prefill, pd-decode serve on their hosts: their compose files start them" in files["c.compose.yaml"]
    assert list(YAML(typ="safe").load(files["a.compose.yaml"])["services"]) == ["pd-prefill"]


def test_the_docker_run_script_runs_each_instance_on_its_host_and_the_proxy_after_the_instances_on_its_host():
    deployment = example()
    script = render(deployment, "docker-run")
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
    runs = [shlex.split(line) for line in script.splitlines() if line.startswith("docker run")]
    (d,) = deployment.disaggregated
    expected = [["docker", "run", *docker_run_args(c.spec)] for c in (*sorted(d.instances, key=lambda i: i.name), d.proxy)]
    assert runs == expected
    for args in runs:
        assert args[args.index("--network") + 1] == "host" and "--publish" not in args
        assert not any(a.startswith("--sysctl") for a in args)
    assert f"--volume={HCCN_CONF}:{HCCN_CONF}:ro" in runs[0]
    assert "# proxy of qwen-pd on the host network, after its instances: it answers once qwen-pd-prefill, qwen-pd-decode serve" in script
