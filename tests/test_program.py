"""The Pulumi program under Pulumi's mocks: what each stack deploys, and what changes when config does.

Every `Pulumi.*.yaml` in the repository is run through the real `__main__.py`
(see tests/support/pulumi_harness.py); assertions are on what the engine would receive.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pulumi
import pytest
from ruamel.yaml import YAML

from allocation.config import parse_fleet
from allocation.errors import FleetError
from records.containers import (
    CONTROL_DEVICES, DRIVER_MOUNTS, LOCK_DIR, LOCK_DIR_HOST, START_GATE, Site, container_spec,
)  # fmt: skip
from records.command import START_GATE_NAME
from records.restarts import CONSTANT_PROVIDER_INPUTS, INPUTS
from records.deployment import deploy
from views.report import plan_json
from records.durations import go_duration
from records.ssh_options import ssh_options
from records.host_check import DMI_PRODUCT, NPU_SMI, host_check_script
from records.runtime import DAEMON_CONFIG
from allocation.windows import KINDS
from components.ascend_host import LOG_LINES, AscendHost
from components.model_service import start_failure_text
from components.router import SERVES_SUFFIX
from tests.support.pulumi_harness import (
    ASCEND_HOST,
    CONTAINER,
    FAKE_PRIVATE_KEY,
    LOCAL_COMMAND,
    MODEL_SERVICE,
    ROUTER,
    PROJECT_ROOT,
    PROVIDER,
    REMOTE_COMMAND,
    REMOTE_IMAGE,
    fake_image_id,
    is_secret_wrapper,
    plain_occurrences,
    project_config_problems,
    run_program,
    unwrap,
)
from tests.support.docker_fakes import container_id, resolving_docker
from tests.support.provider_readback import PULUMI_NAMES
from tests.support.stacks import STACKS, pinned_values, planned, stack_params, stack_run, two_host_values, values_of


def without_nulls(value):
    """What the SDK makes of a stack output: map entries whose value is None are left out."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def test_the_project_file_is_one_the_pulumi_cli_accepts():
    """A number that is not an integer must sit under `value:` (the real CLI refused `memoryBudget: 0.95`)."""
    project = YAML(typ="safe").load((PROJECT_ROOT / "Pulumi.yaml").read_text())
    assert project_config_problems(project) == []
    assert project_config_problems({"config": {"memoryBudget": 0.95}}) != []
    assert project_config_problems({"config": {"memoryBudget": {"value": 0.95}, "n": 3, "on": True}}) == []


@stack_params
def test_every_container_reports_its_last_log_lines_when_it_fails_to_start(stack):
    """The provider's error says only "container failed to be in healthy state"; an error hook adds
    the container's log, where vLLM says why (shown for real by tests/engine)."""
    containers = stack_run(stack).of_type(CONTAINER)
    assert containers
    for c in containers:
        assert c.error_hooks == (f"{c.inputs['name']}-last-log-lines",), c.name


def test_a_failed_start_names_the_container_the_providers_error_and_the_log():
    text = start_failure_text("qwen-long", ["container failed to be in healthy state"], "OSError: no config.json")
    assert text.startswith("container qwen-long failed (container failed to be in healthy state)")
    assert text.endswith("log lines:\nOSError: no config.json")


def test_the_log_of_a_failed_container_is_its_own_never_that_of_a_container_whose_id_begins_with_its_name(tmp_path, monkeypatch):
    """A container that failed to be created has no log; Docker would read its name as an ID prefix
    (moby `GetContainer`) and show another container's."""
    resolving_docker(tmp_path)
    (tmp_path / "containers").write_text("bge-m3|running\nunrelated|running\n")
    monkeypatch.setenv("PATH", f"{tmp_path}/bin:{os.environ['PATH']}")
    [hd] = deploy(planned("dev", values_of("dev"))[1]).hosts  # a local daemon: the script runs here
    host = SimpleNamespace(_hd=hd)
    prefix = container_id("unrelated")[:8]
    assert AscendHost.last_log_lines(host, prefix) == f"no container is named {prefix}"
    assert AscendHost.last_log_lines(host, "bge-m3") == "the log of bge-m3"
    assert f"logs --tail {LOG_LINES} {container_id('bge-m3')}" in (tmp_path / "calls").read_text()


def test_there_is_at_least_the_prod_stack_file():
    assert "prod" in STACKS


# --- what each stack deploys ---------------------------------------------------------------


