"""The host check of a host that runs a member of a multi-host service (records/host_check.py): the
member's `HCCL_IF_IP` must be an address of the host, on `nic.interface` when the host declares one,
or `pulumi up` stops before anything reaches the host. The script's text, then the script run under
`sh` on a stand-in root whose `ip` answers as iproute2's `ip -o addr show` does. The same check on the
simulated host's own interfaces: tests/simhost/test_host_access.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from records.host_check import host_check_script
from records.host_requirements import requirements
from tests.support.disaggregated import pd
from tests.support.pipeline import deployment_of
from tests.support.stacks import fleet, host, service
from tests.support.stand_in_root import ip

DP = {"size": 2, "perHost": 2}
# `ip -o addr show` on a host with loopback and one NIC, one line per address (iproute2 ip/ipaddress.c).
ADDRESSES = {
    "lo": "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
    "1: lo    inet6 ::1/128 scope host noprefixroute \\       valid_lft forever preferred_lft forever\n",
    "eth0": "2: eth0    inet 10.20.0.110/24 brd 10.20.0.255 scope global eth0\\       valid_lft forever preferred_lft forever\n",
}


def member_host(**nic: str):
    """The host record of npu-a, which runs the one member of a data-parallel service beside a single-host one."""
    stack = fleet(
        [host("npu-a", address="10.20.0.110", nic=nic)],
        [service("ds", 2, 0.9, dataParallel=DP), service("small", 1, 0.5)],
    )
    return deployment_of(stack).hosts[0]


def stand_in_host(root: Path) -> None:
    """Every driver path the check asks of a host, an npu-smi that shows no card, and an `ip` that prints
    ADDRESSES (one interface's with `dev`, or iproute2's refusal of an unknown one)."""
    for req in requirements(()):
        path = root / req.path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir() if req.directory else path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    (root / "bin").mkdir()
    (root / "bin/docker").write_text("#!/bin/sh\n")
    (root / "bin/docker").chmod(0o755)
    ip(root, ADDRESSES)


def instance_host(**nic: str):
    """The host record of npu-a, which runs both instances of a disaggregated service (and its proxy)."""
    stack = fleet([host("npu-a", address="10.20.0.110", nic=nic)], [pd()])
    return deployment_of(stack).hosts[0]


def checked(root: Path, hd=None, **nic: str) -> subprocess.CompletedProcess:
    """The host check of npu-a (its members' and instances' NIC; no container's paths) on the stand-in root:
    `hd`'s, else that of `member_host(**nic)`."""
    stand_in_host(root)
    hd = hd or member_host(**nic)
    script = host_check_script(hd.host, [], root=str(root), members=hd.plan.members, instances=[i.name for i in hd.instances])
    env = {**os.environ, "PATH": f"{root}/bin:{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60, env=env)


def test_a_member_hosts_check_lists_the_addresses_of_its_declared_interface_quoted_for_the_shell():
    script = member_host(interface="br'0").check_script
    assert "ip -o addr show dev 'br'\"'\"'0' 2>&1 </dev/null" in script
    assert "case \" $nic_has\" in *' 10.20.0.110 on '*) ;;" in script
    assert "ip -o addr show 2>&1" in member_host().check_script


def test_a_host_without_a_member_gets_no_nic_check_even_in_a_fleet_with_one():
    stack = fleet(
        [host("npu-a", address="10.20.0.110"), host("npu-b", address="10.20.0.111")],
        [service("ds", 2, 0.9, dataParallel=DP, hosts=["npu-a"]), service("small", 1, 0.5, host="npu-b")],
    )
    a, b = deployment_of(stack).hosts
    assert "ip -o addr show" in a.check_script and "ip -o addr show" not in b.check_script


def test_the_check_passes_when_the_address_is_on_the_declared_interface_and_says_so(tmp_path):
    result = checked(tmp_path, interface="eth0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith(", HCCL_IF_IP 10.20.0.110 on eth0")


def test_the_check_passes_when_the_address_is_on_any_interface_and_none_is_declared(tmp_path):
    result = checked(tmp_path, address="::1")
    assert result.returncode == 0, result.stderr


FIX = "set host npu-a's nic in ascend-fleet:hosts, nic.address to an address of the host"
REFUSALS = {
    "an address on another interface than the declared one": (
        {"interface": "lo"},
        "  - HCCL_IF_IP 10.20.0.110 of ds-node0 on host npu-a (from its address, as nic.address is unset) is not an "
        f"address of interface lo (it has: 127.0.0.1 on lo, ::1 on lo): {FIX} and nic.interface to the interface it "
        "is on (ip -br addr), or configure the address there\n",
    ),
    "an address that is only a prefix of one the host has": (
        {"address": "10.20.0.11"},
        "  - HCCL_IF_IP 10.20.0.11 of ds-node0 on host npu-a (from its nic.address) is not an address of the host "
        f"(it has: 10.20.0.110 on eth0, 127.0.0.1 on lo, ::1 on lo): {FIX} (ip -br addr), or configure the address "
        "there\n",
    ),
    "a declared interface the host lacks, in ip's words": (
        {"interface": "enp189s0f0"},
        "  - cannot list the addresses of interface enp189s0f0 for HCCL_IF_IP 10.20.0.110 of ds-node0 on host npu-a "
        "(from its address, as nic.address is unset) (ip -o addr show dev enp189s0f0: Device \"enp189s0f0\" does not "
        f"exist.): {FIX} and nic.interface",
    ),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_a_nic_the_host_does_not_have_as_declared_stops_the_check_with_what_to_set(tmp_path, case):
    nic, paragraph = REFUSALS[case]
    result = checked(tmp_path, **nic)
    assert result.returncode == 1
    assert paragraph in result.stderr


def test_a_host_with_prefill_and_decode_instances_checks_their_nic_as_a_members_and_others_do_not():
    # vllm-ascend@v0.20.2rc1 pd_disaggregation_mooncake_single_node.md exports HCCL_IF_IP and the three
    # *_SOCKET_IFNAME for each instance: the same address must be the host's, on its interface.
    script = instance_host(interface="eth0").check_script
    assert "ip -o addr show dev eth0 2>&1 </dev/null" in script and "HCCL_IF_IP 10.20.0.110 of pd-decode, pd-prefill" in script
    stack = fleet([host("npu-a", address="10.20.0.110"), host("npu-b", address="10.20.0.111")],
                  [pd(disaggregated={"prefill": {"tensorParallelSize": 4, "replicaPins": [{"host": "npu-a"}]},
                                     "decode": {"tensorParallelSize": 4, "replicaPins": [{"host": "npu-a"}]},
                                     "proxy": {"host": "npu-b"}}), service("small", 1, 0.5, host="npu-b")])  # fmt: skip
    a, b = deployment_of(stack).hosts
    assert "ip -o addr show" in a.check_script and "ip -o addr show" not in b.check_script


def test_an_instances_host_check_stops_when_its_address_is_not_on_the_declared_interface(tmp_path):
    result = checked(tmp_path, instance_host(interface="lo"))
    assert result.returncode == 1
    assert (
        "  - HCCL_IF_IP 10.20.0.110 of pd-decode, pd-prefill on host npu-a (from its address, as nic.address is unset) is "
        "not an address of interface lo (it has: 127.0.0.1 on lo, ::1 on lo)"
    ) in result.stderr


def test_a_members_host_check_creates_its_compile_cache_and_asks_for_its_model_and_cards():
    """Docker refuses a bind mount whose source is missing, so a member's compile cache must be made by the
    check as a service's is (the real engine failed `invalid mount config for type "bind": bind source path
    does not exist: /var/lib/ascend-fleet/cache/<service>` without it)."""
    hd = member_host()
    (md,) = hd.members
    script = hd.check_script
    cache = next(m.source for m in md.spec.mounts if m.source.startswith("/var/lib/ascend-fleet/cache/"))
    assert f"mkdir -p {cache} " in script and f"used by {md.spec.name}" in script
    assert f"missing model directory {md.plan.service.model} (used by {md.spec.name}" in script
    assert all(f"{device} " in script for device in md.spec.device_files if device.startswith("/dev/davinci"))
