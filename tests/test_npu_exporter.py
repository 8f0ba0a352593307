"""The NPU exporter as part of the fleet (`metrics.npuExporter`): config, record, exports, Prometheus,
doctor and the Pulumi program under the mocks. Off by default: then nothing of it appears anywhere."""

from __future__ import annotations

import json
import shlex

import pytest
from ruamel.yaml import YAML

from allocation.errors import ConfigError
from views.exports import prometheus
from ops.doctor import drift
from ops.doctor.facts import HostFacts, LiveContainer
from ops.doctor.findings import host_findings
from views.exports.render import compose_files, docker_run_args, render
from records.exporter import ENTRYPOINT, NAME
from views.report import plan_json
from records.restarts import BY_KEY, CONSTANT_PROVIDER_INPUTS, INPUTS, changed
from records.runtime import named
from tests.support.stacks import fleet, host, service
from tests.support.provider_readback import FORCE_NEW, attribute
from tests.support.pulumi_harness import ASCEND_HOST, CONTAINER, PROVIDER, REMOTE_IMAGE, fake_image_id, run_program
from tests.support.doctor import clean_facts, host_image_ids, inspect_of, make_fleet, with_container
from tests.support.stacks import values
from tests.support.pipeline import deployment_of

IMAGE = "registry.example/npu-exporter:v6.0.0"
ON = {"npuExporter": {"image": IMAGE}}


def two_hosts(metrics=None):
    """npu-a and npu-b in use, npu-c idle."""
    extra = {} if metrics is None else {"metrics": metrics}
    hosts = [host("npu-a"), host("npu-b"), host("npu-c")]
    return deployment_of(fleet(hosts, [service("x", host="npu-a"), service("y", host="npu-b")], **extra))


# ---- config ------------------------------------------------------------------------------------


def test_the_exporter_is_off_by_default_and_no_host_gets_one():
    assert all(hd.exporter is None for hd in two_hosts().hosts)


def test_turning_it_on_needs_an_image():
    with pytest.raises(ConfigError, match="image"):
        fleet([host()], [service("x")], metrics={"npuExporter": {}})


@pytest.mark.parametrize("port", [1024, 40001, 60000])
def test_a_port_the_exporter_refuses_is_one_paragraph_naming_the_key_and_the_range(port):
    with pytest.raises(ConfigError) as info:
        fleet([host()], [service("x")], metrics={**ON, "npuExporterPort": port})
    text = str(info.value)
    assert f"npuExporterPort {port}" in text and "1025-40000" in text and "\n" not in text


def test_the_limits_of_the_exporters_range_are_accepted_and_apply_only_when_it_is_on():
    for port in (1025, 40000):
        fleet([host()], [service("x")], metrics={**ON, "npuExporterPort": port})
    fleet([host()], [service("x")], metrics={"npuExporterPort": 60000})


def test_a_service_with_the_exporters_container_name_is_refused_while_it_is_on():
    with pytest.raises(ConfigError, match=f"service {NAME}: .*rename the service"):
        fleet([host()], [service(NAME)], metrics=ON)


# ---- the record --------------------------------------------------------------------------------


def test_each_host_in_use_gets_one_exporter_and_an_idle_host_none():
    hosts = {hd.name: hd for hd in two_hosts(ON).hosts}
    assert {n for n, hd in hosts.items() if hd.exporter is not None} == {"npu-a", "npu-b"}
    spec = hosts["npu-a"].exporter
    assert (spec.name, spec.image, spec.entrypoint, spec.privileged) == (NAME, IMAGE, ("/bin/bash", "-c", "--"), True)
    assert spec.ports == (8082,) and spec.device_files == ()
    assert [(m.source, m.target, m.read_only) for m in spec.mounts] == [
        (p, p, True) for p in ("/usr/local/Ascend/driver", "/usr/local/dcmi", "/etc/localtime", "/var/run/docker")
    ]
    [script] = spec.command
    assert script.startswith("umask 027; exec npu-exporter ")
    assert shlex.split(script.split("exec ", 1)[1]) == [
        "npu-exporter", "-port", "8082", "-ip", "0.0.0.0", "-containerMode", "docker"
    ]  # fmt: skip
    assert spec.labels["ascend-fleet.host"] == "npu-a"


def test_the_exporter_listens_at_the_configured_port():
    spec = two_hosts({**ON, "npuExporterPort": 9100}).hosts[0].exporter
    assert spec.ports == (9100,) and "-port 9100" in spec.command[0] and "/dev/tcp/127.0.0.1/9100" in spec.healthcheck.test[1]