def _durations(seconds: dict) -> dict:
    """A health check's `...Seconds` keys as the provider's Go durations (`intervalSeconds` -> `interval`)."""
    return {k.removesuffix("Seconds"): go_duration(v) if k.endswith("Seconds") else v for k, v in seconds.items()}


# The docker provider's shape of a container key of the plan JSON, where it is not the plan JSON's
# own (components/model_service.py `container_args`); every other key reaches the provider as printed.
PROVIDER_SHAPE = {
    "image": fake_image_id,  # the RemoteImage's image id, pulled by tag
    "env": lambda env: [f"{k}={v}" for k, v in env.items()],
    "deviceFiles": lambda paths: [{"hostPath": d, "containerPath": d, "permissions": "rwm"} for d in paths],
    "mounts": lambda mounts: [{"type": "bind", **m} for m in mounts],
    "ports": lambda ports: [{"internal": p, "external": p, "ip": "0.0.0.0", "protocol": "tcp"} for p in ports],
    "labels": lambda labels: [{"label": k, "value": v} for k, v in labels.items()],
    "healthcheck": lambda hc: {"tests": hc["test"], **_durations({k: v for k, v in hc.items() if k != "test"})},
}


def provider_inputs(spec) -> dict:
    """What the component must register for a container record: each key of the record's plan JSON
    (`ContainerSpec.to_json`) under every provider attribute the restart table (`records.restarts`)
    says it becomes, and the inputs set on every container."""
    expected = {pulumi_key(a): True for a in CONSTANT_PROVIDER_INPUTS}
    printed = spec.to_json()
    for item in INPUTS:
        if item.key in printed:
            value = PROVIDER_SHAPE.get(item.key, lambda v: v)(printed[item.key])
            expected |= {pulumi_key(a): value for a in item.provider}
    return expected


def pulumi_key(provider_attribute: str) -> str:
    """The registered input's name for a Terraform attribute (the inverse of provider_readback.attribute)."""
    return next(
        (k for k, a in PULUMI_NAMES.items() if a == provider_attribute),
        re.sub(r"_([a-z])", lambda m: m.group(1).upper(), provider_attribute),
    )


@stack_params
def test_every_service_becomes_one_container_built_from_its_container_spec(stack):
    """Driven by the record and the restart table, not a copy of the mapping: a field the plan JSON
    prints reaches the provider under the attributes the table names, and nothing else is registered."""
    run = stack_run(stack)
    fleet, plan = planned(stack, values_of(stack))
    containers = run.by_name(CONTAINER)
    routers = [f"{r.name}-container" for r in plan.routers]
    assert sorted(containers) == sorted([f"{ps.name}-container" for _, ps in plan.services()] + routers)
    deployment = deploy(plan)
    for d in [*deployment.services(), *deployment.routers]:
        inputs = without_nulls(containers[f"{d.name}-container"].inputs)
        assert inputs == without_nulls(provider_inputs(d.spec)), d.name
        assert "hosts" not in inputs, "no neighbour's address: the start gate uses card locks"


