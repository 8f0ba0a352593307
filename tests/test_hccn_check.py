"""The host check of a host that runs a prefill or decode instance (records/host_check.py): the host must have
`/etc/hccn.conf`, which every instance mounts read-only, or `pulumi up` stops before anything reaches the host,
in one problem naming the host and its instances. The script's text, then the script run under `sh` on a
stand-in root (as tests/test_nic_check.py does); other hosts' scripts are unchanged (goldens, runtime seam)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from records.containers import HCCN_CONF
from records.host_check import host_check_script
from records.host_requirements import requirements
from tests.support.disaggregated import pd, values
from tests.support.pipeline import deployment_of
from tests.support.stacks import host, service
from tests.support.stand_in_root import ip


def apart():
    """Both instances on a, the proxy alone on b, and a plain service on c."""
    vals = values(pd(disaggregated={"prefill": {"tensorParallelSize": 4, "replicaPins": [{"host": "a"}]},
                                    "decode": {"tensorParallelSize": 4, "replicaPins": [{"host": "a"}]},
                                    "proxy": {"host": "b"}}), service("s", 1, 0.5, host="c"))  # fmt: skip
    vals["hosts"].append(host("c", address="10.0.0.3"))
    return {hd.name: hd for hd in deployment_of(vals).hosts}


def test_a_host_with_instances_checks_for_hccn_conf_once_naming_them_and_no_other_host_does():
    hosts = apart()
    line = [line for line in hosts["a"].check_script.splitlines() if line.startswith(f"[ -f {HCCN_CONF}")]
    assert line == [
        "[ -f /etc/hccn.conf ] || missing 'missing /etc/hccn.conf on host a, which its prefill and decode instance(s) "
        "pd-decode, pd-prefill mount read-only: the NPUs'\"'\"' network settings that hccn_tool writes and shows "
        "(hccn_tool -i 0 -ip -g, as vllm-ascend'\"'\"'s pd_disaggregation_mooncake tutorials check it); without it a "
        "decode instance answers wrongly (vllm-ascend issue 7711)'"
    ]  # fmt: skip
    assert HCCN_CONF not in hosts["b"].check_script and HCCN_CONF not in hosts["c"].check_script
    assert "missing mount source" not in hosts["a"].check_script


def test_the_check_of_a_host_without_an_instance_is_the_one_it_had_before():
    hosts = apart()
    alone = deployment_of({"hosts": [host("c", address="10.0.0.3")], "services": [service("s", 1, 0.5, host="c")]})
    assert hosts["c"].check_script == alone.hosts[0].check_script


def stand_in_host(root: Path) -> None:
    """Every driver path the check asks of a host, every card's device, the model folder, a `docker` that
    lists no container, an npu-smi that shows no card and an `ip` that shows the host's address."""
    for req in requirements(range(8)):
        path = root / req.path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir() if req.directory else path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    (root / "models/pd").mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "bin/docker").write_text("#!/bin/sh\n")
    (root / "bin/docker").chmod(0o755)
    # Host a's address (tests.support.disaggregated.values), for the NIC check of its instances.
    ip(root, {"eth0": "2: eth0    inet 10.0.0.1/24 brd 10.0.0.255 scope global eth0\\       valid_lft forever\n"})


def checked(root: Path) -> subprocess.CompletedProcess:
    hd = apart()["a"]
    script = host_check_script(hd.host, [(i.plan, i.spec) for i in hd.instances], root=str(root), instances=[i.name for i in hd.instances])
    env = {**os.environ, "PATH": f"{root}/bin:{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60, env=env)


def test_run_on_a_host_without_hccn_conf_the_check_stops_naming_the_host_and_its_instances(tmp_path):
    stand_in_host(tmp_path)
    result = checked(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    problems = [line for line in result.stderr.splitlines() if line.startswith("  - ")]
    assert problems == [f"  - missing {tmp_path}/etc/hccn.conf on host a, which its prefill and decode instance(s) "
                        "pd-decode, pd-prefill mount read-only: the NPUs' network settings that hccn_tool writes and "
                        "shows (hccn_tool -i 0 -ip -g, as vllm-ascend's pd_disaggregation_mooncake tutorials check "
                        "it); without it a decode instance answers wrongly (vllm-ascend issue 7711)"]  # fmt: skip


def test_run_on_a_host_with_hccn_conf_the_check_passes_and_says_so(tmp_path):
    stand_in_host(tmp_path)
    (tmp_path / "etc").mkdir(exist_ok=True)
    (tmp_path / "etc/hccn.conf").write_text("address_0=192.168.100.100\n")
    result = checked(tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ascend-fleet: host a ready for 2 service(s): devices 11,")
    assert result.stdout.rstrip().endswith(", /etc/hccn.conf present")
