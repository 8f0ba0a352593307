"""container_spec: exact examples of the container a planned service becomes."""

from __future__ import annotations

from typing import Any

from allocation.config import VISIBLE_DEVICES_ENV
from records.containers import CONTROL_DEVICES, ContainerSpec
from tests.support.stacks import fleet, host, service
from tests.support.pipeline import deployment_of


def specs(services: list[dict], **extra: Any) -> dict[str, ContainerSpec]:
    """The container spec of every service of a one-host fleet, by service name."""
    config = fleet([host("npu-a")], services, **extra)
    return {sd.name: sd.spec for sd in deployment_of(config).services()}


def option(command: tuple[str, ...], name: str) -> str:
    """The value following `name` in a command line that has it exactly once."""
    assert command.count(name) == 1, command
    return command[command.index(name) + 1]


def test_the_served_model_name_is_the_configured_one_and_defaults_to_the_service_name():
    got = specs([service("chat", servedModelName="Qwen2.5-72B-Instruct"), service("embed")])
    assert option(got["chat"].command, "--served-model-name") == "Qwen2.5-72B-Instruct"
    assert option(got["embed"].command, "--served-model-name") == "embed"


def test_a_services_own_args_come_after_the_defaults_args_so_its_values_win():
    got = specs(
        [service("chat", args=["--block-size", "64"]), service("embed")],
        defaults={"args": ["--enable-prefix-caching", "--block-size", "128"]},
    )
    # vLLM takes the last value of an option given twice: the service's.
    assert got["chat"].command[-5:] == ("--enable-prefix-caching", "--block-size", "128", "--block-size", "64")
    assert got["embed"].command[-3:] == ("--enable-prefix-caching", "--block-size", "128")


def test_an_all_devices_service_sees_its_cards_by_their_physical_numbers_in_a_privileged_container():
    got = specs([service("chat", 4, 0.9, devices=[4, 5, 6, 7], allDevices=True)])["chat"]
    assert got.env[VISIBLE_DEVICES_ENV] == "4,5,6,7"
    assert got.privileged
    assert got.device_files == (*(f"/dev/davinci{c}" for c in range(8)), *CONTROL_DEVICES)


def test_a_service_with_only_its_own_cards_numbers_them_from_zero_unprivileged():
    got = specs([service("chat", 4, 0.9, devices=[4, 5, 6, 7])])["chat"]
    assert got.env[VISIBLE_DEVICES_ENV] == "0,1,2,3"
    assert not got.privileged
    assert got.device_files == ("/dev/davinci4", "/dev/davinci5", "/dev/davinci6", "/dev/davinci7", *CONTROL_DEVICES)


def test_containers_have_their_own_ipc_namespace_and_shm_unless_host_ipc_is_chosen():
    got = specs([service("a"), service("b", ipcMode="host"), service("c", stopGraceSeconds=0)], defaults={"shmSizeMiB": 2048})
    assert (got["a"].ipc_mode, got["a"].shm_size_mib, got["a"].stop_grace_seconds) == ("private", 2048, 60)
    assert "ATB_SHARE_MEMORY_NAME_SUFFIX" not in got["a"].env
    # One /dev/shm for every service in host IPC: each gets its own ATB shared-memory suffix.
    assert (got["b"].ipc_mode, got["b"].env["ATB_SHARE_MEMORY_NAME_SUFFIX"]) == ("host", "_b")
    assert got["c"].stop_grace_seconds == 0, "0 is a setting, not an absence"


def test_each_container_keeps_its_own_network_namespace_windows_out_of_its_ephemeral_ports():
    [spec] = specs([service("a", apiPort=7007, vllmPort=62100, hcclIfBasePort=61064)]).values()
    reserved = spec.sysctls["net.ipv4.ip_local_reserved_ports"]
    assert reserved == f"7007,{spec.env['HCCL_HOST_SOCKET_PORT_RANGE']},61064-61095,62100-62115"
    assert spec.env["HCCL_NPU_SOCKET_PORT_RANGE"] not in reserved, "NPU-side sockets are not in Linux's netns"
