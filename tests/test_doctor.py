"""doctor's judgement, from hand-made host facts: every kind of finding, and a clean host.

The facts are what `gather_script` would report; the live containers are built
from the deployment's container specs, so a clean host here is one that runs exactly the plan.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping

import pytest

import ops.doctor as doctor
from ops.doctor import drift
from allocation.config import Mount
from records.containers import CONTROL_DEVICES, DRIVER_MOUNTS, ContainerSpec, HealthCheck
from ops.doctor import render_reports
from ops.doctor.facts import FactsError, HostFacts, Listener, LiveContainer, parse_facts, parse_port_list, parse_ss
from ops.doctor.findings import host_findings, required
from ops.doctor.gather import MARK
from ops.framing import frame
from ops.npusmi import parse_topology
from ops.ssh import RemoteResult, run_script
from tests.support.stacks import fleet, host, service
from tests.support.pipeline import deployment_of
from tests.support.doctor import clean_facts, gathered, host_image_ids, inspect_of, make_fleet, with_container
from tests.support.doctor import DEVICE_SHARE_ON, FULL_MESH, PIDS, npu_info
from tests.support.doctor import TOPO_SCREEN, with_link
from tests.support.doctor import findings


@pytest.fixture
def plan():
    return deployment_of(make_fleet())


def at_rest(plan, facts: HostFacts, name: str) -> HostFacts:
    """The facts without the processes of a service that no longer runs: its ranks and its docker-proxy."""
    base, api = PIDS[name], spec_of(plan, name).api_port
    procs = tuple(p for p in facts.npu.processes if not base <= p.pid < base + 100)
    listeners = tuple(x for x in facts.listeners if x.port != api)
    return dataclasses.replace(facts, npu=dataclasses.replace(facts.npu, processes=procs), listeners=listeners)


def kinds(found) -> list[tuple[str, str | None]]:
    return [(f.kind, f.service) for f in found]


def spec_of(plan, name):
    return next(sd.spec for sd in plan.services() if sd.name == name)


# ---- a clean host ---------------------------------------------------------


def test_a_host_running_exactly_the_plan_has_no_findings(plan):
    assert findings(plan, clean_facts(plan)) == []


def test_env_the_image_sets_itself_is_not_drift(plan):
    facts = clean_facts(plan)
    spec = spec_of(plan, "alpha")
    facts = with_container(facts, inspect_of(spec, cid="alpha-id", pid=1000, env={"ASCEND_HOME": "/usr/local/Ascend"}))
    assert findings(plan, facts) == []


def test_a_container_still_starting_is_not_a_finding(plan):
    facts = with_container(clean_facts(plan), inspect_of(spec_of(plan, "beta"), cid="beta-id", pid=2000, health="starting"))
    assert findings(plan, facts) == []


# ---- planned containers ---------------------------------------------------


def test_a_planned_container_that_does_not_exist_is_missing(plan):
    facts = clean_facts(plan)
    facts = dataclasses.replace(facts, containers=tuple(c for c in facts.containers if c.name != "gamma"))
    facts = at_rest(plan, facts, "gamma")
    found = findings(plan, facts)
    assert kinds(found) == [("missing", "gamma")]
    assert "cards 2,3" in found[0].message and "API port 8002" in found[0].message


@pytest.mark.parametrize(
    ("status", "kind"),
    [("exited", "stopped"), ("created", "stopped"), ("restarting", "restarting")],
)
def test_a_planned_container_that_is_not_running_is_reported_by_its_state(plan, status, kind):
    facts = with_container(clean_facts(plan), inspect_of(spec_of(plan, "alpha"), cid="alpha-id", pid=1000, status=status, health=None))
    if status != "restarting":
        facts = at_rest(plan, facts, "alpha")
    found = findings(plan, facts)
    assert kinds(found) == [(kind, "alpha")]
    assert status in found[0].message


def test_a_running_container_failing_its_health_check_is_unhealthy(plan):
    facts = with_container(clean_facts(plan), inspect_of(spec_of(plan, "beta"), cid="beta-id", pid=2000, health="unhealthy"))
    assert kinds(findings(plan, facts)) == [("unhealthy", "beta")]


# ---- drift ----------------------------------------------------------------


def test_a_changed_hccl_range_is_drift_that_names_the_variable_and_both_values(plan):
    spec = spec_of(plan, "alpha")
    facts = with_container(
        clean_facts(plan),
        inspect_of(spec, cid="alpha-id", pid=1000, env={"HCCL_NPU_SOCKET_PORT_RANGE": "16666-16670"}),
    )
    found = findings(plan, facts)
    assert kinds(found) == [("drift", "alpha")]
    assert found[0].key == "env HCCL_NPU_SOCKET_PORT_RANGE"
    assert found[0].message.endswith("env HCCL_NPU_SOCKET_PORT_RANGE: 16666-16681 (plan) != 16666-16670 (live)")


def test_image_devices_ports_and_an_unset_variable_are_each_their_own_drift(plan):
    spec = spec_of(plan, "gamma")
    inspect = inspect_of(
        spec,
        cid="gamma-id",
        pid=3000,
        image="quay.io/ascend/vllm-ascend:v0.9.0",
        devices=["/dev/davinci2", *CONTROL_DEVICES],
        ports={"8002/tcp": [{"HostIp": "", "HostPort": "9002"}]},
    )
    inspect["Config"]["Env"] = [e for e in inspect["Config"]["Env"] if not e.startswith("VLLM_PORT=")]
    found = findings(plan, with_container(clean_facts(plan), inspect))
    assert {f.key for f in found if f.kind == "drift"} == {"image", "devices", "published ports", "env VLLM_PORT"}
    messages = " | ".join(f.message for f in found)
    assert "env VLLM_PORT: 62032 (plan) != (unset) (live)" in messages
    assert "lacking /dev/davinci3" in messages
    assert "8002->8002 (plan) != 9002->8002 (live)" in messages


def test_a_changed_ascend_fleet_label_is_drift_named_by_the_label(plan):
    spec = spec_of(plan, "gamma")
    labels = {**spec.labels, "ascend-fleet.devices": "4,5"}
    found = findings(plan, with_container(clean_facts(plan), inspect_of(spec, cid="gamma-id", pid=3000, labels=labels)))
    assert kinds(found) == [("drift", "gamma")]
    assert found[0].key == "label ascend-fleet.devices"
    assert found[0].message.endswith("label ascend-fleet.devices: 2,3 (plan) != 4,5 (live)")


def test_a_privileged_container_whose_plan_is_not_privileged_is_drift(plan):
    spec = spec_of(plan, "alpha")
    assert not spec.privileged
    live = inspect_of(spec, cid="alpha-id", pid=1000, privileged=True)
    found = findings(plan, with_container(clean_facts(plan), live))
    assert kinds(found) == [("drift", "alpha")]
    assert found[0].key == "privileged"
    assert found[0].message.endswith("privileged: false (plan) != true (live)")


# ---- drift through the one container record ---------------------------------


def _changed(value: Any) -> Any:
    """Another value of the same kind, for any field of ContainerSpec or HealthCheck."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int) or value is None:
        return (value or 9000) + 1
    if isinstance(value, str):
        return value + "-x"
    if isinstance(value, tuple):
        return (*value, Mount(source="/srv/extra", target="/extra") if value and isinstance(value[0], Mount) else "/x")
    if isinstance(value, Mapping):
        return {**value, "ascend-fleet.extra": "x"}
    raise AssertionError(f"no changed value for {value!r}: teach _changed this kind")


