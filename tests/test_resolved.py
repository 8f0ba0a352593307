"""Defaults resolved once: a service's setting, else the defaults', else the project's; and the
config reference states the project's defaults from the same constants the planner uses."""

from __future__ import annotations

import json

import pytest

from allocation.config import ContainerSettings, Defaults, Mount, Router, Service
from allocation.defaults import REQUEST_TIMEOUT_SECONDS
from allocation.resolved import resolve
from tests.support.stacks import host, service
from tests.support.pipeline import deployment_of

BARE = resolve(Service(name="s", model="/m"), Defaults())


def test_a_setting_left_unset_everywhere_takes_the_projects_default():
    assert (BARE.image, BARE.ipc_mode, BARE.restart) == ("quay.io/ascend/vllm-ascend:v0.20.2rc1", "private", "unless-stopped")
    assert (BARE.shm_size_mib, BARE.start_timeout_seconds, BARE.stop_grace_seconds) == (10486, 1800, 60)
    assert (BARE.all_devices, BARE.vllm_ascend_version, dict(BARE.log_opts)) == (False, (0, 20), {"max-size": "100m", "max-file": "5"})


def test_the_service_wins_over_the_defaults_and_zero_and_false_are_settings_not_absences():
    defaults = Defaults(image="d:v0.11.0", stopGraceSeconds=30, allDevices=True, ipcMode="host", env={"A": "d", "B": "d"},
                        args=["--d"], mounts=[Mount(source="/d", target="/d")], vllmAscendVersion="0.14")  # fmt: skip
    s = Service(name="s", model="/m", stopGraceSeconds=0, allDevices=False, env={"B": "s"}, args=["--s"],
                mounts=[Mount(source="/s", target="/s")])  # fmt: skip
    r = resolve(s, defaults)
    assert (r.image, r.stop_grace_seconds, r.all_devices, r.ipc_mode) == ("d:v0.11.0", 0, False, "host")
    assert dict(r.env) == {"A": "d", "B": "s"} and r.args == ("--d", "--s")
    assert [m.source for m in r.mounts] == ["/d", "/s"]
    assert r.vllm_ascend_version == (0, 14), "a configured version wins over the image's tag"


def test_every_container_reads_its_resolved_settings():
    values = {"hosts": [host()], "defaults": {"shmSizeMiB": 256, "restart": "always"},
              "services": [service("a", 1, 0.2, stopGraceSeconds=0), service("b", 1, 0.2, shmSizeMiB=512)]}  # fmt: skip
    deployment = deployment_of(values)
    specs = {sd.name: sd.spec for hd in deployment.hosts for sd in hd.services}
    assert (specs["a"].shm_size_mib, specs["a"].stop_grace_seconds, specs["a"].restart) == (256, 0, "always")
    assert (specs["b"].shm_size_mib, specs["b"].stop_grace_seconds) == (512, 60)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("image", BARE.image),
        ("shm_size_mib", BARE.shm_size_mib),
        ("start_timeout_seconds", BARE.start_timeout_seconds),
        ("stop_grace_seconds", BARE.stop_grace_seconds),
        ("restart", BARE.restart),
        ("ipc_mode", BARE.ipc_mode),
        ("log_opts", json.dumps(dict(BARE.log_opts))),
    ],
)
def test_the_config_reference_states_the_default_the_planner_resolves(key, value):
    assert f"Default `{value}`" in ContainerSettings.model_fields[key].description or (
        f"Default {value}" in ContainerSettings.model_fields[key].description
    )


def test_the_router_request_timeout_documented_is_the_one_it_runs_with():
    assert f"Default {REQUEST_TIMEOUT_SECONDS}," in Router.model_fields["request_timeout_seconds"].description