def test_the_prod_seed_containers_get_exactly_their_cards_ports_and_command():
    run = stack_run("prod")
    fleet, plan = planned("prod", values_of("prod"))
    containers = run.containers()
    assignment = {ps.name: ps.assignment for _, ps in plan.services()}
    control = [{"hostPath": d, "containerPath": d, "permissions": "rwm"} for d in CONTROL_DEVICES]

    def cards(*ids):
        return [{"hostPath": f"/dev/davinci{i}", "containerPath": f"/dev/davinci{i}", "permissions": "rwm"}
                for i in ids] + control  # fmt: skip

    def mounts(model, name):
        return [
            *({"type": "bind", "source": p, "target": p, "readOnly": True} for p in DRIVER_MOUNTS),
            {"type": "bind", "source": LOCK_DIR_HOST, "target": LOCK_DIR, "readOnly": False},
            {"type": "bind", "source": model, "target": model, "readOnly": True},
            # Its own compile cache, by its name (records.containers.cache_dir).
            {"type": "bind", "source": f"/var/lib/ascend-fleet/cache/{name}", "target": "/root/.cache", "readOnly": False},
        ]

    qwen_args = ["--quantization", "ascend", "--trust-remote-code", "--no-enable-prefix-caching"]
    expected = {
        "bge-m3": (cards(0), 7007, "0", ["--max-model-len", "8192"], "/disk2/bge-m3", "1", "0.1"),
        "qwen-vl": (cards(0, 1, 2, 3), 9009, "0,1,2,3", ["--max-model-len", "25000", "--max-num-seqs", "10",
                    *qwen_args], "/disk2/Qwen3.6-27B-w8a8", "4", "0.85"),
        "qwen-long": (cards(4, 5, 6, 7), 6006, "0,1,2,3", ["--max-model-len", "100000", "--max-num-seqs", "2",
                      *qwen_args], "/disk2/Qwen3.6-27B-w8a8", "4", "0.9"),
    }  # fmt: skip
    assert sorted(containers) == sorted(expected)
    windows = []
    for name, (devices, port, visible, extra, model, tp, fraction) in expected.items():
        inputs, a = containers[name], assignment[name]
        assert inputs["devices"] == devices
        assert inputs["mounts"] == mounts(model, name)
        assert inputs["init"] is True  # an init reaps the start gate's holder
        assert inputs["ports"] == [{"internal": port, "external": port, "ip": "0.0.0.0", "protocol": "tcp"}]
        # Every container runs behind the same start gate (card locks), neighbours or not.
        gate = ["sh", "-c", START_GATE, START_GATE_NAME]
        assert inputs["command"] == [
            *gate, "vllm", "serve", model, "--served-model-name", name, "--host", "0.0.0.0", "--port", str(port),
            "--tensor-parallel-size", tp, "--gpu-memory-utilization", fraction, *extra,
        ]  # fmt: skip
        env = dict(e.split("=", 1) for e in inputs["envs"])
        assert env["ASCEND_FLEET_CARDS"] == ",".join(str(d["hostPath"].removeprefix("/dev/davinci")) for d in devices[:-3])
        npu, host_range = a.windows["hcclNpuSocketPortRange"], a.windows["hcclHostSocketPortRange"]
        assert env["ASCEND_RT_VISIBLE_DEVICES"] == visible
        assert env["HCCL_NPU_SOCKET_PORT_RANGE"] == f"{npu[0]}-{npu[1]}"
        assert env["HCCL_HOST_SOCKET_PORT_RANGE"] == f"{host_range[0]}-{host_range[1]}"
        assert env["HCCL_IF_BASE_PORT"] == str(a.windows["hcclIfBasePort"][0])
        assert env["VLLM_PORT"] == str(a.windows["vllmPort"][0])
        assert env["HCCL_BUFFSIZE"] == "512" and env["OMP_NUM_THREADS"] == "1"
        assert ("VLLM_WORKER_MULTIPROC_METHOD" in env) == (tp != "1")
        assert inputs["privileged"] is False and inputs["ipcMode"] == "private" and inputs["shmSize"] == 10486
        assert inputs["stopTimeout"] == 60 and "ATB_SHARE_MEMORY_NAME_SUFFIX" not in env
        windows += [range(lo, hi + 1) for lo, hi in (npu, host_range)]
    # the seed's failure: two instances on one host sharing an HCCL port
    ports = [p for w in windows for p in w]
    assert len(ports) == len(set(ports))


@stack_params
def test_each_host_gets_one_docker_provider_with_its_ssh_url_and_the_fleet_ssh_options(stack):
    run = stack_run(stack)
    fleet, plan = planned(stack, values_of(stack))
    providers = run.by_name(PROVIDER)
    used = [hp.host for hp in plan.hosts if hp.services]
    assert sorted(providers) == sorted(f"{h.name}-docker" for h in used)
    for host in used:
        inputs = providers[f"{host.name}-docker"].inputs
        if host.docker_host:
            assert inputs["host"] == host.docker_host
        else:
            assert inputs["host"] == f"ssh://{host.user}@{host.address}:{host.ssh_port}"
        if inputs["host"].startswith("ssh://"):
            # provider config travels as JSON strings, as the generated Provider class sends it
            assert json.loads(inputs["sshOpts"]) == ssh_options(fleet.ssh)
            assert "BatchMode=yes" in json.loads(inputs["sshOpts"])


@stack_params
def test_containers_live_in_their_model_service_and_use_their_hosts_provider(stack):
    run = stack_run(stack)
    _, plan = planned(stack, values_of(stack))
    services = run.by_name(MODEL_SERVICE)
    hosts = run.by_name(ASCEND_HOST)
    providers = {r.name: r.urn for r in run.of_type(PROVIDER)}
    containers = run.by_name(CONTAINER)
    for hp, ps in plan.services():
        container = containers[f"{ps.name}-container"]
        assert container.parent == services[ps.name].urn
        assert services[ps.name].parent == run.stack_urn
        assert container.provider_urn == providers[f"{hp.host.name}-docker"]
        assert run.by_urn()[providers[f"{hp.host.name}-docker"]].parent == hosts[hp.host.name].urn


