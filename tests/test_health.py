"""Health probes per host from its declared Docker Engine (records/health.py): seen healthy within
seconds of readiness, on every engine, with a hung server still marked unhealthy as late as before."""

from __future__ import annotations

import copy
import shlex
import subprocess

import pytest
from ruamel.yaml import YAML

from allocation.config import Host, parse_fleet
from allocation.errors import ConfigError
from views.exports.render import docker_run_args, render
from records.host_check import host_check_script
from records.restarts import restart_table
from records.health import probe_timing, unhealthy_after_seconds
from tests.support.provider_readback import differences, stored
from tests.support.pulumi_harness import CONTAINER, run_program
from tests.support.stacks import two_host_values, values_of
from tests.support.pipeline import deployment_of

OLD, NEW = "20.10", "28.5"


def fleet_values(engine_b: str | None = NEW, **fleet: object) -> dict:
    """Two hosts: npu-a on the fleet's engine, npu-b on `engine_b`; a replicated service with a router."""
    values = two_host_values()
    if engine_b is not None:
        values["hosts"][1]["dockerEngine"] = engine_b
    values["services"].append({"name": "rep", "hosts": ["npu-b"], "model": "/models/r", "memoryFraction": 0.2, "replicas": 2})
    return {**values, **fleet}


def specs_of(values: dict) -> dict:
    deployment = deployment_of(values, "health")
    return {sd.name: sd.spec for sd in deployment.services()} | {
        rd.spec.name: rd.spec for hd in deployment.hosts for rd in hd.routers
    }


@pytest.mark.parametrize(
    ("engine", "fast", "steady", "expected"),
    [
        # (interval, timeout, retries) after the start -> (interval, retries, start_interval)
        (NEW, 2, (30, 10, 3), (30, 3, 2)),
        ("25.0", 2, (30, 10, 3), (30, 3, 2)),
        (OLD, 2, (30, 10, 3), (2, 10, None)),
        ("24.0.7", 2, (30, 10, 3), (2, 10, None)),
        (OLD, 0, (30, 10, 3), (30, 3, None)),
        (NEW, 0, (30, 10, 3), (30, 3, None)),
        (OLD, 2, (10, 5, 3), (2, 7, None)),  # the router's
        (OLD, 5, (30, 10, 3), (5, 8, None)),
    ],
)
def test_probe_timing_follows_the_engine_and_the_fleet_setting(engine, fast, steady, expected):
    t = probe_timing(engine, fast, *steady)
    assert (t.interval_seconds, t.retries, t.start_interval_seconds) == expected


@pytest.mark.parametrize("engine", [OLD, NEW])
@pytest.mark.parametrize("steady", [(30, 10, 3), (10, 5, 3)])
def test_a_hung_server_is_marked_unhealthy_no_sooner_and_at_most_one_probe_later_than_with_todays_probes(engine, steady):
    interval, timeout, retries = steady
    today = retries * (interval + timeout)
    t = probe_timing(engine, 2, *steady)
    hung, refused = unhealthy_after_seconds(t, timeout)
    assert today <= hung < today + t.interval_seconds + timeout
    assert refused <= hung


def test_each_container_gets_start_interval_only_on_a_host_declared_at_engine_25_or_later():
    specs = specs_of(fleet_values())
    on_b = {"chat-b", "solo-b", "rep-1", "rep-2", "rep-router"}
    assert set(specs) == on_b | {"embed-a", "chat-a"}
    for name, spec in specs.items():
        hc = spec.healthcheck
        if name in on_b:
            assert hc.start_interval_seconds == 2 and "startIntervalSeconds" in spec.to_json()["healthcheck"], name
        else:
            assert hc.start_interval_seconds is None and "startIntervalSeconds" not in spec.to_json()["healthcheck"], name
            assert hc.interval_seconds == 2, name
    assert (specs["chat-b"].healthcheck.interval_seconds, specs["rep-router"].healthcheck.interval_seconds) == (30, 10)


def test_turned_off_every_container_probes_as_before_every_30_s_and_its_plan_json_is_unchanged():
    specs = specs_of(fleet_values(healthStartIntervalSeconds=0))
    for name, spec in specs.items():
        hc = spec.to_json()["healthcheck"]
        assert set(hc) == {"test", "intervalSeconds", "timeoutSeconds", "startPeriodSeconds", "retries"}, name
        assert (hc["intervalSeconds"], hc["retries"]) == ((10, 3) if name.endswith("router") else (30, 3)), name


def test_the_fleet_default_engine_applies_to_hosts_without_their_own():
    fleet = parse_fleet("health", fleet_values(dockerEngine=NEW, engine_b=None))
    assert [fleet.docker_engine_of(h) for h in fleet.hosts] == [NEW, NEW]
    assert parse_fleet("health", fleet_values(engine_b=None)).docker_engine == OLD


@pytest.mark.parametrize("bad", [20.10, 25, "twenty", "25.x"])
def test_an_engine_version_that_is_not_a_quoted_version_string_is_refused_in_one_paragraph(bad):
    with pytest.raises(ConfigError) as raised:
        parse_fleet("health", fleet_values(engine_b=bad))
    text = str(raised.value)
    assert "hosts" in text and "dockerEngine" in text and "Traceback" not in text