def live_of(spec, **overrides) -> LiveContainer:
    return LiveContainer.from_inspect(inspect_of(spec, cid="c-id", pid=3000, **overrides))


def differences(planned: ContainerSpec, live: LiveContainer, spec: ContainerSpec) -> list:
    """Drift of `live` (made from `spec`) against `planned`, on a host that has `spec`'s image."""
    return drift.differences(planned, live, host_image_ids(spec))


def test_the_drift_table_names_every_field_of_the_container_record_and_of_its_health_check():
    """A field added to the record without a comparison (or a reason Docker cannot show it) fails here."""
    assert set(drift.FIELDS) == {f.name for f in dataclasses.fields(ContainerSpec)}
    assert set(drift.HEALTHCHECK) == {f.name for f in dataclasses.fields(HealthCheck)}


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(ContainerSpec)])
def test_each_field_of_the_container_record_changed_is_drift_unless_docker_cannot_keep_it(plan, field):
    spec = spec_of(plan, "gamma")
    live = live_of(spec)
    assert differences(spec, live, spec) == []
    if isinstance(drift.FIELDS[field], str):
        assert field in ("name", "start_timeout_seconds"), "only what docker inspect cannot show goes uncompared"
        return
    value = getattr(spec, field)
    if isinstance(value, HealthCheck):
        for sub in dataclasses.fields(HealthCheck):
            planned = dataclasses.replace(spec, healthcheck=dataclasses.replace(value, **{sub.name: _changed(getattr(value, sub.name))}))
            assert differences(planned, live, spec), f"healthcheck {sub.name} changed is not drift"
        return
    # Set, where the plan had none.
    other = ("/bin/sh", "-c") if field == "entrypoint" else "host" if field == "network_mode" else _changed(value)
    assert differences(dataclasses.replace(spec, **{field: other}), live, spec), f"{field} changed is not drift"