@stack_params
def test_containers_are_deleted_before_replacement_and_wait_for_their_host_check(stack):
    run = stack_run(stack)
    _, plan = planned(stack, values_of(stack))
    checks = {r.name: r.urn for r in run.of_type(REMOTE_COMMAND) + run.of_type(LOCAL_COMMAND)}
    containers = run.by_name(CONTAINER)
    for hp, ps in plan.services():
        container = containers[f"{ps.name}-container"]
        assert container.delete_before_replace is True
        assert checks[f"{hp.host.name}-check"] in container.dependencies


@stack_params
def test_images_are_pulled_once_per_host_and_image_after_the_check_and_kept_locally(stack):
    run = stack_run(stack)
    fleet, plan = planned(stack, values_of(stack))
    images = run.of_type(REMOTE_IMAGE)
    expected = {
        (hd.name, sd.spec.image) for hd in deploy(plan).hosts for sd in hd.services
    }
    providers = {r.urn: r.name for r in run.of_type(PROVIDER)}
    checks = {r.urn: r.name for r in run.of_type(REMOTE_COMMAND) + run.of_type(LOCAL_COMMAND)}
    got = set()
    for image in images:
        host = providers[image.provider_urn].removesuffix("-docker")
        got.add((host, image.inputs["name"]))
        assert image.inputs["keepLocally"] is True
        assert [checks[d] for d in image.dependencies if d in checks] == [f"{host}-check"]
    assert got == expected and len(images) == len(expected)


@stack_params
def test_the_host_check_runs_the_generated_script_over_ssh_or_locally_for_a_unix_docker_host(stack):
    run = stack_run(stack)
    fleet, plan = planned(stack, values_of(stack))
    remote, local = run.by_name(REMOTE_COMMAND), run.by_name(LOCAL_COMMAND)
    records = {hd.name: hd for hd in deploy(plan).hosts}
    for hp in plan.hosts:
        if not hp.services:
            assert f"{hp.host.name}-check" not in remote | local
            continue
        script = records[hp.host.name].check_script
        if (hp.host.docker_host or "").startswith("unix://"):
            assert local[f"{hp.host.name}-check"].inputs["create"] == script
        else:
            check = remote[f"{hp.host.name}-check"]
            assert check.inputs["create"] == script
            connection = unwrap(check.inputs["connection"])
            assert (connection["host"], connection["port"], connection["user"]) == (
                hp.host.address, hp.host.ssh_port, hp.host.user,
            )  # fmt: skip
            assert connection["privateKey"] == FAKE_PRIVATE_KEY


def test_the_scripts_ssh_connection_waits_as_long_as_the_stacks_connect_timeout():
    values = {**two_host_values(), "ssh": {"connectTimeoutSeconds": 7}}
    run = run_program("test", values)
    connection = unwrap(run.by_name(REMOTE_COMMAND)["npu-a-check"].inputs["connection"])
    assert connection["perDialTimeout"] == 7


def test_a_unix_docker_host_gets_a_local_check_and_no_ssh_options():
    values = two_host_values()
    values["hosts"][0]["dockerHost"] = "unix:///var/run/docker.sock"
    run = run_program("dev", values)
    assert run.by_name(PROVIDER)["npu-a-docker"].inputs["host"] == "unix:///var/run/docker.sock"
    assert "sshOpts" not in run.by_name(PROVIDER)["npu-a-docker"].inputs
    # Sorted: the mocks register resources from several threads, in no fixed order.
    assert sorted(run.by_name(LOCAL_COMMAND)) == ["npu-a-check", "npu-a-device-share", "npu-a-start-order"]
    assert list(run.by_name(REMOTE_COMMAND)) == ["npu-b-check"]
    assert run.by_name(PROVIDER)["npu-b-docker"].inputs["host"] == "ssh://deploy@192.0.2.11:2222"


@stack_params
def test_the_ssh_private_key_is_secret_wherever_it_appears(stack):
    run = stack_run(stack)
    leaks = [
        f"{r.type}::{r.name}{path}"
        for r in run.registrations
        for path in plain_occurrences(r.inputs, FAKE_PRIVATE_KEY.strip().splitlines()[1])
    ]
    leaks += [f"outputs of {urn}{p}" for urn, out in run.outputs.items()
              for p in plain_occurrences(out, FAKE_PRIVATE_KEY.strip().splitlines()[1])]  # fmt: skip
    leaks += [f"log: {line[:80]}" for line in run.logs if FAKE_PRIVATE_KEY.strip().splitlines()[1] in line]
    assert leaks == []
    for check in run.of_type(REMOTE_COMMAND):
        assert is_secret_wrapper(check.inputs["connection"])
        assert unwrap(check.inputs["connection"])["privateKey"] == FAKE_PRIVATE_KEY


