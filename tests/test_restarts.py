"""Which container inputs re-create a container: the one table, checked against the provider.

`records.restarts` classifies every key of a container's plan JSON as the docker provider
classifies the attribute it becomes; `plan --against` and the table in docs/deploying.md read it. These
tests hold it to the provider's schema (transcribed in tests/support/provider_readback.py), to what the
program really registers, and to every format a container record is written in.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import MappingProxyType

import pytest

from allocation.config import Mount
from records.containers import ContainerSpec, HealthCheck
from records.restarts import BY_KEY, CONSTANT_PROVIDER_INPUTS, INPUTS, restart_table
from views.exports.render import compose_service, docker_run_args
from tests.support.provider_readback import FORCE_NEW, UPDATED_IN_PLACE, attribute
from tests.support.stacks import stack_run

REPO = Path(__file__).resolve().parents[1]
PROGRAM_REPLACES = {"healthcheck", "init"}  # components/model_service.py: replace_on_changes


@pytest.mark.parametrize("item", INPUTS, ids=lambda i: i.key)
def test_each_container_key_recreates_exactly_when_the_provider_forces_a_new_container(item):
    assert set(item.provider) <= FORCE_NEW | UPDATED_IN_PLACE, "an attribute the transcription does not know"
    forced = any(a in FORCE_NEW for a in item.provider) or item.key in PROGRAM_REPLACES
    assert item.recreates == forced


def test_every_input_the_program_registers_for_a_container_is_classified():
    classified = {a for i in INPUTS for a in i.provider} | set(CONSTANT_PROVIDER_INPUTS)
    for name, inputs in stack_run("staging").containers().items():
        unknown = {attribute(k) for k in inputs} - classified
        assert not unknown, f"{name}: inputs no row of records.restarts classifies: {sorted(unknown)}"


def sample() -> ContainerSpec:
    return ContainerSpec(
        name="svc",
        image="registry.example/vllm:1",
        command=("vllm", "serve", "/m"),
        env=MappingProxyType({"A": "1"}),
        device_files=("/dev/davinci0",),
        mounts=(Mount(source="/m", target="/m"),),
        api_port=8000,
        labels=MappingProxyType({"k": "v"}),
        healthcheck=HealthCheck(("CMD-SHELL", "true"), 30, 10, 1800, 3),
        privileged=False,
        restart="unless-stopped",
        shm_size_mib=64,
        start_timeout_seconds=1800,
        ipc_mode="private",
        stop_grace_seconds=60,
        sysctls=MappingProxyType({"net.ipv4.ip_local_reserved_ports": "60032-60047"}),
        log_opts=MappingProxyType({"max-size": "100m"}),
        metrics_port=None,
    )


OTHER = {
    "name": "other",
    "image": "registry.example/vllm:2",
    "command": ("vllm", "serve", "/n"),
    "env": MappingProxyType({"A": "2"}),
    "device_files": ("/dev/davinci1",),
    "mounts": (Mount(source="/n", target="/n"),),
    "api_port": 8001,
    "labels": MappingProxyType({"k": "w"}),
    "healthcheck": HealthCheck(("CMD-SHELL", "true"), 30, 10, 2400, 3),
    "privileged": True,
    "restart": "always",
    "shm_size_mib": 128,
    "start_timeout_seconds": 2400,
    "ipc_mode": "host",
    "stop_grace_seconds": 90,
    "sysctls": MappingProxyType({"net.ipv4.ip_local_reserved_ports": "60048-60063"}),
    "log_opts": MappingProxyType({"max-size": "200m"}),
    "log_driver": "local",
    "metrics_port": 9100,
    "init": False,
    "entrypoint": ("/bin/bash", "-c", "--"),
    "network_mode": "host",
}


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(ContainerSpec)])
def test_every_field_of_the_container_record_reaches_the_plan_json_compose_and_docker_run(field):
    """The component's inputs are held to the record field by field in tests/test_program.py."""
    base, changed = sample(), dataclasses.replace(sample(), **{field: OTHER[field]})
    assert base.to_json() != changed.to_json(), "plan JSON (and so plan --against)"
    # How long `pulumi up` waits is no container setting: the exports have nothing to carry it.
    if field != "start_timeout_seconds":
        assert compose_service(base) != compose_service(changed), "compose"
        assert docker_run_args(base) != docker_run_args(changed), "docker run"


def test_every_key_of_the_plan_json_container_is_classified():
    assert set(sample().to_json()) - set(BY_KEY) == {"extraHosts"}, "only the retired key is unclassified"


def test_the_docs_table_of_what_restarts_is_the_classification():
    assert restart_table() in (REPO / "docs" / "deploying.md").read_text(encoding="utf-8")
