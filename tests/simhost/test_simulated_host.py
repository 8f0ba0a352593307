"""The simulated host itself: SSH with host-key checking, docker over SSH, Ascend files, and
what `reset` and `reboot` leave behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sim.host import CLAIMS_DIR, IMAGE, SimHost, SimHostError
from sim.host_docker import DATA_DIR

# The simulator's own test: `make test` leaves it out (pytest.ini, marker `simulator`).
pytestmark = pytest.mark.simulator


def test_docker_over_ssh_answers_with_the_generated_key_and_known_hosts(sim_host: SimHost) -> None:
    assert sim_host.docker_host == f"ssh://root@127.0.0.1:{sim_host.ssh_port}"
    server = sim_host.docker("version", "--format", "{{.Server.Version}}").stdout.strip()
    assert server


def test_the_ssh_opts_reach_the_host_with_strict_host_key_checking(sim_host: SimHost) -> None:
    ssh = ["ssh", *sim_host.ssh_opts, "-p", str(sim_host.ssh_port), f"{sim_host.user}@{sim_host.address}"]
    proc = subprocess.run([*ssh, "docker", "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()


def test_ssh_sessions_and_the_local_socket_reach_the_hosts_own_dockerd_not_this_machines(sim_host: SimHost) -> None:
    root = "docker info --format '{{.DockerRootDir}}'"
    over_ssh = subprocess.run(["ssh", *sim_host.ssh_opts, "-p", str(sim_host.ssh_port), f"root@{sim_host.address}", root],
                              capture_output=True, text=True, timeout=30)  # fmt: skip
    assert over_ssh.stdout.strip() == str(DATA_DIR / "docker"), over_ssh.stderr
    assert sim_host.docker("info", "--format", "{{.DockerRootDir}}").stdout.strip() == str(DATA_DIR / "docker")
    assert sim_host.local_docker("info", "--format", "{{.DockerRootDir}}").stdout.strip() == str(DATA_DIR / "docker")


def test_an_unknown_host_key_is_refused(sim_host: SimHost, tmp_path: Path) -> None:
    empty_known_hosts = tmp_path / "known_hosts"
    empty_known_hosts.write_text("")
    opts = [o if not o.startswith("UserKnownHostsFile=") else f"UserKnownHostsFile={empty_known_hosts}" for o in sim_host.ssh_opts]
    proc = subprocess.run(
        ["ssh", *opts, "-o", "GlobalKnownHostsFile=/dev/null", "-p", str(sim_host.ssh_port), f"root@{sim_host.address}", "true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode != 0
    assert "Host key verification failed" in proc.stderr


def test_the_host_has_eight_cards_and_the_ascend_driver_files(sim_host: SimHost) -> None:
    listing = sim_host.run(
        "ls /dev/davinci0 /dev/davinci7 /dev/davinci_manager /dev/devmm_svm /dev/hisi_hdc "
        "/usr/local/Ascend/driver/version.info /usr/local/Ascend/driver/lib64 /usr/local/dcmi "
        "/etc/ascend_install.info /usr/local/bin/npu-smi /var/lib/npu-sim"
    )
    assert listing.returncode == 0
    assert sim_host.run("ls /dev | grep -c '^davinci[0-9]*$'").stdout.strip() == "8"
    assert "package_version=24.1.rc2" in sim_host.run("cat /usr/local/Ascend/driver/version.info").stdout


def test_make_model_writes_a_config_json_under_srv_models(sim_host: SimHost) -> None:
    model = sim_host.make_model("tiny")
    assert model == Path("/srv/models/tiny")
    assert (model / "config.json").is_file()


def _test_containers(sim_host: SimHost) -> list[str]:
    """Every container `reset` must remove: ours (labelled) and any of the npu-sim image."""
    ours = sim_host.local_docker("ps", "-aq", "--filter", "label=ascend-fleet.test").stdout.split()
    of_the_image = sim_host.local_docker("ps", "-aq", "--filter", f"ancestor={IMAGE}").stdout.split()
    return sorted(set(ours) | set(of_the_image))


def _device_share_answers(sim_host: SimHost) -> list[str]:
    """What `npu-smi info -t device-share -i N -c 0` answers for each card, as a deployer asks."""
    return [sim_host.npu_smi(f"info -t device-share -i {card} -c 0").strip() for card in range(8)]


def test_reset_leaves_no_test_container_claim_fault_mark_model_or_shared_card_behind(sim_host: SimHost) -> None:
    model = sim_host.make_model("reset-model")
    sim_host.set_device_share(6)
    sim_host.start_service("reset-killed", model=model, cards=[2], port=7101, gpu_memory_utilization=0.1, publish=False)
    sim_host.start_service("reset-running", model=model, cards=[3], port=7102, gpu_memory_utilization=0.1, publish=False)
    sim_host.wait_healthy("reset-killed")
    sim_host.wait_healthy("reset-running")
    sim_host.kill_containers(prefix="reset-killed")  # its claim stays: no chance to release it
    sim_host.docker("run", "-d", "--name", "reset-unlabelled", "--entrypoint", "/bin/sleep", IMAGE, "300")
    sim_host.mark_unhealthy(1, "Alarm")
    sim_host.mark_no_device_share(4)
    assert len(_test_containers(sim_host)) == 3
    assert sorted(p.parent.name for p in CLAIMS_DIR.glob("card*/port*")) == ["card2", "card3"]
    assert "Alarm" in sim_host.npu_smi("info")
    assert "does not support" in _device_share_answers(sim_host)[4]
    assert sim_host.device_shared_cards() == [6]

    sim_host.reset()

    assert _test_containers(sim_host) == []
    assert list(CLAIMS_DIR.glob("card*/port*")) == []
    assert "Alarm" not in sim_host.npu_smi("info")
    assert _device_share_answers(sim_host) == ["Device-share Status            : False"] * 8
    assert sim_host.device_shared_cards() == []
    assert not model.exists()


def test_a_reboot_turns_device_share_off_on_every_card(sim_host: SimHost) -> None:
    for card in range(8):
        sim_host.set_device_share(card)
    assert _device_share_answers(sim_host) == ["Device-share Status            : True"] * 8

    sim_host.reboot()

    assert _device_share_answers(sim_host) == ["Device-share Status            : False"] * 8
    assert sim_host.device_shared_cards() == []


def test_a_second_simulated_host_that_never_gets_the_lock_leaves_the_first_ones_containers_alone(
    sim_host: SimHost, tmp_path: Path
) -> None:
    """Two test runs on one machine (`make test` beside `make test-engine`): the one that waits for
    the lock and gives up must not clean up the host the other one is using."""
    model = sim_host.make_model("bge-m3")
    sim_host.start_service("kept", model=model, cards=[2], port=7100, gpu_memory_utilization=0.1)
    sim_host.wait_healthy("kept")
    second = SimHost(tmp_path / "second", lock_timeout=0.5)
    with pytest.raises(SimHostError, match="another simulated host holds"):
        second.start()
    second.stop()
    assert sim_host.state("kept")["Running"] is True
    assert list(CLAIMS_DIR.glob("card2/port*/owner"))
    assert sim_host.docker("version", "--format", "{{.Server.Version}}").stdout.strip()