def test_without_a_private_key_the_check_falls_back_to_the_ssh_agent():
    run = run_program("prod", values_of("prod"), private_key=None)
    check = run.by_name(REMOTE_COMMAND)["npu-a-check"]
    assert "privateKey" not in unwrap(check.inputs["connection"])


@stack_params
def test_stack_outputs_give_every_service_endpoint_and_the_whole_plan(stack):
    run = stack_run(stack)
    fleet, plan = planned(stack, values_of(stack))
    outputs = run.stack_outputs
    assert outputs["plan"] == without_nulls(plan_json(deploy(plan)))
    assert sorted(outputs["plan"]) == ["hosts", "notes", "routers", "stack", "warnings"]
    assert sorted(outputs["services"]) == sorted([ps.name for _, ps in plan.services()] + [r.service.name for r in plan.routers])
    components = run.by_name(MODEL_SERVICE)
    for hp, ps in plan.services():
        a = ps.assignment
        expected = {
            "endpoint": f"http://{hp.host.address}:{a.api_port}/v1",
            "host": hp.host.name,
            "devices": list(a.cards),
            **{k.key: k.text(a.windows[k.key]) if k.key in a.windows else None for k in KINDS},
        }
        assert {k: v for k, v in outputs["services"][ps.name].items() if v is not None} == {
            k: v for k, v in expected.items() if v is not None
        }
        registered = run.outputs[components[ps.name].urn]
        assert registered["endpoint"] == expected["endpoint"] and registered["devices"] == expected["devices"]


def test_the_seed_endpoints_are_the_hand_made_ones():
    services = stack_run("prod").stack_outputs["services"]
    assert {n: s["endpoint"] for n, s in services.items()} == {
        "bge-m3": "http://192.0.2.10:7007/v1",
        "qwen-vl": "http://192.0.2.10:9009/v1",
        "qwen-long": "http://192.0.2.10:6006/v1",
    }
    assert services["qwen-vl"]["devices"] == [0, 1, 2, 3] and services["qwen-vl"]["host"] == "npu-a"


# --- minimal change ------------------------------------------------------------------------


def _changed(before: dict, after: dict) -> set[str]:
    return {n for n in before.keys() | after.keys() if before.get(n) != after.get(n)}


@stack_params
def test_changing_one_services_max_model_len_changes_only_that_container(stack):
    values = values_of(stack)
    assert values["services"], "every stack in the repository deploys something"
    changed = copy.deepcopy(values)
    target = changed["services"][-1]
    target["maxModelLen"] = (target.get("maxModelLen") or 4096) + 1
    before, after = stack_run(stack).containers(), run_program(stack, changed).containers()
    assert _changed(before, after) == {target["name"]}
    assert "--max-model-len" in after[target["name"]]["command"]


@pytest.mark.parametrize("stack", [*sorted(STACKS), "two-hosts"])
def test_adding_a_service_to_a_pinned_fleet_changes_no_other_container(stack):
    values = two_host_values() if stack == "two-hosts" else values_of(stack)
    pinned = pinned_values(values, stack)
    grown = copy.deepcopy(pinned)
    grown.setdefault("services", []).append(
        {"name": "zz-added", "model": "/models/added", "memoryFraction": 0.05, "maxModelLen": 2048}
    )
    planned(stack, grown)  # every stack has room for a 0.05 service
    unpinned = stack_run(stack) if stack in STACKS else run_program(stack, values)
    before, after = run_program(stack, pinned).containers(), run_program(stack, grown).containers()
    assert before == unpinned.containers(), "pinning what the planner chose changes no container"
    assert _changed(before, after) == {"zz-added"}


def _host_of(run, plan) -> dict[str, str]:
    """URN -> host name for every host-specific resource of a run."""
    host_of = {}
    service_host = {ps.name: hp.host.name for hp, ps in plan.services()}
    router_host = {r.name: r.host_name for r in plan.routers}
    for r in run.registrations:
        if r.type == ASCEND_HOST:
            host_of[r.urn] = r.name
        elif r.type == MODEL_SERVICE:
            host_of[r.urn] = service_host[r.name]
        elif r.type == ROUTER:
            host_of[r.urn] = router_host[r.name]
    for r in run.registrations:  # children: parents are registered first
        if r.urn not in host_of and r.parent in host_of:
            host_of[r.urn] = host_of[r.parent]
    return host_of


