"""A reboot of the simulated host: its dockerd killed with every container and started again, so
what comes back is dockerd's own restore's choice; device-share mode does not survive it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.host import CLAIMS_DIR, DEVICE_SHARE_DIR, SimHost, SimHostError
from sim.host_docker import RUN_DIR
from tests.simhost.loads import now, stretched_loads, wait_for_any_log

PREFIX = "reboot-"


def two_services_sharing_card_0(sim_host: SimHost) -> None:
    """reboot-embed and reboot-vl, non-privileged, on card 0 in device-share mode, started in turn,
    each loading its model in a second."""
    model = sim_host.make_model("bge-m3")
    sim_host.set_device_share(0)
    sim_host.start_service(
        "reboot-embed", model=model, cards=[0], port=7007, gpu_memory_utilization=0.1, load_seconds=1,
        env={"HCCL_NPU_SOCKET_PORT_RANGE": "16666-16681"},
    )  # fmt: skip
    sim_host.wait_healthy("reboot-embed")
    sim_host.start_service(
        "reboot-vl", model=model, cards=[0, 1], port=9009, gpu_memory_utilization=0.8, load_seconds=1,
        env={"HCCL_NPU_SOCKET_PORT_RANGE": "16682-16697"},
    )  # fmt: skip
    sim_host.wait_healthy("reboot-vl")


def test_the_simulated_host_has_the_device_share_state_folder(sim_host: SimHost) -> None:
    assert DEVICE_SHARE_DIR.is_dir()
    assert sim_host.run(f"test -d {DEVICE_SHARE_DIR}", check=False).returncode == 0


def test_after_a_reboot_device_share_is_off_and_the_second_container_on_the_card_fails(sim_host: SimHost) -> None:
    two_services_sharing_card_0(sim_host)

    order = sim_host.restart_containers(["reboot-embed", "reboot-vl"], prefix=PREFIX, reboot=True, wait_healthy=False)

    assert order == ["reboot-embed", "reboot-vl"]
    assert sim_host.device_shared_cards() == []
    assert sim_host.wait_exit("reboot-vl") == 1
    assert "dcmi module initialize failed. ret is -8005" in sim_host.logs("reboot-vl")
    sim_host.wait_healthy("reboot-embed")


def test_device_share_set_again_before_the_containers_start_brings_both_back(sim_host: SimHost) -> None:
    two_services_sharing_card_0(sim_host)

    with pytest.raises(SimHostError, match="no running container"):
        sim_host.kill_containers(label="ascend-fleet.stack=no-such-stack")
    sim_host.power_cut()
    assert len(list(CLAIMS_DIR.glob("card0/port*"))) == 2  # killed: no chance to release
    boot = sim_host.boot(before_docker=lambda: sim_host.set_device_share(0))  # a unit ordered before docker.service
    assert boot.started == []  # no restart policy: Docker leaves them down
    assert list(CLAIMS_DIR.glob("card*/port*")) == []
    sim_host.start_containers(["reboot-embed", "reboot-vl"], wait_healthy=True)

    assert sim_host.state("reboot-vl")["Status"] == "running"


def dockerd_pid() -> int:
    """The simulated host's dockerd, as its pid file has it."""
    return int((RUN_DIR / "docker.pid").read_text())


def test_a_reboot_restarts_the_hosts_dockerd_whose_restore_brings_back_what_the_restart_policies_say(sim_host: SimHost) -> None:
    model = sim_host.make_model("bge-m3")
    policies = {"always": "always", "always-stopped": "always", "unless": "unless-stopped",
                "unless-stopped": "unless-stopped", "none": "no"}  # fmt: skip
    for card, (name, policy) in enumerate(policies.items()):
        sim_host.start_service(f"{PREFIX}{name}", model=model, cards=[card], port=7100 + card, publish=False, gpu_memory_utilization=0.1)
        sim_host.docker("update", f"--restart={policy}", f"{PREFIX}{name}")
    for name in policies:
        sim_host.wait_healthy(f"{PREFIX}{name}")
    sim_host.docker("stop", f"{PREFIX}always-stopped", f"{PREFIX}unless-stopped")  # by hand
    before = dockerd_pid()

    boot = sim_host.reboot()

    assert dockerd_pid() != before and not Path(f"/proc/{before}").exists()
    # moby restartmanager.ShouldRestart: `always` whatever happened; `unless-stopped` unless stopped by hand.
    assert boot.started == [f"{PREFIX}always", f"{PREFIX}always-stopped", f"{PREFIX}unless"]
    for name in boot.started:
        sim_host.wait_healthy(name)
    assert [sim_host.state(f"{PREFIX}{n}")["Status"] for n in ("unless-stopped", "none")] == ["exited", "exited"]


def test_containers_started_together_on_a_shared_card_race_their_model_loading(sim_host: SimHost) -> None:
    two_services_sharing_card_0(sim_host)
    names = ("reboot-embed", "reboot-vl")
    since = now()

    # The first to claim card 0 keeps loading until the other has met its load.
    with stretched_loads(*names):
        sim_host.restart_containers(names, prefix=PREFIX)  # no reboot: device-share stays on
        failed = wait_for_any_log(sim_host, names, "No available memory for the cache blocks", since=since)

    assert sim_host.device_shared_cards() == [0]
    assert sim_host.wait_exit(failed) == 1
    [loaded] = [name for name in names if name != failed]
    sim_host.wait_healthy(loaded)
