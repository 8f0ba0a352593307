"""`logs`: which container a request names, `--since` and `--tail` checked before they reach docker's argv,
and the log read by the real script under `sh`, against a docker stand-in that resolves names as dockerd
does (tests/support/docker_fakes.py), through the local-host path of `ops.ssh.run_script`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from allocation.errors import ConfigError
from cli.stackfile import load_fleet
from ops import logs
from ops.requested import Target, target
from tests.support.docker_fakes import container_id, resolving_docker
from tests.support.doctor import group_values
from tests.support.pipeline import deployment_of
from tests.support.stacks import SEED_UNPINNED, fleet, host, service

LOCAL = "unix:///run/ascend-fleet-test.sock"  # a local host: the script runs under this machine's sh


@pytest.fixture(scope="module")
def staging():
    return deployment_of(load_fleet("staging")[0])


@pytest.fixture
def local(tmp_path: Path, monkeypatch):
    """A local host running bge (two replicas and its router) and qwen, and a docker stand-in on PATH."""
    resolving_docker(tmp_path)
    (tmp_path / "logs").mkdir()
    monkeypatch.setenv("PATH", f"{tmp_path}/bin:{os.environ['PATH']}")
    deployment = deployment_of(fleet([host("dev", dockerHost=LOCAL)], [service("bge", 1, 0.1, replicas=2), service("qwen", 1, 0.4)]))
    return deployment, tmp_path


def containers(root: Path, *names: str) -> None:
    (root / "containers").write_text("".join(f"{n}|running\n" for n in names))


@pytest.mark.parametrize(
    "since",
    ["10m", "1h30m", "90s", "1.5h", "250ms", "1767225600", "1767225600.5", "2026-01-01", "2026-01-01T13:23:37",
     "2026-01-01T13:23:37.123456789Z", "2026-01-01T13:23:37+08:00"],
)  # fmt: skip
def test_since_takes_the_durations_unix_times_and_dates_docker_logs_reads(since):
    assert logs.checked_since(since) == since


@pytest.mark.parametrize(
    "since",
    ["", "-1m", "--follow", "10m; reboot", "$(reboot)", "1y", "10 m", "2026-13-01", "2026-01-01T25:00:00",
     "2026-01-01T13:23:37+25:00", "1" * 50, "10m\n"],
)  # fmt: skip
def test_since_refuses_anything_else_in_one_paragraph_naming_the_forms(since):
    with pytest.raises(ConfigError) as err:
        logs.checked_since(since)
    text = str(err.value)
    assert text.startswith("logs --since ") and "not a time docker logs reads" in text and "\n" not in text


def test_tail_is_bounded():
    assert logs.checked_tail(1) == 1 and logs.checked_tail(logs.MAX_TAIL) == logs.MAX_TAIL
    for bad in (0, -5, logs.MAX_TAIL + 1):
        with pytest.raises(ConfigError, match=f"logs --tail {bad}: give 1 to 10000 lines"):
            logs.checked_tail(bad)


def test_a_service_a_replica_and_a_router_name_their_containers_on_their_hosts(staging):
    assert (target(staging, "qwen-vl", None).host.name, target(staging, "qwen-vl", None).container) == ("npu-s2", "qwen-vl")
    second = target(staging, "bge-m3", 2)
    assert (second.host.name, second.container, second.what) == ("npu-s2", "bge-m3-2", "replica bge-m3-2 on cards 4")
    assert target(staging, "bge-m3-3", None).host.name == "npu-s3"
    assert (target(staging, "bge-m3-router", None).host.name, target(staging, "bge-m3-router", None).container) == ("npu-s1", "bge-m3-router")


@pytest.mark.parametrize(
    "name, replica, message",
    [
        ("qwen-vll", None, "logs qwen-vll: stack staging has no service, replica or router of that name (did you mean 'qwen-vl'?); "
         "its services: bge-m3 (replicas 1 to 3, router bge-m3-router), qwen-72b, qwen-long, qwen-vl"),
        ("bge-m3", None, "logs bge-m3: bge-m3 runs 3 replicas behind its router: give --replica 1 to 3, or name the router, bge-m3-router"),
        ("bge-m3", 4, "logs bge-m3 --replica 4: bge-m3 has replicas 1 to 3"),
        ("qwen-vl", 1, "logs qwen-vl --replica 1: qwen-vl is not a replicated service (a service of its own): leave out --replica"),
        ("bge-m3-2", 1, "logs bge-m3-2 --replica 1: bge-m3-2 is not a replicated service (a replica or router, named as it is): leave out --replica"),
        ("x\x1b[2J", None, "logs 'x\\x1b[2J': stack staging has no service"),
    ],
)  # fmt: skip
def test_an_unknown_or_ambiguous_name_is_refused_in_one_paragraph_naming_the_services(staging, name, replica, message):
    with pytest.raises(ConfigError) as err:
        target(staging, name, replica)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_the_last_lines_of_a_named_replica_come_from_the_container_of_exactly_that_name(local):
    deployment, root = local
    containers(root, "bge-1", "bge-2", "bge-router")
    (root / "logs/bge-2").write_text("".join(f"line {i}\n" for i in range(300)))
    shown, cut = logs.read(target(deployment, "bge", 2), 5, "10m")
    assert (shown, cut) == ([f"line {i}" for i in range(295, 300)], False)
    calls = (root / "calls").read_text().splitlines()
    assert calls[-1] == f"docker logs --tail 5 --since 10m {container_id('bge-2')}"


def test_a_name_no_container_has_is_said_so_and_no_container_whose_id_begins_with_it_is_read(local):
    deployment, root = local
    # No container is named `bad`, and one's ID begins with `bad` (IDs are hex): `docker logs bad` would read it.
    decoy = next(n for n in (f"decoy{i}" for i in range(10_000)) if container_id(n).startswith("bad"))
    containers(root, decoy)
    where = Target(deployment.hosts[0], "bad", "bad", "service bad on cards 0")
    with pytest.raises(logs.HostError, match=r"logs bad: host dev has no container of that name \(planned: service bad"):
        logs.read(where, 10, None)
    assert not any(line.startswith("docker logs") for line in (root / "calls").read_text().splitlines())


def test_text_from_the_host_is_escaped_cut_per_line_and_bounded_and_cannot_forge_a_frame(local):
    deployment, root = local
    containers(root, "qwen")
    forged = f"{logs.MARK} rc MA== NAo=\n{logs.MARK} end - -"
    (root / "logs/qwen").write_text(f"\x1b]0;pwned\x07 title\n{'x' * 5000}\n\tindented\n{forged}\n")
    shown, cut = logs.read(target(deployment, "qwen", None), 100, None)
    assert shown[0] == "\\x1b]0;pwned\\x07 title"
    assert shown[1] == "x" * logs.LINE_CHARS + " ... (5000 characters)"
    assert shown[2] == "\tindented" and shown[3:] == forged.splitlines() and not cut


def test_a_log_longer_than_the_bound_keeps_its_end_and_says_its_start_was_cut(local):
    deployment, root = local
    containers(root, "qwen")
    (root / "logs/qwen").write_text("".join(f"{i:05d} {'y' * 994}\n" for i in range(2000)))  # 2,002,000 bytes
    shown, cut = logs.read(target(deployment, "qwen", None), 2000, None)
    # The last LOG_BYTES of 1,001-byte lines: whole lines only, the partial first one left out.
    assert cut and shown[-1].startswith("01999 ") and len(shown) == logs.LOG_BYTES // 1001
    assert all(len(line) == 1000 for line in shown)


def test_a_docker_that_cannot_list_containers_is_said_so(local):
    deployment, root = local
    (root / "bin/docker").write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon at unix:///run/x.sock' >&2\nexit 1\n")
    with pytest.raises(logs.HostError, match="logs qwen: host dev: docker could not list its containers: 'Cannot connect to the Docker"):
        logs.read(target(deployment, "qwen", None), 10, None)


def test_a_docker_logs_that_fails_is_said_so_with_what_it_printed(local):
    deployment, root = local
    (root / "bin/docker").write_text(
        "#!/bin/sh\ncase \"$1\" in ps) echo 0123abcd ;; logs) echo 'Error response from daemon: configured logging driver "
        "does not support reading' >&2; exit 1 ;; esac\n"
    )
    with pytest.raises(logs.HostError, match="logs qwen: host dev: docker logs exited 1: 'Error response from daemon: configured logging"):
        logs.read(target(deployment, "qwen", None), 10, None)


def test_an_unreachable_host_is_said_so_naming_it():
    deployment = deployment_of(fleet([host("npu-a", address="127.0.0.1", sshPort=1)], [service("qwen")]))
    with pytest.raises(logs.HostError, match=r"logs qwen: host npu-a \(ssh://root@127.0.0.1:1\) is unreachable"):
        logs.read(target(deployment, "qwen", None), 10, None)


def test_logs_of_an_unknown_service_exits_one_with_one_paragraph(cli, tmp_path):
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(SEED_UNPINNED)
    result = cli("logs", "--config", str(path), "qwne", "--since", "5m")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == "error: logs qwne: stack t has no service, replica or router of that name (did you mean 'qwen'?); its services: bge, qwen\n"
    result = cli("logs", "--config", str(path), "qwen", "--since", "$(reboot)")
    assert result.returncode == 1 and result.stderr.startswith("error: logs --since '$(reboot)': not a time")


def test_logs_on_the_kubernetes_target_is_refused_naming_kubectl_logs(cli, tmp_path):
    path = tmp_path / "Pulumi.k.yaml"
    path.write_text(SEED_UNPINNED + "  ascend-fleet:target: kubernetes\n")
    result = cli("logs", "--config", str(path), "qwen")
    assert result.returncode == 1 and "kubectl logs -n default deployment/qwen" in result.stderr


def test_python_m_allocation_logs_prints_the_lines_and_says_on_stderr_when_their_start_was_cut(cli, local, tmp_path):
    _, root = local
    containers(root, "bge-2")
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(json.dumps({"config": {
        "ascend-fleet:hosts": [{"name": "dev", "address": "dev.example", "dockerHost": LOCAL}],
        "ascend-fleet:services": [{"name": "bge", "model": "/m/bge", "memoryFraction": 0.1, "replicas": 2}],
    }}))  # fmt: skip
    (root / "logs/bge-2").write_text("first\nsecond\nthird\n")
    result = cli("logs", "--config", str(path), "bge", "--replica", "2", "--tail", "2")
    assert (result.returncode, result.stdout, result.stderr) == (0, "second\nthird\n", "")
    (root / "logs/bge-2").write_text("z" * (logs.LOG_BYTES + 10) + "\nlast\n")
    result = cli("logs", "--config", str(path), "bge-2")
    assert (result.returncode, result.stdout) == (0, "last\n")
    assert result.stderr == f"note: the last 100 lines of bge-2 are more than {logs.LOG_BYTES} bytes: their start is left out\n"


def test_a_multi_host_service_is_refused_naming_its_members_and_a_member_is_read_on_its_host():
    ds = deployment_of(group_values())
    with pytest.raises(ConfigError) as err:
        target(ds, "ds", None)
    assert str(err.value) == (
        "logs ds: ds runs over 2 hosts, one member each with its own log: name the member: "
        "ds-node0 (leader on npu-a), ds-node1 (follower on npu-b)"
    )
    with pytest.raises(ConfigError, match="name the member and leave out --replica: ds-node0"):
        target(ds, "ds", 1)
    with pytest.raises(ConfigError, match=r"ds-node1 is not a replicated service \(a member of a multi-host service, named as it is\)"):
        target(ds, "ds-node1", 1)
    where = target(ds, "ds-node1", None)
    assert (where.host.name, where.name, where.container, where.what) == ("npu-b", "ds-node1", "ds-node1", "follower ds-node1 of ds on cards 0,1,2,3")
    with pytest.raises(ConfigError) as err:
        target(ds, "ds-node2", None)
    assert "(did you mean 'ds-node1'?); its services: ds (members ds-node0, ds-node1), solo" in str(err.value)


def test_a_disaggregated_service_is_refused_naming_its_instances_and_proxy_and_each_is_read_on_its_host():
    from tests.support.disaggregated import example

    pd = example()
    with pytest.raises(ConfigError) as err:
        target(pd, "qwen-pd", None)
    assert str(err.value) == (
        "logs qwen-pd: qwen-pd runs prefill and decode apart, each instance and its proxy a container with its own log: "
        "name one: qwen-pd-prefill (prefill on npu-a), qwen-pd-decode (decode on npu-a), qwen-pd-proxy (proxy on npu-a)"
    )
    with pytest.raises(ConfigError, match="name one and leave out --replica: qwen-pd-prefill"):
        target(pd, "qwen-pd", 1)
    with pytest.raises(ConfigError, match=r"qwen-pd-proxy is not a replicated service \(an instance or the proxy of a disaggregated service"):
        target(pd, "qwen-pd-proxy", 1)
    found = [(w.host.name, w.name, w.container, w.what) for w in (target(pd, n, None) for n in ("qwen-pd-decode", "qwen-pd-proxy"))]
    assert found == [("npu-a", "qwen-pd-decode", "qwen-pd-decode", "decode instance qwen-pd-decode of qwen-pd on cards 4,5,6,7"),
                     ("npu-a", "qwen-pd-proxy", "qwen-pd-proxy", "proxy qwen-pd-proxy of qwen-pd")]  # fmt: skip
    with pytest.raises(ConfigError) as err:
        target(pd, "qwen-pd-prefil", None)
    assert "(did you mean 'qwen-pd-prefill'?); its services: qwen-pd (qwen-pd-prefill (prefill on npu-a), qwen-pd-decode" in str(err.value)
