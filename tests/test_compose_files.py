"""`render --format compose --output DIR`: one compose file per host that docker-compose v1 (Debian's
1.29.2, which .ci/run installs) and `docker compose` v2 (where its plugin is installed) accept as it is."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from ruamel.yaml import YAML

from views.exports.render import compose_files, render
from tests.conftest import require_binary
from tests.support.stacks import fleet, host, service
from tests.goldens import fleets
from tests.support.pipeline import deployment_of

FLEETS = fleets()


def _load(text: str) -> dict:
    return YAML(typ="safe").load(text)


def test_output_writes_one_file_per_host_named_after_it_and_says_where(cli, tmp_path):
    result = cli("render", "--stack", "staging", "--format", "compose", "--output", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    names = ["npu-s1.compose.yaml", "npu-s2.compose.yaml", "npu-s3.compose.yaml"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == names
    assert result.stdout == f"wrote {', '.join(names)} to {tmp_path / 'out'}\n"
    files = compose_files(deployment_of(FLEETS["staging"]))
    assert {n: (tmp_path / "out" / n).read_text() for n in names} == files


@pytest.mark.parametrize("name", sorted(FLEETS))
def test_each_file_holds_its_hosts_services_in_the_plans_order_with_the_streams_values(name):
    deployment = deployment_of(FLEETS[name])
    stream = list(YAML(typ="safe").load_all(render(deployment, "compose")))
    files = compose_files(deployment)
    assert list(files) == [f"{hd.name}.compose.yaml" for hd in deployment.hosts]
    for hd, doc, text in zip(deployment.hosts, stream, files.values()):
        mine = _load(text)
        order = [sd.spec.name for sd in hd.services] + [rd.spec.name for rd in hd.routers]
        assert list(mine["services"]) == order and "name" not in mine
        assert f"-p {doc['name']} " in text, "the project name the stream sets, given on the command line"
        for service, theirs in doc["services"].items():
            ours = mine["services"][service]
            assert {k: v for k, v in ours.items() if k != "volumes"} == {k: v for k, v in theirs.items() if k != "volumes"}
            assert [_mount(v) for v in ours["volumes"]] == [_mount(v) for v in theirs["volumes"]]


def _mount(volume: dict | str) -> tuple[str, str, bool, bool]:
    """(source, target, read-only, created when absent) of a long- or short-syntax bind."""
    if isinstance(volume, str):
        source, target, *mode = volume.split(":")
        return source, target, mode == ["ro"], True
    created = volume.get("bind", {}).get("create_host_path", False)
    return volume["source"], volume["target"], volume["read_only"], created


def _has_v2() -> bool:
    docker = shutil.which("docker")
    return docker is not None and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0


# v1 is required (.ci/run installs Debian's docker-compose); the v2 plugin has no Debian bookworm package,
# so its case runs only where it is installed.
VERSIONS = ["v1", *(["v2"] if _has_v2() else [])]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", sorted(FLEETS))
def test_docker_compose_accepts_every_hosts_file_as_it_is(tmp_path, version, name):
    command = [require_binary("docker-compose", "docker-compose")] if version == "v1" else ["docker", "compose"]
    for file, text in compose_files(deployment_of(FLEETS[name])).items():
        (tmp_path / file).write_text(text)
        result = subprocess.run([*command, "-f", str(tmp_path / file), "config", "-q"], capture_output=True,
                                text=True, cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})  # fmt: skip
        assert result.returncode == 0, f"{file}:\n{text}\n{result.stdout}{result.stderr}"


def test_a_link_planted_at_a_hosts_file_is_refused_and_nothing_is_written(cli, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / "npu-s2.compose.yaml").symlink_to(victim)
    result = cli("render", "--stack", "staging", "--format", "compose", "--output", str(out))
    assert result.returncode == 1 and "symbolic link" in result.stderr and result.stdout == ""
    assert victim.read_text() == "precious" and sorted(p.name for p in out.iterdir()) == ["npu-s2.compose.yaml"]


def test_a_host_on_docker_engine_25_says_in_its_file_that_docker_compose_v1_refuses_start_interval():
    hosts = [host("npu-a", dockerEngine="28.0"), host("npu-b", dockerEngine="24.0")]
    files = compose_files(deployment_of(fleet(hosts, [service("chat", replicas=2)])))
    new, old = (_load(text) for text in files.values())
    assert new["services"]["chat-1"]["healthcheck"]["start_interval"] == "2s"
    assert "start_interval" not in old["services"]["chat-2"]["healthcheck"]
    note = "# healthcheck start_interval (Docker Engine 25 and later): docker-compose v1 refuses it; use docker compose v2"
    assert [note in text for text in files.values()] == [True, False]