def test_a_hand_edit_of_max_model_len_in_the_command_is_drift_naming_the_flag_and_both_values():
    plan = deployment_of(fleet([host("npu-a")], [service("qwen", 2, 0.9, devices=[4, 5], maxModelLen=25000)]))
    spec = spec_of(plan, "qwen")
    edited = list(spec.command)
    edited[edited.index("--max-model-len") + 1] = "30000"
    inspect = inspect_of(spec, cid="q-id", pid=3000)
    inspect["Config"]["Cmd"] = edited
    facts = HostFacts(containers=(LiveContainer.from_inspect(inspect),), image_ids=host_image_ids(spec))
    [found] = [f for f in host_findings(plan.hosts[0], facts) if f.kind == "drift"]
    assert found.key.startswith("command (argument ") and "after --max-model-len" in found.key
    assert found.message.endswith(": 25000 (plan) != 30000 (live)")


def test_a_container_re_created_by_hand_with_docker_run_and_another_mount_is_drift_naming_both_mounts(plan):
    spec = spec_of(plan, "alpha")
    inspect = inspect_of(spec, cid="alpha-id", pid=1000)
    binds = [f"{m.source}:{m.target}{':ro' if m.read_only else ''}" for m in spec.mounts]
    binds[-1] = f"/data/other:{spec.mounts[-1].target}:ro"
    inspect["HostConfig"].update(Mounts=None, Binds=binds)  # `docker run -v` keeps them as Binds
    [found] = findings(plan, with_container(clean_facts(plan), inspect))
    assert (found.kind, found.key) == ("drift", "mounts")
    gone = f"{spec.mounts[-1].source}:{spec.mounts[-1].target}"
    assert f"extra /data/other:{spec.mounts[-1].target}:ro" in found.message and f"lacking {gone}" in found.message


def test_the_same_mounts_as_binds_or_as_mounts_are_no_drift(plan):
    spec = spec_of(plan, "alpha")
    inspect = inspect_of(spec, cid="alpha-id", pid=1000)
    binds = [f"{m.source}:{m.target}{':ro,rprivate' if m.read_only else ''}" for m in spec.mounts]
    inspect["HostConfig"].update(Mounts=[], Binds=binds)
    assert findings(plan, with_container(clean_facts(plan), inspect)) == []


def test_docker_units_are_read_as_docker_keeps_them_and_shown_in_the_plans_terms(plan):
    """ShmSize in bytes, StopTimeout in seconds, health-check durations in nanoseconds."""
    spec = spec_of(plan, "alpha")
    inspect = inspect_of(spec, cid="alpha-id", pid=1000, restart="always")
    inspect["HostConfig"]["ShmSize"] = 64 * 1024 * 1024
    inspect["Config"]["StopTimeout"] = None
    inspect["Config"]["Healthcheck"]["Interval"] = 5 * 10**9
    found = {f.key: f.message for f in findings(plan, with_container(clean_facts(plan), inspect))}
    assert set(found) == {"restart policy", "shm size", "stop timeout", "healthcheck interval"}
    assert found["restart policy"].endswith(f"{spec.restart} (plan) != always (live)")
    assert found["shm size"].endswith(f"{spec.shm_size_mib * 1024 * 1024} bytes (plan) != 67108864 bytes (live)")
    assert found["stop timeout"].endswith(f"{spec.stop_grace_seconds}s (plan) != (unset: Docker's default 10s) (live)")
    assert found["healthcheck interval"].endswith(f"{spec.healthcheck.interval_seconds}s (plan) != 5s (live)")


def test_a_container_without_a_health_check_or_with_another_log_driver_is_drift(plan):
    inspect = inspect_of(spec_of(plan, "beta"), cid="beta-id", pid=2000)
    inspect["Config"]["Healthcheck"] = None
    inspect["HostConfig"]["LogConfig"]["Type"] = "journald"
    keys = {f.key for f in findings(plan, with_container(clean_facts(plan), inspect))}
    assert keys == {"healthcheck", "log driver"}


def test_labels_and_env_docker_merges_in_from_the_image_are_not_drift_but_an_extra_sysctl_is(plan):
    inspect = inspect_of(spec_of(plan, "beta"), cid="beta-id", pid=2000, env={"ASCEND_TOOLKIT_HOME": "/usr/local/Ascend"})
    assert "org.opencontainers.image.vendor" in inspect["Config"]["Labels"]
    inspect["HostConfig"]["Sysctls"]["net.core.somaxconn"] = "4096"
    [found] = findings(plan, with_container(clean_facts(plan), inspect))
    assert found.key == "sysctl net.core.somaxconn" and found.message.endswith("(unset) (plan) != 4096 (live)")


def test_a_hostile_live_command_is_shown_escaped_and_bounded(plan):
    inspect = inspect_of(spec_of(plan, "alpha"), cid="alpha-id", pid=1000)
    inspect["Config"]["Cmd"] = ["\x1b]0;pwned\x07" + "A" * 100_000]
    [found] = findings(plan, with_container(clean_facts(plan), inspect))
    assert found.key.startswith("command") and "\x1b" not in found.message and len(found.message) < 1000
    assert "\\x1b" in found.message