@pytest.mark.parametrize("stack", [*sorted(STACKS), "two-hosts"])
def test_services_on_different_hosts_never_depend_on_each_other(stack):
    values = two_host_values() if stack == "two-hosts" else values_of(stack)
    run = stack_run(stack) if stack in STACKS else run_program(stack, values)
    _, plan = planned(stack, values)
    host_of, regs = _host_of(run, plan), run.by_urn()

    def reaches(urn: str) -> set[str]:
        seen, todo = set(), [urn]
        while todo:
            r = regs.get(todo.pop())
            if r is None or r.urn in seen:
                continue
            seen.add(r.urn)
            # A replica's container waits for its predecessor to serve again through the router
            # (the rolling chain, test_replicas.py): deliberate, so not followed here.
            todo += [*(d for d in r.dependencies if not d.endswith(SERVES_SUFFIX)), r.parent, r.provider_urn]
        return seen

    for container in run.of_type(CONTAINER):
        hosts = {host_of[u] for u in reaches(container.urn) if u in host_of}
        assert hosts == {host_of[container.urn]}, f"{container.name} reaches {hosts}"


def test_services_sharing_a_card_start_one_after_another_and_others_do_not_wait():
    run = run_program("two-hosts", two_host_values())
    containers = run.by_name(CONTAINER)
    deps = {
        name.removesuffix("-container"): {
            containers[d.rsplit("::", 1)[1]].name.removesuffix("-container")
            for d in c.dependencies if d.rsplit("::", 1)[1] in containers
        }
        for name, c in containers.items()
    }  # fmt: skip
    _, plan = planned("two-hosts", two_host_values())
    cards = {ps.name: set(ps.assignment.cards) for _, ps in plan.services()}
    assert cards["embed-a"] & cards["chat-a"] and not cards["solo-b"] & cards["chat-b"]
    assert deps == {"chat-a": set(), "embed-a": {"chat-a"}, "chat-b": set(), "solo-b": set()}


# --- bad config ----------------------------------------------------------------------------


def test_a_misspelt_key_surfaces_as_a_clean_run_error():
    values = values_of("prod")
    values["servics"] = values.pop("services")
    with pytest.raises(pulumi.RunError) as info:
        run_program("prod", values)
    message = str(info.value)
    assert "unknown config key 'ascend-fleet:servics'" in message and "did you mean 'services'" in message
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert "Traceback" not in message and FAKE_PRIVATE_KEY not in message


def test_a_fleet_that_does_not_fit_surfaces_as_a_clean_run_error():
    values = values_of("prod")
    values["services"].append({"name": "too-big", "host": "npu-a", "model": "/m", "tensorParallelSize": 8})
    with pytest.raises(pulumi.RunError, match="cannot allocate") as info:
        run_program("prod", values)
    assert "too-big" in str(info.value) and info.value.__cause__ is None


def test_values_set_as_plain_strings_are_decoded_like_get_object():
    values = values_of("prod")
    values["memoryBudget"] = "0.95"  # `pulumi config set ascend-fleet:memoryBudget 0.95`
    assert run_program("prod", values).containers() == stack_run("prod").containers()
    values["region"] = "eu-west"  # not JSON: stays a string, and is an unknown key
    with pytest.raises(pulumi.RunError, match="unknown config key 'ascend-fleet:region'"):
        run_program("prod", values)


# --- the host check script, run for real ---------------------------------------------------