def test_the_host_pulls_the_exporters_image_and_its_check_guards_the_exporters_port():
    hd = two_hosts(ON).hosts[0]
    off = two_hosts().hosts[0]
    assert IMAGE in hd.images and IMAGE not in off.images
    assert " 8082 " in hd.check_script and " 8082 " not in off.check_script


def test_the_entrypoint_reaches_the_plan_json_only_when_set():
    hd = two_hosts(ON).hosts[0]
    assert hd.exporter.to_json()["entrypoint"] == list(ENTRYPOINT)
    assert all("entrypoint" not in sd.spec.to_json() for sd in hd.services)


def test_a_changed_entrypoint_re_creates_the_container_and_a_new_one_against_none_too():
    old = two_hosts(ON).hosts[0].exporter.to_json()
    assert changed(old, {**old, "entrypoint": ["/bin/sh", "-c"]}) == (["entrypoint"], [])
    without = {k: v for k, v in old.items() if k != "entrypoint"}
    assert changed(without, old) == (["entrypoint"], [])
    assert changed(without, without) == ([], [])


# ---- exports -----------------------------------------------------------------------------------


def test_the_compose_file_runs_the_exporter_with_its_entrypoint_and_without_it_has_none():
    files = compose_files(two_hosts(ON))
    doc = YAML(typ="safe").load(files["npu-a.compose.yaml"])
    svc = doc["services"][NAME]
    assert svc["entrypoint"] == list(ENTRYPOINT) and svc["image"] == IMAGE and svc["privileged"] is True
    off = YAML(typ="safe").load(compose_files(two_hosts())["npu-a.compose.yaml"])
    assert NAME not in off["services"] and all("entrypoint" not in s for s in off["services"].values())
    assert NAME not in YAML(typ="safe").load(files["npu-c.compose.yaml"])["services"]


def test_docker_run_sets_the_entrypoint_s_first_word_and_passes_the_rest_before_the_command():
    spec = two_hosts(ON).hosts[0].exporter
    args = docker_run_args(spec)
    assert "--entrypoint=/bin/bash" in args
    assert args[args.index("--") :] == ["--", IMAGE, "-c", "--", spec.command[0]]
    script = render(two_hosts(ON), "docker-run")
    assert script.count(named(NAME)) == 2
    assert "--entrypoint" not in render(two_hosts(), "docker-run")


# ---- Prometheus --------------------------------------------------------------------------------


def _exporter_hosts(deployment) -> list[str]:
    return [t["labels"]["host"] for t in prometheus.targets(deployment)[prometheus.NPU_TARGETS]]


def test_prometheus_scrapes_exactly_the_deployed_exporters_when_the_fleet_deploys_them():
    assert _exporter_hosts(two_hosts(ON)) == ["npu-a", "npu-b"]


def test_a_router_only_host_s_exporter_is_scraped_too():
    hosts = [host("npu-a"), host("npu-b"), host("npu-c")]
    svc = service("x", 8, 0.9, replicas=2, router={"host": "npu-c"})
    deployment = deployment_of(fleet(hosts, [svc], metrics=ON))
    assert [hd.name for hd in deployment.hosts if not hd.services] == ["npu-c"]
    assert [hd.name for hd in deployment.hosts if hd.exporter is not None] == ["npu-a", "npu-b", "npu-c"]
    assert _exporter_hosts(deployment) == ["npu-a", "npu-b", "npu-c"]


def test_without_the_setting_prometheus_lists_every_host_with_services_as_before():
    assert _exporter_hosts(two_hosts()) == ["npu-a", "npu-b"]


# ---- doctor ------------------------------------------------------------------------------------


def test_doctor_plans_the_exporter_and_reports_it_missing_when_it_is_not_there():
    hd = two_hosts(ON).hosts[0]
    assert (NAME, hd.exporter, "as the host's NPU exporter") in hd.containers
    assert all(n != NAME for n, _, _ in two_hosts().hosts[0].containers)
    found = [f for f in host_findings(hd, HostFacts()) if f.container == NAME]
    assert [f.kind for f in found] == ["missing"]


