"""Shared cards for real: the prod layout shares card 0 between bge-m3 and qwen-vl.

On a real 910B host a second non-privileged container cannot open a card the first one holds
unless the card is in device-share mode (vllm-ascend issues 632, 248, 2698), the mode is off
after a reboot, and Docker starts every container at once after a reboot, so two instances
would load on one card together (vllm-ascend issues 5917, 5707). The simulated host behaves
the same way (sim/README.md). The containers are started by the `render --format docker-run`
script, which runs the same device-share script the Pulumi program runs over SSH; the reboots are
real restarts of the host's dockerd (`SimHost.reboot`).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from records.device_share import BOOT_SCRIPT
from sim.host import SimHost
from tests.simhost.loads import now, stretched_loads, wait_for_any_log
from tests.simhost.probes import script_probed_often
from tests.support.sim_stacks import prod_on_the_simulated_host
from tests.support.sim_stacks import DCMI_BUSY, LABEL, WAITING, allocation, start_rendered

"""A gate waiting: for a card's lock, or for an instance ranked before it on a card (records.card_order)."""


def test_prod_shares_card_0_only_in_device_share_mode_and_restarts_in_order(sim_host: SimHost, tmp_path, boot_files):
    config = prod_on_the_simulated_host(sim_host, tmp_path)
    plan = json.loads(allocation("plan", "--config", str(config), "--format", "json").stdout)
    [npu_a] = plan["hosts"]
    assert npu_a["sharedCards"] == [0]
    for s in npu_a["services"]:
        command = s["container"]["command"]
        sim_host.make_model(command[command.index("serve") + 1])
    script = allocation("render", "--config", str(config), "--format", "docker-run").stdout
    script = script_probed_often(script, 3)

    # The render script: card 0 into device-share mode first, then all three healthy. (Without
    # the mode, qwen-vl cannot open card 0 beside bge-m3: the contrast is the test below.)
    assert sim_host.device_shared_cards() == []
    started = subprocess.run(["sh", "-c", script], env=sim_host.docker_env(), capture_output=True, text=True)
    assert started.returncode == 0, started.stderr
    assert "card 0: device-share on" in started.stdout and "cards 0 in device-share mode" in started.stdout
    assert sim_host.device_shared_cards() == [0]
    for name in ("bge-m3", "qwen-vl", "qwen-long"):
        sim_host.wait_healthy(name, timeout=120)
    again = subprocess.run(["sh", "-c", script], env=sim_host.docker_env(), capture_output=True, text=True)
    assert again.returncode == 0 and "card 0: device-share already on" in again.stdout

    # A reboot: the power goes with every container running; at boot the mode is off, the boot
    # unit's script (ordered before docker.service) switches card 0 back on, then Docker's restore
    # starts all three at once. bge-m3, first on card 0 when the render script started them, loads
    # first again (records.card_order) and keeps loading until qwen-vl has been seen waiting for it.
    since = now()
    with stretched_loads("bge-m3", "qwen-vl"):
        boot = sim_host.reboot()
        assert boot.started == ["bge-m3", "qwen-long", "qwen-vl"]
        assert boot.device_share is not None and "card 0: device-share on" in boot.device_share.stdout, boot.device_share
        assert sim_host.device_shared_cards() == [0]
        wait_for_any_log(sim_host, ("bge-m3", "qwen-vl"), WAITING, since=since)
    for name in ("bge-m3", "qwen-vl", "qwen-long"):
        sim_host.wait_healthy(name, timeout=120)
    # qwen-vl waited for bge-m3 instead of loading beside it or before it.
    waited = [name for name in ("bge-m3", "qwen-vl") if WAITING in sim_host.logs(name, since)]
    assert waited == ["qwen-vl"]
    for name in ("bge-m3", "qwen-vl"):
        assert "No available memory" not in sim_host.logs(name, since) and DCMI_BUSY not in sim_host.logs(name, since)


def test_after_a_reboot_without_the_boot_unit_doctor_reports_the_shared_card(sim_host: SimHost, tmp_path, boot_files):
    config = prod_on_the_simulated_host(sim_host, tmp_path)
    start_rendered(sim_host, config)
    sim_host.wait_healthy("bge-m3", timeout=120)
    assert allocation("doctor", "--config", str(config)).returncode in (0, 1)

    unit = Path(BOOT_SCRIPT)
    aside = unit.rename(unit.with_name(f"{unit.name}.aside"))
    try:
        boot = sim_host.reboot()  # and the unit never ran: card 0 comes up out of device-share mode
    finally:
        aside.rename(unit)
    assert boot.device_share is None and boot.started == ["bge-m3", "qwen-long", "qwen-vl"]
    wait_for_any_log(sim_host, ["qwen-vl"], DCMI_BUSY)
    report = allocation("doctor", "--config", str(config), "--format", "json")
    assert report.returncode == 1
    [host] = json.loads(report.stdout)["hosts"]
    sharing = [f for f in host["findings"] if f["kind"] == "sharing"]
    assert [f["card"] for f in sharing] == [0], host["findings"]
    assert "bge-m3 and qwen-vl" in sharing[0]["message"] and "False" in sharing[0]["message"]