def _complete_host(root: Path, fleet, hp, npu_smi_body: str = "echo '| 910B3 | OK |'") -> None:
    for ps in hp.services:
        spec = container_spec(ps, Site.of(fleet, hp.host))
        for device in spec.device_files:
            (root / device.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            (root / device.lstrip("/")).touch()
        for m in spec.mounts:
            path = root / m.source.lstrip("/")
            if m.source == "/etc/ascend_install.info":
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("Driver_Install_Path_Param=/usr/local/Ascend\n")
            elif m.source != NPU_SMI:
                path.mkdir(parents=True, exist_ok=True)
    smi = root / NPU_SMI.lstrip("/")
    smi.parent.mkdir(parents=True, exist_ok=True)
    smi.write_text(f"#!/bin/sh\n{npu_smi_body}\n")
    smi.chmod(0o755)
    dmi = root / DMI_PRODUCT.lstrip("/")
    dmi.parent.mkdir(parents=True, exist_ok=True)
    dmi.write_text("Atlas 800T A2\n")
    # The Docker CLI: the engine the stack declares (records.health), and no running container.
    docker = root / "bin/docker"
    docker.parent.mkdir(parents=True, exist_ok=True)
    docker.write_text(f"#!/bin/sh\ncase $1 in version) echo {fleet.docker_engine_of(hp.host)}.24 ;; esac\n")
    docker.chmod(0o755)


def check_script(fleet, hp, root: str = "") -> str:
    shared = hp.shared_cards() if hp.host.card_sharing == "deviceShare" else ()
    containers = [(ps, container_spec(ps, Site.of(fleet, hp.host))) for ps in hp.services]
    return host_check_script(hp.host, containers, shared_cards=shared, root=root, engine=fleet.docker_engine_of(hp.host))


def _run_script(shell: str, script: str) -> subprocess.CompletedProcess:
    return subprocess.run([shell, "-c", script], capture_output=True, text=True, timeout=30)


SHELLS = [s for s in ("bash", "sh") if shutil.which(s)]


@pytest.mark.parametrize("shell", SHELLS)
def test_the_host_check_passes_on_a_host_with_everything_the_plan_uses(tmp_path, shell):
    fleet, plan = planned("prod", values_of("prod"))
    (hp,) = plan.hosts
    _complete_host(tmp_path, fleet, hp)
    result = _run_script(shell, check_script(fleet, hp, root=str(tmp_path)))
    assert result.returncode == 0, result.stderr
    assert "host npu-a ready for 3 service(s)" in result.stdout and result.stderr == ""


@pytest.mark.parametrize("shell", SHELLS)
def test_the_host_check_lists_every_missing_piece_with_the_service_needing_it(tmp_path, shell):
    fleet, plan = planned("prod", values_of("prod"))
    (hp,) = plan.hosts
    _complete_host(tmp_path, fleet, hp)
    (tmp_path / "dev/davinci3").unlink()
    (tmp_path / "dev/davinci_manager").unlink()
    shutil.rmtree(tmp_path / "disk2/bge-m3")
    shutil.rmtree(tmp_path / "usr/local/Ascend/driver")
    result = _run_script(shell, check_script(fleet, hp, root=str(tmp_path)))
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == "ascend-fleet: host npu-a (192.0.2.10) cannot run its 3 planned service(s):"
    assert lines[1:-1] == [
        f"  - missing device {tmp_path}/dev/davinci3 (used by qwen-vl)",
        f"  - missing device {tmp_path}/dev/davinci_manager (used by bge-m3, qwen-long, qwen-vl)",
        f"  - missing Ascend driver folder {tmp_path}/usr/local/Ascend/driver (mounted read-only into every container)",
        f"  - missing model directory {tmp_path}/disk2/bge-m3 (used by bge-m3)",
    ]
    assert "pulumi up" in lines[-1]


@pytest.mark.parametrize("shell", SHELLS)
def test_the_host_check_shows_why_npu_smi_fails(tmp_path, shell):
    fleet, plan = planned("prod", values_of("prod"))
    (hp,) = plan.hosts
    _complete_host(tmp_path, fleet, hp, npu_smi_body="echo 'dcmi module initialize failed. ret is -8005' >&2; exit 1")
    result = _run_script(shell, check_script(fleet, hp, root=str(tmp_path)))
    assert result.returncode == 1
    assert f"{tmp_path}{NPU_SMI} info failed: dcmi module initialize failed. ret is -8005" in result.stderr


def test_the_host_check_survives_paths_with_quotes_and_spaces(tmp_path):
    values = values_of("prod")
    values["services"][0]["model"] = "/disk2/it's a model"
    fleet, plan = planned("prod", values)
    (hp,) = plan.hosts
    _complete_host(tmp_path, fleet, hp)
    assert _run_script("sh", check_script(fleet, hp, root=str(tmp_path))).returncode == 0
    shutil.rmtree(tmp_path / "disk2/it's a model")
    result = _run_script("sh", check_script(fleet, hp, root=str(tmp_path)))
    assert f"missing model directory {tmp_path}/disk2/it's a model (used by bge-m3)" in result.stderr


def test_the_program_reads_no_stack_file(monkeypatch, tmp_path):
    """The program gets its config from the engine: run it from an empty directory."""
    monkeypatch.chdir(tmp_path)
    values = values_of("prod")
    values["services"] = values["services"][:1]
    assert sorted(run_program("prod", values).containers()) == ["bge-m3"]
    assert not any(os.scandir(tmp_path))


def test_config_handed_over_in_the_language_hosts_environment_is_read_in_full(monkeypatch):
    """The Python language host passes config as JSON in PULUMI_CONFIG; misspelt keys come along."""
    import contextvars

    from components.stack_config import fleet_values

    config = {
        "ascend-fleet:hosts": json.dumps([{"name": "npu-a", "address": "192.0.2.10"}]),
        "ascend-fleet:memoryBudgt": "0.9",
        "ascend-fleet:sshPrivateKey": FAKE_PRIVATE_KEY,
        "docker:host": "unix:///ignored",
    }
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps(config))
    values = contextvars.Context().run(fleet_values)
    assert values == {"hosts": [{"name": "npu-a", "address": "192.0.2.10"}], "memoryBudgt": 0.9}
    with pytest.raises(FleetError, match="did you mean 'memoryBudget'"):
        parse_fleet("prod", values)