# ---- foreign cards --------------------------------------------------------


def test_an_unplanned_container_with_a_planned_card_is_foreign_on_that_card(plan):
    spec = spec_of(plan, "alpha")
    stray = inspect_of(
        spec, cid="stray-id", pid=9000, name="stray", labels={}, ports={},
        devices=["/dev/davinci0", "/dev/davinci5", *CONTROL_DEVICES],
        env={"HCCL_NPU_SOCKET_PORT_RANGE": "30000-30015"},
    )  # fmt: skip
    facts = with_container(clean_facts(plan), stray, {9000, 9010})
    facts = dataclasses.replace(facts, npu=npu_info([(0, 1010), (0, 2010), (2, 3010), (3, 3011), (0, 9010)]))
    found = findings(plan, facts)
    assert [(f.kind, f.container, f.card) for f in found] == [("foreign-card", "stray", 0)]
    assert "planned for alpha, beta" in found[0].message


def test_a_process_on_a_planned_card_outside_every_container_is_foreign(plan):
    facts = clean_facts(plan)
    facts = dataclasses.replace(facts, npu=npu_info([(0, 1010), (0, 2010), (2, 3010), (3, 3011), (3, 4242)]))
    found = findings(plan, facts)
    assert [(f.kind, f.card, f.service) for f in found] == [("foreign-card", 3, "gamma")]
    assert "process 4242" in found[0].message


def test_a_planned_service_process_on_another_services_card_is_foreign_there(plan):
    facts = clean_facts(plan)
    facts = dataclasses.replace(facts, npu=npu_info([(0, 1010), (0, 2010), (2, 3010), (3, 3011), (2, 1010)]))
    found = findings(plan, facts)
    assert [(f.kind, f.card, f.container) for f in found] == [("foreign-card", 2, "alpha")]


def test_processes_on_cards_outside_the_plan_are_none_of_doctors_business(plan):
    facts = clean_facts(plan)
    facts = dataclasses.replace(facts, npu=npu_info([(0, 1010), (0, 2010), (2, 3010), (3, 3011), (7, 4242)]))
    assert findings(plan, facts) == []


def test_a_privileged_unplanned_container_sees_every_planned_card(plan):
    stray = inspect_of(spec_of(plan, "alpha"), cid="priv-id", pid=9000, name="priv", labels={}, ports={},
                       devices=[], privileged=True, env={"HCCL_NPU_SOCKET_PORT_RANGE": "40000-40015"})  # fmt: skip
    found = findings(plan, with_container(clean_facts(plan), stray))
    assert [(f.kind, f.container) for f in found] == [("foreign-card", "priv")]
    assert "privileged" in found[0].message and "0, 2, 3" in found[0].message


# ---- foreign ports --------------------------------------------------------


def test_a_listener_inside_a_planned_window_that_is_not_the_service_is_a_foreign_port(plan):
    facts = clean_facts(plan)
    facts = dataclasses.replace(facts, listeners=facts.listeners + (Listener("0.0.0.0", 62020, (("python3", 777),)),))
    found = findings(plan, facts)
    assert [(f.kind, f.service, f.port, f.key) for f in found] == [("foreign-port", "beta", 62020, "vllmPort")]
    assert "python3 (pid 777)" in found[0].message and "62016-62031" in found[0].message


def test_a_service_listening_in_its_own_window_is_fine(plan):
    facts = clean_facts(plan)
    facts = dataclasses.replace(facts, listeners=facts.listeners + (Listener("0.0.0.0", 62001, (("python3", 1010),)),))
    assert findings(plan, facts) == []


def test_another_container_publishing_a_planned_api_port_is_a_foreign_port(plan):
    stray = inspect_of(spec_of(plan, "alpha"), cid="web-id", pid=9000, name="web", labels={}, devices=[],
                       ports={"80/tcp": [{"HostIp": "", "HostPort": "8001"}]})  # fmt: skip
    facts = clean_facts(plan)
    facts = dataclasses.replace(facts, containers=tuple(c for c in facts.containers if c.name != "beta"))
    facts = with_container(at_rest(plan, facts, "beta"), stray)
    facts = dataclasses.replace(facts, listeners=facts.listeners + (Listener("0.0.0.0", 8001, (("docker-proxy", 9500),)),))
    found = findings(plan, facts)
    assert ("foreign-port", "beta", "web", 8001) in [(f.kind, f.service, f.container, f.port) for f in found]
    assert ("missing", "beta") in kinds(found)


