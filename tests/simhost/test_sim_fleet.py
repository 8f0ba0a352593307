"""Many simulated hosts on one machine (sim/fleet.py): each its own SSH endpoint with its own host key
and its own cards, all in front of the one dockerd."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sim.fleet import ADDRESS_FILE, HOSTS_DIR, SimFleet, address_of, card_state_env
from sim.host import SimHost


@pytest.fixture
def fleet(sim_host: SimHost, tmp_path: Path):
    with SimFleet(sim_host, tmp_path / "fleet") as fleet:
        fleet.add(2)
        yield fleet


def ssh(fleet: SimFleet, address: str, port: int, known_hosts: Path, command: str) -> subprocess.CompletedProcess[str]:
    """The ssh a docker provider runs with the fleet's ssh options (sim/sshd.py `ssh_opts`)."""
    return subprocess.run(
        ["ssh", "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
         "-o", f"UserKnownHostsFile={known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
         "-i", str(fleet.identity_file), "-p", str(port), f"root@{address}", command],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_addresses_count_through_the_loopback_range_and_stop_at_its_end() -> None:
    assert [address_of(i) for i in (0, 1, 253, 254)] == ["127.0.1.1", "127.0.1.2", "127.0.1.254", "127.0.2.1"]
    with pytest.raises(ValueError, match="outside"):
        address_of(254 * 254)


def test_every_simulated_host_is_its_own_endpoint_with_its_own_host_key_in_front_of_one_docker(fleet: SimFleet):
    a, b = fleet.endpoints
    assert (a.address, b.address) == ("127.0.1.1", "127.0.1.2")
    keys = fleet.host_keys()
    assert keys[a.name] != keys[b.name]
    lines = fleet.known_hosts_file.read_text().splitlines()
    assert sorted(line.split()[0] for line in lines) == sorted(f"[{e.address}]:{e.ssh_port}" for e in (a, b))
    for e in (a, b):
        proc = ssh(fleet, e.address, e.ssh_port, fleet.known_hosts_file, "docker version --format '{{.Server.Version}}'")
        assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr


def test_a_host_presenting_another_hosts_key_fails_host_key_checking(fleet: SimFleet, tmp_path: Path):
    a, b = fleet.endpoints
    # known_hosts that pins b's key for a's address: a client that trusts b must not reach a.
    swapped = tmp_path / "swapped_known_hosts"
    swapped.write_text(f"[{a.address}]:{a.ssh_port} {fleet.host_keys()[b.name]}\n")
    proc = ssh(fleet, a.address, a.ssh_port, swapped, "true")
    assert proc.returncode != 0 and "HOST IDENTIFICATION HAS CHANGED" in proc.stderr, proc.stderr


def test_each_simulated_host_has_its_own_card_state_folder_holding_its_address(fleet: SimFleet):
    a, b = fleet.endpoints
    assert a.card_state != b.card_state and a.card_state.parent == HOSTS_DIR and a.card_state.is_dir()
    assert card_state_env(a) == {"NPU_SIM_CLAIMS": str(a.card_state)}
    # What the stand-in takes as the host's own address (sim/npu-sim/host-net.sh `host_addresses`).
    assert [(e.card_state / ADDRESS_FILE).read_text() for e in (a, b)] == ["127.0.1.1\n", "127.0.1.2\n"]