def test_exports_carry_start_interval_only_for_hosts_with_a_new_engine():
    deployment = deployment_of(fleet_values(), "health")
    docs = YAML(typ="safe").load_all(render(deployment, "compose"))
    compose = {name: svc for d in docs for name, svc in d["services"].items()}
    for sd in deployment.services():
        hc, args = compose[sd.name]["healthcheck"], docker_run_args(sd.spec)
        new = sd.spec.healthcheck.start_interval_seconds is not None
        assert (hc.get("start_interval") == "2s") is new and ("start_interval" in hc) is new, sd.name
        assert ("--health-start-interval=2s" in args) is new, sd.name
        assert not any(a.startswith("--health-start-interval") for a in args) or new, sd.name


def test_the_container_resource_passes_start_interval_only_where_the_engine_keeps_it():
    run = run_program("health", fleet_values())
    containers = run.by_name(CONTAINER)
    for name, c in containers.items():
        on_b = name.startswith(("chat-b", "solo-b", "rep-"))
        assert (c.inputs["healthcheck"].get("startInterval") == "2s") is on_b, name
        assert ("startInterval" in c.inputs["healthcheck"]) is on_b, name


@pytest.mark.parametrize("engine_b", [OLD, NEW])
def test_a_second_preview_is_empty_on_old_and_new_engines_alike(engine_b):
    values = fleet_values(engine_b=engine_b)
    fleet = parse_fleet("health", values)
    engines = {h.name: fleet.docker_engine_of(h) for h in fleet.hosts}
    run = run_program("health", values)
    for c in run.of_type(CONTAINER):
        engine = engines["npu-b" if c.name.startswith(("chat-b", "solo-b", "rep-")) else "npu-a"]
        assert differences(c.inputs, stored(c.inputs, engine=engine)) == [], (c.name, engine)


def test_start_interval_sent_to_an_old_engine_would_change_on_every_preview():
    """Why the program leaves it out there: dockerd 20.10 drops it, the provider reads back `0s`."""
    inputs = copy.deepcopy(run_program("health", fleet_values()).by_name(CONTAINER)["chat-b-container"].inputs)
    assert inputs["healthcheck"]["startInterval"] == "2s"
    assert differences(inputs, stored(inputs, engine=NEW)) == []
    assert differences(inputs, stored(inputs, engine=OLD)) == ["healthcheck"]


def test_committed_stacks_declare_no_engine_and_get_the_short_interval_of_an_old_one():
    fleet = parse_fleet("prod", values_of("prod"))
    assert fleet.docker_engine == OLD
    assert {sd.spec.healthcheck.interval_seconds for sd in deployment_of(fleet).services()} == {2}


def stand_in_docker(root, version: str | None) -> None:
    """`docker version --format '{{.Server.Version}}'` printing `version`, or failing (no daemon)."""
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    body = f"echo {shlex.quote(version)}" if version is not None else "echo 'Cannot connect to the Docker daemon' >&2; exit 1"
    (bin_dir / "docker").write_text(
        '#!/bin/sh\n[ "$1 $2 $3" = "version --format {{.Server.Version}}" ] || { echo "unexpected: $*" >&2; exit 2; }\n'
        + body + "\n"
    )
    (bin_dir / "docker").chmod(0o755)


def engine_check(tmp_path, host: Host, declared: str, found: str | None) -> subprocess.CompletedProcess:
    stand_in_docker(tmp_path, found)
    script = host_check_script(host, [], root=str(tmp_path), engine=declared)
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60)


HOST = Host(name="npu-a", address="192.0.2.10")


@pytest.mark.parametrize(
    ("declared", "found", "stops"),
    [
        (NEW, "20.10.24", True),
        ("25.0", "24.0.7", True),
        (OLD, "28.5.2", True),
        ("24.0", "25.0.0", True),
        (OLD, "20.10.24", False),
        (OLD, "24.0.7", False),
        (NEW, "25.0.3", False),
        ("25", "28.5.2", False),
    ],
)
def test_the_host_check_stops_pulumi_up_when_the_engine_found_is_on_the_other_side_of_25(tmp_path, declared, found, stops):
    result = engine_check(tmp_path, HOST, declared, found)
    line = f"host npu-a is declared to run Docker Engine {declared}, but runs {found}: "
    assert (line in result.stderr) is stops, result.stderr
    if stops:
        assert result.returncode == 1
        paragraph = result.stderr[result.stderr.index(line):].split("\n  - ")[0]
        assert "Set ascend-fleet:dockerEngine, or dockerEngine on host npu-a in ascend-fleet:hosts" in paragraph


def test_a_host_with_its_own_engine_is_told_to_change_that_key(tmp_path):
    host = Host(name="npu-b", address="192.0.2.11", dockerEngine=NEW)
    result = engine_check(tmp_path, host, NEW, "20.10.24")
    assert "Set dockerEngine on host npu-b in ascend-fleet:hosts to the version it runs" in result.stderr, result.stderr


def test_an_unreadable_engine_version_only_warns(tmp_path):
    result = engine_check(tmp_path, HOST, NEW, None)
    assert "could not read the Docker Engine version of host npu-a" in result.stderr
    assert "is declared to run Docker Engine" not in result.stderr


def test_every_host_check_of_a_deployment_compares_the_engine_declared_for_its_host():
    deployment = deployment_of(fleet_values(), "health")
    checks = {hd.name: hd.check_script for hd in deployment.hosts}
    assert "declared to run Docker Engine 20.10, but runs" in checks["npu-a"]
    assert "declared to run Docker Engine 28.5, but runs" in checks["npu-b"]


def test_the_restart_table_says_the_probe_settings_re_create_containers():
    rows = [line for line in restart_table().splitlines() if "healthStartIntervalSeconds" in line]
    assert len(rows) == 1 and "dockerEngine" in rows[0] and "`healthcheck`" in rows[0], rows
    assert "re-creates it" in rows[0]