def test_an_unplanned_container_sharing_a_card_with_an_overlapping_hccl_range_is_the_clash_the_plan_prevents(plan):
    stray = inspect_of(spec_of(plan, "alpha"), cid="stray-id", pid=9000, name="stray", labels={}, ports={},
                       devices=["/dev/davinci0", *CONTROL_DEVICES],
                       env={"HCCL_NPU_SOCKET_PORT_RANGE": "16690-16700"})  # fmt: skip
    found = findings(plan, with_container(clean_facts(plan), stray, {9000}))
    ports = [f for f in found if f.kind == "foreign-port"]
    assert [(f.service, f.container, f.card, f.port) for f in ports] == [("beta", "stray", 0, 16690)]
    assert "16690-16700" in ports[0].message and "16682-16697" in ports[0].message


def test_an_unplanned_container_without_hccl_range_uses_the_default_port_16666(plan):
    stray = inspect_of(spec_of(plan, "alpha"), cid="stray-id", pid=9000, name="stray", labels={}, ports={},
                       devices=["/dev/davinci0", *CONTROL_DEVICES])  # fmt: skip
    stray["Config"]["Env"] = ["PATH=/usr/bin"]
    found = findings(plan, with_container(clean_facts(plan), stray, {9000}))
    assert [(f.kind, f.service, f.port) for f in found if f.kind == "foreign-port"] == [("foreign-port", "alpha", 16666)]
    assert "default 16666" in found[-1].message


@pytest.mark.parametrize("restart", ["no", "", "unless-stopped", "on-failure"])
def test_a_stopped_unplanned_container_docker_would_not_start_again_holds_nothing(plan, restart):
    """Docker's docs (start-containers-automatically): `unless-stopped` stays stopped "even after Docker
    daemon restarts"; `on-failure` "doesn't restart the container if the daemon restarts"."""
    stray = inspect_of(spec_of(plan, "alpha"), cid="old-id", pid=0, name="old", labels={}, status="exited", health=None,
                       restart=restart, privileged=True)  # fmt: skip
    assert findings(plan, with_container(clean_facts(plan), stray)) == []


def seed_container(plan, name: str, status: str, port: int) -> dict[str, Any]:
    """A container of the original docker-compose deployment: `restart: always`, privileged, every card."""
    return inspect_of(
        spec_of(plan, "alpha"), cid=f"{name}-id", pid=0 if status == "exited" else 7000, name=name, labels={},
        status=status, health=None, restart="always", privileged=True,
        devices=[f"/dev/davinci{c}" for c in range(8)], ports={f"{port}/tcp": [{"HostIp": "", "HostPort": str(port)}]},
        env={"HCCL_NPU_SOCKET_PORT_RANGE": "40000-40010"},
    )  # fmt: skip


@pytest.mark.parametrize("status", ["exited", "created"])
def test_a_stopped_container_outside_the_plan_that_restart_always_brings_back_is_foreign_with_the_fix_that_lasts(plan, status):
    """Stopped by hand, an `always` container is "restarted only when Docker daemon restarts": after a reboot
    it takes the cards again (docs.docker.com/engine/containers/start-containers-automatically/)."""
    facts = with_container(clean_facts(plan), seed_container(plan, "model-text", status, 8001))
    found = findings(plan, facts)
    assert [(f.kind, f.container) for f in found] == [("foreign-card", "model-text"), ("foreign-port", "model-text")]
    for f in found:
        assert f"container model-text (not in the plan; {status}, restart policy always:" in f.message
        assert "`docker update --restart=no model-text && docker stop model-text` (or `docker rm -f model-text`)" in f.message
    assert "publishes port 8001" in found[1].message and found[1].port == 8001 and found[1].service == "beta"


def test_a_running_container_outside_the_plan_names_its_state_restart_policy_and_the_fix(plan):
    facts = with_container(clean_facts(plan), seed_container(plan, "model-emb-vl", "running", 7007), {7000})
    [found] = findings(plan, facts)
    assert (found.kind, found.container) == ("foreign-card", "model-emb-vl")
    assert "(not in the plan; running, restart policy always: it comes back after a reboot too)" in found.message
    assert "docker update --restart=no model-emb-vl && docker stop model-emb-vl" in found.message


def test_a_container_the_host_replaces_running_again_is_named_as_taken_over_with_what_started_it(plan):
    fleet_ = make_fleet()
    taken_over = deployment_of(fleet_.model_copy(update={"hosts": [fleet_.hosts[0].model_copy(update={"replaces": ["model-emb-vl"]})]}))
    old = seed_container(plan, "model-emb-vl", "running", 7007)
    old["HostConfig"]["RestartPolicy"] = {"Name": "no"}  # as the takeover left it, then started by compose
    old["Config"]["Labels"] = {"com.docker.compose.project": "models", "com.docker.compose.project.working_dir": "/srv/models"}
    [found] = findings(taken_over, with_container(clean_facts(taken_over), old, {7000}))
    assert (found.kind, found.container) == ("foreign-card", "model-emb-vl")
    assert (
        "container model-emb-vl (taken over: host npu-a replaces it, yet it is running, restart policy no: "
        "a reboot stops it)"
    ) in found.message
    assert found.message.endswith(
        "; `docker compose up -d` in /srv/models starts it again: after burn-in run `docker compose down` there, "
        "or move the compose file away"
    )
    [unlabelled] = findings(taken_over, with_container(clean_facts(taken_over), seed_container(plan, "model-emb-vl", "running", 7007), {7000}))
    assert "`docker compose up -d` in its old project directory starts it again" in unlabelled.message