def test_doctor_reports_a_stopped_exporter_and_an_entrypoint_changed_by_hand():
    hd = two_hosts(ON).hosts[0]
    stopped = LiveContainer.from_inspect(inspect_of(hd.exporter, cid="e", pid=0, status="exited", health=None))
    assert "stopped" in [f.kind for f in host_findings(hd, HostFacts(containers=(stopped,))) if f.container == NAME]
    inspect = inspect_of(hd.exporter, cid="e", pid=7)
    assert drift.differences(hd.exporter, LiveContainer.from_inspect(inspect), host_image_ids(hd.exporter)) == []
    inspect["Config"]["Entrypoint"] = ["/bin/bash", "-c", "cat /usr/local/agreement.txt; exec /bin/bash"]
    [(key, _, live)] = drift.differences(hd.exporter, LiveContainer.from_inspect(inspect), host_image_ids(hd.exporter))
    assert key == "entrypoint" and "agreement.txt" in live


def test_doctor_ignores_an_image_s_own_entrypoint_where_the_plan_sets_none():
    sd = two_hosts().hosts[0].services[0]
    inspect = inspect_of(sd.spec, cid="x", pid=7)
    inspect["Config"]["Entrypoint"] = ["/bin/sh", "-c"]
    assert drift.differences(sd.spec, LiveContainer.from_inspect(inspect), host_image_ids(sd.spec)) == []


# ---- the program under the mocks ---------------------------------------------------------------


@pytest.mark.parametrize("stack", ["prod", "staging"])
def test_with_the_setting_on_the_stack_creates_one_exporter_container_per_host_in_use(stack):
    run = run_program(stack, values(stack, ON))
    deployment = deployment_of(values(stack, ON), stack)
    in_use = [hd for hd in deployment.hosts if hd.in_use]
    exporters = {r.name: r for r in run.of_type("ascend-fleet:index:NpuExporter")}
    assert sorted(exporters) == sorted(f"{hd.name}-npu-exporter" for hd in in_use)
    containers = run.by_name(CONTAINER)
    providers = {r.name: r.urn for r in run.of_type(PROVIDER)}
    hosts = run.by_name(ASCEND_HOST)
    images = {(r.provider_urn, r.inputs["name"]) for r in run.of_type(REMOTE_IMAGE)}
    for hd in in_use:
        c = containers[f"{hd.name}-npu-exporter-container"]
        assert c.parent == exporters[f"{hd.name}-npu-exporter"].urn
        assert c.provider_urn == providers[f"{hd.name}-docker"]
        assert (providers[f"{hd.name}-docker"], IMAGE) in images
        assert hosts[hd.name].urn == run.by_urn()[providers[f"{hd.name}-docker"]].parent
        assert any(d.endswith(f"::{hd.name}-check") for d in c.dependencies)
        i = c.inputs
        assert (i["name"], i["image"], i["entrypoints"], i["privileged"]) == (NAME, fake_image_id(IMAGE), list(ENTRYPOINT), True)
        assert i["command"] == list(hd.exporter.command)
        assert [(p["internal"], p["external"]) for p in i["ports"]] == [(8082, 8082)]
        assert c.delete_before_replace is True


def test_with_the_setting_off_no_exporter_and_no_container_gets_an_entrypoint():
    run = run_program("prod", values("prod"))
    assert run.of_type("ascend-fleet:index:NpuExporter") == []
    assert all("entrypoints" not in c.inputs for c in run.of_type(CONTAINER))
    assert NAME not in json.dumps(run.containers())


def test_every_input_the_exporter_s_container_registers_is_classified_by_what_restarts():
    classified = {a for i in INPUTS for a in i.provider} | set(CONSTANT_PROVIDER_INPUTS)
    inputs = run_program("staging", values("staging", ON)).containers()[NAME]
    assert {attribute(k) for k in inputs} - classified == set()
    assert attribute("entrypoints") in FORCE_NEW and BY_KEY["entrypoint"].recreates


def test_a_host_running_exactly_the_plan_and_its_exporter_has_no_finding():
    plan = deployment_of(make_fleet(metrics=ON))
    hd = plan.hosts[0]
    facts = with_container(clean_facts(plan), inspect_of(hd.exporter, cid="exporter-id", pid=4000))
    assert host_findings(hd, facts) == []


def test_the_plan_json_carries_each_host_s_exporter_container_only_when_it_is_deployed():
    hosts = {h["name"]: h for h in plan_json(two_hosts(ON))["hosts"]}
    assert hosts["npu-a"]["npuExporter"]["entrypoint"] == list(ENTRYPOINT)
    assert "npuExporter" not in hosts["npu-c"]
    assert all("npuExporter" not in h for h in plan_json(two_hosts())["hosts"])
