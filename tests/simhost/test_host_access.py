"""The program's own ways onto a host, tried on the simulated one: its SSH options with a pinned host
key (records.ssh_options), and the host check of an A3 board and of a multi-host member's NIC
(records.host_check). The simulator's own tests are beside this module (test_simulated_host.py,
test_npu_smi.py, test_npu_sim.py)."""

from __future__ import annotations

import subprocess

import pytest

from allocation.config import Ssh
from records.ssh_options import ssh_options
from sim.host import SimHost
from tests.support.pipeline import deployment_of
from tests.support.pulumi_harness import TEST_HOST_KEY
from tests.support.stacks import fleet, host, service


def _ssh_with_pinned_key(sim_host: SimHost, key: str) -> subprocess.CompletedProcess:
    options = ssh_options(Ssh(identityFile=str(sim_host.identity_file)), host_key=key)
    argv = ["ssh", *options, "-p", str(sim_host.ssh_port), "--", f"{sim_host.user}@{sim_host.address}", "echo pinned"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})


def test_a_pinned_host_key_is_trusted_by_the_real_ssh_without_any_known_hosts_file(sim_host: SimHost) -> None:
    """KnownHostsCommand (OpenSSH 8.5+) hands ssh the configured key; no known_hosts is read."""
    key = (sim_host.workdir / "ssh_host_ed25519_key.pub").read_text()
    proc = _ssh_with_pinned_key(sim_host, key)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "pinned"


def test_a_pinned_host_key_that_is_not_the_hosts_is_refused(sim_host: SimHost) -> None:
    proc = _ssh_with_pinned_key(sim_host, TEST_HOST_KEY)
    assert proc.returncode == 255
    assert "Host key verification failed" in proc.stderr


def test_the_host_check_over_ssh_refuses_a_32_gb_a3_board_declared_64_and_accepts_its_board(sim_host: SimHost) -> None:
    sim_host.set_layout("a3", hbm_mb=32768)
    stack = fleet([host("npu-c", board="a3", npus=16)], [service("a", 2, 0.5, host="npu-c", devices=[10, 11])])
    check = sim_host.run(deployment_of(stack).hosts[0].check_script, check=False, timeout=120)
    assert check.returncode == 1
    assert "card 10 has 32768 MB of HBM (npu-smi info), but host npu-c declares hbmGiB: 64" in check.stderr
    assert "card 11 has 32768 MB" in check.stderr and "card 9 has" not in check.stderr
    assert "compute chip" not in check.stderr and "addresses it as" not in check.stderr, check.stderr


def _member_check(sim_host: SimHost, nic: dict) -> subprocess.CompletedProcess:
    """The host check of a host running the one member of a data-parallel service, over SSH on the simulated host."""
    member = service("ds", 2, 0.9, dataParallel={"size": 2, "perHost": 2}, model=str(sim_host.make_model("ds")))
    stack = fleet([host("npu-a", address=sim_host.address, nic=nic)], [member])
    return sim_host.run(deployment_of(stack).hosts[0].check_script, check=False, timeout=120)


def test_the_host_check_over_ssh_accepts_a_members_hccl_if_ip_on_the_hosts_own_interface(sim_host: SimHost) -> None:
    check = _member_check(sim_host, {"address": "127.0.0.1", "interface": "lo"})
    assert check.returncode == 0, check.stderr
    assert check.stdout.rstrip().endswith(", HCCL_IF_IP 127.0.0.1 on lo")


@pytest.mark.parametrize(
    ("nic", "paragraph"),
    [
        (
            {"address": "10.255.0.9", "interface": "lo"},
            "HCCL_IF_IP 10.255.0.9 of ds-node0 on host npu-a (from its nic.address) is not an address of interface lo "
            "(it has: 127.0.0.1 on lo, ",
        ),
        (
            {"address": "127.0.0.1", "interface": "enp189s0f0"},
            "cannot list the addresses of interface enp189s0f0 for HCCL_IF_IP 127.0.0.1 of ds-node0 on host npu-a (from "
            'its nic.address) (ip -o addr show dev enp189s0f0: Device "enp189s0f0" does not exist.): ',
        ),
    ],
)
def test_the_host_check_over_ssh_refuses_a_members_nic_the_host_does_not_have(sim_host: SimHost, nic, paragraph) -> None:
    check = _member_check(sim_host, nic)
    assert check.returncode == 1
    assert paragraph in check.stderr
    assert "): set host npu-a's nic in ascend-fleet:hosts, nic.address to an address of the host" in check.stderr