def test_the_fix_quotes_a_container_name_for_the_shell(plan):
    stray = seed_container(plan, "x;reboot", "exited", 7007)
    [found] = findings(plan, with_container(clean_facts(plan), stray))
    assert "docker update --restart=no 'x;reboot' && docker stop 'x;reboot'" in found.message


# ---- the host -------------------------------------------------------------


def test_missing_driver_device_files_and_unhealthy_cards_are_host_findings(plan):
    facts = dataclasses.replace(
        clean_facts(plan),
        missing=frozenset({"/usr/local/Ascend/driver", "/dev/hisi_hdc", "/dev/davinci3"}),
        npu=dataclasses.replace(npu_info([(0, 1010), (0, 2010), (2, 3010), (3, 3011)], {2: "Alarm"})),
    )
    found = findings(plan, facts)
    assert [f.kind for f in found] == ["host"] * 4
    assert [f.message for f in found] == [
        "host npu-a: missing device /dev/davinci3",
        "host npu-a: missing device /dev/hisi_hdc",
        "host npu-a: missing Ascend driver folder /usr/local/Ascend/driver",
        "host npu-a: card 2 health is Alarm (planned for gamma)",
    ]


@pytest.mark.parametrize("path", [*DRIVER_MOUNTS, "/dev/davinci5"])
def test_a_missing_driver_path_every_container_mounts_or_an_unused_card_is_a_host_finding(plan, path):
    """Docker refuses a container whose bind-mount source is missing; and doctor judges the host as
    configured, so a card no service uses (5) must be there too."""
    found = findings(plan, dataclasses.replace(clean_facts(plan), missing=frozenset({path})))
    assert [(f.kind, f.message.endswith(f" {path}")) for f in found] == [("host", True)]


def test_a_path_the_host_prints_that_no_requirement_names_is_no_finding(plan):
    """The host's output is hostile: only the table's own paths, in its own words, are reported."""
    printed = frozenset({"/etc/passwd", "/dev/davinci8", "missing device /dev/davinci0 (forged)"})
    assert findings(plan, dataclasses.replace(clean_facts(plan), missing=printed)) == []


def test_npu_smi_failing_and_docker_not_answering_are_host_findings(plan):
    facts = dataclasses.replace(clean_facts(plan), npu=None, npu_error="npu-smi info exited 255: dcmi error -8005",
                                docker_error="Cannot connect to the Docker daemon", containers=())  # fmt: skip
    found = findings(plan, facts)
    assert [f.kind for f in found] == ["host", "host"]
    assert "-8005" in found[0].message and "docker does not answer" in found[1].message


# ---- parsing the gathered text ---------------------------------------------


def test_the_gathered_sections_become_facts(plan):
    spec = spec_of(plan, "alpha")
    inspect = inspect_of(spec, cid="abc", pid=1000)
    npu = str(Path(__file__).parent / "data/npu-smi/npu-smi-info-910b3-idle.txt")
    ss = "\n".join([
        'LISTEN 0      4096         0.0.0.0:8000      0.0.0.0:*    users:(("docker-proxy",pid=26623,fd=4))',
        'LISTEN 0      4096            [::]:8000         [::]:*    users:(("docker-proxy",pid=26630,fd=4))',
        "LISTEN 0      128          0.0.0.0:2024      0.0.0.0:*",
    ])  # fmt: skip
    text = gathered(
        ("docker-inspect", "", json.dumps([inspect], indent=2)), ("top", "abc", "PID\n1000\n1010\n"), ("ss", "", ss),
        ("npu-smi", "", open(npu).read()), ("npu-smi-rc", "", "0\n"),
        ("missing", "", "/usr/local/dcmi\n/dev/davinci3\n"),
    )  # fmt: skip
    facts = parse_facts(text)
    assert [c.name for c in facts.containers] == ["alpha"]
    assert facts.containers[0].env["HCCL_NPU_SOCKET_PORT_RANGE"] == "16666-16681"
    assert facts.pids == {"abc": frozenset({1000, 1010})}
    assert [(x.address, x.port, x.processes) for x in facts.listeners] == [
        ("0.0.0.0", 8000, (("docker-proxy", 26623),)),
        ("[::]", 8000, (("docker-proxy", 26630),)),
        ("0.0.0.0", 2024, ()),
    ]
    assert len(facts.npu.npus) == 8 and facts.npu_error is None
    assert facts.missing == {"/usr/local/dcmi", "/dev/davinci3"}
    assert facts.docker_error is None