@pytest.mark.parametrize(
    ("daemon", "refused"),
    [
        ('{"log-driver": "json-file", "log-opts": {"max-size": "10m", "max-file": "3"}}', False),
        ('{\n  "log-opts": {\n    "max-size": "10m",\n    "compress": "true"\n  }\n}', True),
        ('{"log-driver": "local", "log-opts": {"compress": "true"}}', False),
        ('{"data-root": "/data/docker"}', False),
    ],
)
def test_the_host_check_refuses_daemon_log_options_that_would_replace_every_container(tmp_path, daemon, refused):
    fleet, plan = planned("prod", values_of("prod"))
    [hp] = plan.hosts
    _complete_host(tmp_path, fleet, hp)
    path = tmp_path / DAEMON_CONFIG.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(daemon)
    result = _run_script("sh", check_script(fleet, hp, root=str(tmp_path)))
    assert (result.returncode == 1) == refused, result.stderr
    if refused:
        assert "sets log-opts compress" in result.stderr and "ascend-fleet:defaults.logOpts" in result.stderr


def test_setting_the_daemons_log_keys_in_log_opts_satisfies_the_host_check(tmp_path):
    values = values_of("prod")
    values["defaults"] = {**values.get("defaults", {}), "logOpts": {"max-size": "100m", "max-file": "5", "compress": "true"}}
    fleet, plan = planned("prod", values)
    [hp] = plan.hosts
    _complete_host(tmp_path, fleet, hp)
    (tmp_path / "etc/docker").mkdir(parents=True)
    (tmp_path / DAEMON_CONFIG.lstrip("/")).write_text('{"log-opts": {"compress": "true"}}')
    assert _run_script("sh", check_script(fleet, hp, root=str(tmp_path))).returncode == 0


def test_the_host_check_warns_on_a_board_without_documented_socket_ranges(tmp_path):
    fleet, plan = planned("prod", values_of("prod"))
    [hp] = plan.hosts
    _complete_host(tmp_path, fleet, hp)
    (tmp_path / DMI_PRODUCT.lstrip("/")).write_text("Atlas 800I A2\n")
    result = _run_script("sh", check_script(fleet, hp, root=str(tmp_path)))
    assert result.returncode == 0
    assert "warning: the board is 'Atlas 800I A2', not one of Atlas 800T A2" in result.stderr


@pytest.mark.parametrize("shell", SHELLS)
def test_the_host_check_refuses_a_shared_card_without_container_sharing_and_reports_the_mode(tmp_path, shell):
    fleet, plan = planned("prod", values_of("prod"))
    (hp,) = plan.hosts
    # The sentence npu-smi prints on hardware without the mode (npu-smi FAQ, as quoted by operators).
    unsupported = 'case "$*" in *device-share*) echo "This device does not support querying device-share." ;; *) echo ok ;; esac'
    _complete_host(tmp_path, fleet, hp, npu_smi_body=unsupported)
    result = _run_script(shell, check_script(fleet, hp, root=str(tmp_path)))
    assert result.returncode == 1
    assert "card 0 is shared but does not support container sharing" in result.stderr
    on = 'case "$*" in *device-share*) printf "\\tDevice-share Status            : True\\n" ;; *) echo ok ;; esac'
    _complete_host(tmp_path, fleet, hp, npu_smi_body=on)
    result = _run_script(shell, check_script(fleet, hp, root=str(tmp_path)))
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith("device-share: card 0 True")