def test_output_cut_short_is_an_error_not_a_clean_host():
    with pytest.raises(FactsError, match="cut short"):
        parse_facts(frame(MARK, "docker-inspect", "", "[]"))


def test_ss_output_with_a_header_and_several_owners():
    listeners = parse_ss(
        "State  Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n"
        'LISTEN 0 128 *:16666 *:* users:(("python3",pid=5,fd=3),("python3",pid=6,fd=3))\n'
    )
    assert listeners == (Listener("*", 16666, (("python3", 5), ("python3", 6))),)


@pytest.mark.parametrize(
    ("value", "spans"),
    [("16666-16681", [(16666, 16681)]), ("61000,61050-61100", [(61000, 61000), (61050, 61100)]),
     ("16666", [(16666, 16666)]), ("auto", None), ("", None)],
)  # fmt: skip
def test_port_lists_are_read_as_hccl_writes_them(value, spans):
    assert parse_port_list(value) == spans


# ---- the whole run, with the round trips faked ----------------------------


def test_an_unreachable_host_is_a_finding_and_the_other_hosts_are_still_checked(monkeypatch):
    fleet_config = fleet([host("npu-a"), host("npu-b")], [service("alpha", 1, 0.4, host="npu-a", devices=[0])])
    plan = deployment_of(fleet_config)

    def fake_run_script(h, script, *, timeout=None):
        if h.name == "npu-b":
            return RemoteResult(False, None, "", "", 2.0, "ssh: connect to host npu-b.example port 22: Connection timed out")
        return RemoteResult(True, 0, gathered(("docker-inspect", "", "[]"), ("npu-smi-rc", "", "0")), "", 0.1)

    monkeypatch.setattr(doctor, "run_script", fake_run_script)
    text, code = doctor.run(plan, "json")
    report = json.loads(text)
    assert code == 1 and report["ok"] is False and report["stack"] == "test"
    a, b = report["hosts"]
    assert (a["name"], a["reachable"], b["name"], b["reachable"]) == ("npu-a", True, "npu-b", False)
    assert "missing" in [f["kind"] for f in a["findings"]]
    assert [f["kind"] for f in b["findings"]] == ["unreachable"]
    assert "Connection timed out" in b["findings"][0]["message"]


def test_a_script_for_a_unix_docker_host_runs_locally_with_docker_host_set_to_that_socket(monkeypatch):
    """No ssh: a real local `sh` runs the script, pointed at the host's daemon, not the caller's."""
    monkeypatch.setenv("DOCKER_HOST", "tcp://elsewhere.example:2375")
    config = fleet([host("dev", dockerHost="unix:///tmp/x.sock")], [])
    result = run_script(deployment_of(config).hosts[0], 'echo "$DOCKER_HOST"\n')
    assert (result.reachable, result.returncode, result.stderr) == (True, 0, "")
    assert result.stdout == "unix:///tmp/x.sock\n"


def test_the_table_says_ok_for_a_clean_host_and_lists_findings_otherwise():
    clean = doctor.HostReport("npu-a", True, ())
    bad = doctor.HostReport("npu-b", False, (doctor.Finding("unreachable", "host npu-b is unreachable: timeout"),))
    assert render_reports("prod", [clean], "table") == "stack prod: 1 host(s), ok\n\nhost npu-a: ok"
    table = render_reports("prod", [clean, bad], "table")
    assert "host npu-b: 1 finding(s)\n  unreachable  host npu-b is unreachable: timeout" in table


@pytest.mark.parametrize("inspect", ['{"Id": "x"}', "[1, 2]", '[{"Config": "x"}]', '[{"State": {"Pid": "x"}}]'])
def test_docker_inspect_json_of_an_unexpected_shape_is_a_host_finding_not_a_crash(plan, inspect):
    facts = parse_facts(gathered(("docker-inspect", "", inspect), ("npu-smi-rc", "", "0")))
    assert facts.containers == () and "unexpected shape" in facts.docker_error
    assert [f.kind for f in findings(plan, facts) if "docker does not answer" in f.message] == ["host"]


def test_log_options_dockerd_merged_in_from_daemon_json_are_drift(plan):
    spec = spec_of(plan, "alpha")
    facts = with_container(clean_facts(plan), inspect_of(spec, cid="alpha-id", pid=1000, log_opts={"compress": "true"}))
    [found] = findings(plan, facts)
    assert (found.kind, found.key) == ("drift", "log options")
    assert "compress=true" in found.message


def test_a_container_without_its_reserved_ports_sysctl_or_in_host_ipc_is_drift(plan):
    spec = spec_of(plan, "beta")
    inspect = inspect_of(spec, cid="beta-id", pid=2000)
    inspect["HostConfig"].update(Sysctls={}, IpcMode="host")
    keys = {f.key for f in findings(plan, with_container(clean_facts(plan), inspect))}
    assert keys == {"ipc mode", "sysctl net.ipv4.ip_local_reserved_ports"}


# ---- shared cards -------------------------------------------------------------


def test_a_shared_card_out_of_device_share_mode_is_a_sharing_finding_naming_card_and_services(plan):
    assert plan.hosts[0].shared_cards == (0,)
    off = "NPU ID : 0 Chip Count : 1 Device-share Status : False Chip ID : 0"
    found = findings(plan, dataclasses.replace(clean_facts(plan), device_share={0: off}))
    assert kinds(found) == [("sharing", None)]
    assert found[0].card == 0 and "alpha and beta" in found[0].message and "False" in found[0].message


def test_a_shared_card_npu_smi_said_nothing_of_is_a_sharing_finding(plan):
    found = findings(plan, dataclasses.replace(clean_facts(plan), device_share={}))
    assert kinds(found) == [("sharing", None)] and "no answer" in found[0].message


@pytest.mark.parametrize("sharing", ["privileged", "refuse"])
def test_hosts_that_do_not_use_device_share_mode_get_no_sharing_finding(sharing):
    services = [service("alpha", 1, 0.4, devices=[0]), service("beta", 1, 0.4, devices=[0 if sharing != "refuse" else 1])]
    deployment = deployment_of(fleet([host("npu-a", cardSharing=sharing)], services))
    found = host_findings(deployment.hosts[0], dataclasses.replace(HostFacts(), device_share={}))
    assert "sharing" not in [f.kind for f in found]


def test_the_gather_script_reads_the_device_share_mode_of_exactly_the_shared_cards(plan):
    from ops.doctor.gather import gather_script

    script = gather_script(required(plan.hosts[0]), (0, 5))
    assert "npu-smi info -t device-share -i 0 -c 0" in script and "-i 5 -c 0" in script
    assert "device-share" not in gather_script(required(plan.hosts[0]), ())
    text = gathered((
        "device-share", "0", "\tNPU ID                         : 0\n\tChip Count                     : 1\n\n"
        "\tDevice-share Status            : True\n\tChip ID                        : 0\n",
    ))
    assert parse_facts(text).device_share == {0: DEVICE_SHARE_ON}


# ---- HCCS topology ------------------------------------------------------------


def test_a_tensor_parallel_group_whose_cards_are_not_linked_by_hccs_is_a_topology_finding(plan):
    facts = dataclasses.replace(clean_facts(plan), topology=parse_topology(with_link(2, 3, "PIX")))
    [found] = findings(plan, facts)
    assert (found.kind, found.service, found.card) == ("topology", "gamma", 2)
    assert "cards 2,3" in found.message and "2-3 PIX" in found.message


def test_a_link_printed_as_hccs_one_way_only_is_not_trusted(plan):
    facts = dataclasses.replace(clean_facts(plan), topology=parse_topology(with_link(3, 2, "SYS", both=False)))
    [found] = findings(plan, facts)
    assert found.kind == "topology" and "2-3 HCCS" not in found.message


def test_links_between_cards_of_different_services_are_none_of_doctors_business(plan):
    facts = dataclasses.replace(clean_facts(plan), topology=parse_topology(with_link(0, 2, "SYS")))
    assert findings(plan, facts) == []


def test_a_topology_that_cannot_be_read_is_a_finding_only_for_a_host_with_tensor_parallel_groups(plan):
    facts = dataclasses.replace(clean_facts(plan), topology=None, topology_error="npu-smi info -t topo exited 215: Invalid")
    [found] = findings(plan, facts)
    assert found.kind == "topology" and "gamma" in found.message and "exited 215" in found.message
    single = deployment_of(fleet([host("npu-a")], [service("alpha", 1, 0.4, devices=[0])]))
    found = host_findings(single.hosts[0], dataclasses.replace(HostFacts(), topology_error="exited 215"))
    assert "topology" not in [f.kind for f in found]


def test_the_gather_script_reads_the_topology_once_and_the_facts_keep_it(plan):
    from ops.doctor.gather import gather_script

    assert gather_script(required(plan.hosts[0])).count("npu-smi info -t topo") == 1
    facts = parse_facts(gathered(("npu-topo", "", TOPO_SCREEN), ("npu-topo-rc", "", "0")))
    assert facts.topology == FULL_MESH and facts.topology_error is None
    facts = parse_facts(gathered(("npu-topo", "", "Invalid type."), ("npu-topo-rc", "", "215")))
    assert facts.topology is None and "exited 215: Invalid type." in facts.topology_error
    facts = parse_facts(gathered(("npu-topo", "", "nonsense"), ("npu-topo-rc", "", "0")))
    assert facts.topology is None and "no NPU matrix" in facts.topology_error
