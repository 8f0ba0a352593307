"""Atlas A3 hosts (`board: a3`) and the host check's comparison of the plan with the host.

On A3, card k is npu-smi's NPU k//2, chip k%2, and npu-smi switches device-share for both chips of
an NPU at once. The scripts run for real against the simulated npu-smi (sim/npu-smi) under a
stand-in root, as in tests/test_device_share.py; `docker` is a stand-in printing what
`docker inspect --format` would.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from allocation.config import Host
from allocation.errors import ConfigError
from allocation.planner import plan_fleet
from cli.stackfile import project_values
from records.containers import NPU_SMI
from records.deployment import deploy
from records.host_requirements import requirements
from ops.doctor.gather import gather_script
from records.device_share import A3_ADDRESSING, device_share_script
from records.host_check import HBM_AWK, MAP_AWK, host_check_script
from tests.support.stacks import fleet, host, service
from tests.support.docker_fakes import stand_in_docker
from tests.support.stand_in_root import held, npu_smi
from views.diff import diff_plans
from views.report import render_plan
from tests.support.pipeline import deployment_of, plan_json_of

REPO = Path(__file__).resolve().parents[1]
A3 = Host(name="npu-c", address="192.0.2.30", board="a3", npus=16)


def a3_fleet(*services: dict, **host_extra):
    return fleet([host("npu-c", board="a3", npus=16, **host_extra)], list(services))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A stand-in root whose npu-smi is sim/npu-smi (layout from the board and hbm-mb files there,
    which the tests write); docker sees no container."""
    npu_smi(tmp_path)
    (tmp_path / "bin").mkdir()
    stand_in_docker(tmp_path, "")
    return tmp_path


def sh(root: Path, script: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{root}/bin:{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)


def sets(root: Path) -> list[str]:
    return [c for c in (root / "calls").read_text().splitlines() if c.startswith(("set", "docker stop", "docker start"))]


def check(root: Path, stack) -> subprocess.CompletedProcess:
    hd = deployment_of(stack).hosts[0]
    return sh(root, host_check_script(hd.host, [(s.plan, s.spec) for s in hd.services], root=str(root)))


# ---- config and plan ------------------------------------------------------------------------


def test_board_defaults_to_a2_and_a3_needs_sixteen_chips_said_in_one_message():
    assert Host(name="a", address="a").board == "a2"
    with pytest.raises(ConfigError) as err:
        fleet([host("npu-c", board="a3")], [])
    assert "board a3 has 16 chips (8 NPUs of 2), but npus is 8: set npus: 16" in str(err.value)
    assert A3.npu_chip(5) == (2, 1) and Host(name="a", address="a").npu_chip(5) == (5, 0)


def test_on_a3_sharing_a_chip_puts_its_npu_in_device_share_mode_and_says_so_in_the_plan():
    stack = a3_fleet(
        service("a", 1, 0.4, host="npu-c", devices=[2]),
        service("b", 1, 0.4, host="npu-c", devices=[2]),
        service("c", 1, 0.5, host="npu-c", devices=[3]),
        service("d", 1, 0.5, host="npu-c", devices=[4]),
    )
    deployment = deployment_of(stack)
    hd = deployment.hosts[0]
    assert hd.shared_cards == (2,) and hd.device_share_cards == (2, 3)
    # c, alone on card 3, waits for the switch of NPU 1 (it must be free of containers for it), d does not.
    assert {s.name: s.shared for s in hd.services} == {"a": True, "b": True, "c": True, "d": False}
    assert not any(s.spec.to_json().get("privileged") for s in hd.services)
    doc = json.loads(render_plan(deployment, "json"))["hosts"][0]
    assert (doc["board"], doc["sharedCards"], doc["deviceShareCards"]) == ("a3", [2], [2, 3])
    assert "device-share mode on cards 2,3 (both chips of each NPU)" in render_plan(deployment, "table")
    assert "for card in 2 3; do" in hd.device_share_script


def test_a2_plans_keep_one_card_per_sharing_unit():
    stack = fleet([host("npu-a")], [service("a", 1, 0.4, devices=[2]), service("b", 1, 0.4, devices=[2])])
    hd = deployment_of(stack).hosts[0]
    assert hd.device_share_cards == (2,) and "-i \"$1\" -c 0" in hd.device_share_script
    assert json.loads(render_plan(deployment_of(stack), "json"))["hosts"][0]["board"] == "a2"


def test_a_service_on_an_a3_host_without_an_image_gets_the_a3_build_and_a2_keeps_its_default():
    stack = fleet(
        [host("npu-a"), host("npu-c", board="a3", npus=16)],
        [
            service("on-a2", host="npu-a"),
            service("on-a3", host="npu-c"),
            service("own", host="npu-c", image="registry.example/vllm:1"),
        ],
    )
    plan = plan_fleet(stack)
    images = {s.name: s.spec.image for s in deploy(plan).services()}
    assert images == {
        "on-a2": "quay.io/ascend/vllm-ascend:v0.20.2rc1",
        "on-a3": "quay.io/ascend/vllm-ascend:v0.20.2rc1-a3",
        "own": "registry.example/vllm:1",
    }
    assert plan.warnings == ()
    assert [n.split(":")[:2] for n in plan.notes] == [["host npu-a", " profile"], ["host npu-c", " profile"]]  # not sized


def test_pulumi_yaml_s_default_image_gives_an_a3_host_the_a3_build_and_another_default_is_taken_as_it_is():
    """Pulumi.yaml sets `defaults.image` to the project's default (the A2 build) for every stack."""
    project = project_values(REPO / "Pulumi.yaml")["defaults"]["image"]
    assert project == "quay.io/ascend/vllm-ascend:v0.20.2rc1"
    hosts = [host("npu-a"), host("npu-c", board="a3", npus=16)]
    services = [service("on-a2", host="npu-a"), service("on-a3", host="npu-c")]
    plan = plan_fleet(fleet(hosts, services, defaults={"image": project}))
    images = {s.name: s.spec.image for s in deploy(plan).services()}
    assert images == {"on-a2": project, "on-a3": f"{project}-a3"} and [w for w in plan.warnings if ": image: " in w] == []
    mirror = "registry.example/vllm-ascend:v0.20.2rc1"
    plan = plan_fleet(fleet(hosts, services, defaults={"image": mirror}))
    assert {s.spec.image for s in deploy(plan).services()} == {mirror}
    assert [w for w in plan.warnings if ": image: " in w] == [
        f"host npu-c card 0: image: on-a3 runs {mirror}, not the A3 build (no -a3 tag), but the host has board: a3; "
        f"vllm-ascend publishes one build per board: set the service's own image to {mirror}-a3",
    ]


def test_a_vllm_ascend_image_of_the_other_board_is_a_warning_in_the_plan():
    stack = fleet(
        [host("npu-a"), host("npu-c", board="a3", npus=16)],
        [
            service("a3-on-a2", host="npu-a", image="quay.io/ascend/vllm-ascend:v0.20.2rc1-a3"),
            service("a2-on-a3", host="npu-c", image="quay.io/ascend/vllm-ascend:v0.20.2rc1"),
        ],
    )
    images = [w for w in plan_fleet(stack).warnings if ": image: " in w]
    assert images == [
        "host npu-a card 0: image: a3-on-a2 runs quay.io/ascend/vllm-ascend:v0.20.2rc1-a3, an A3 build (-a3), but the "
        "host has board: a2; vllm-ascend publishes one build per board: set the service's own image to "
        "quay.io/ascend/vllm-ascend:v0.20.2rc1",
        "host npu-c card 0: image: a2-on-a3 runs quay.io/ascend/vllm-ascend:v0.20.2rc1, not the A3 build (no -a3 "
        "tag), but the host has board: a3; vllm-ascend publishes one build per board: set the service's own image to "
        "quay.io/ascend/vllm-ascend:v0.20.2rc1-a3",
    ]


# ---- device-share against the simulated A3 npu-smi -------------------------------------------


def test_the_a3_script_switches_the_npu_once_and_reads_each_chip_by_npu_and_chip_id(root):
    (root / "board").write_text("a3\n")
    first = sh(root, device_share_script(A3, [2, 3], root=str(root)))
    assert first.returncode == 0, first.stderr
    assert "card 2: device-share on" in first.stdout and "card 3: device-share already on" in first.stdout
    assert sets(root) == ["set -t device-share -i 1 -d 1"]
    calls = (root / "calls").read_text().splitlines()
    assert "info -t device-share -i 1 -c 0" in calls and "info -t device-share -i 1 -c 1" in calls
    assert sorted(p.name for p in (root / "claims/device-share").iterdir()) == ["card2", "card3"]
    for words in A3_ADDRESSING.values():
        assert words in device_share_script(A3, [2, 3])


def test_the_a2_addressing_on_an_a3_board_is_refused_as_the_real_tool_refuses_it(root):
    """What today's script did on A3: `-c 0` sets a single chip, which A3 does not allow."""
    (root / "board").write_text("a3\n")
    a2 = Host(name="npu-c", address="192.0.2.30", npus=16)
    result = sh(root, device_share_script(a2, [1], root=str(root)))
    assert result.returncode == 1
    assert "Setting device sharing for single chip is not allowed for this product" in result.stderr


def test_the_other_chip_of_the_npu_held_by_a_container_is_named_as_the_holder(root):
    (root / "board").write_text("a3\n")
    with held(root, 3, "qwen-long"):
        stand_in_docker(root, "/qwen-long false /dev/davinci3 /dev/davinci_manager ")
        refused = sh(root, device_share_script(A3, [2, 3], root=str(root)))
        hd_check = sh(root, host_check_script(A3, [], shared_cards=[2, 3], root=str(root)))
    assert refused.returncode == 1
    assert "card 2 could not be put into device-share mode" in refused.stderr
    assert "containers holding it: qwen-long" in refused.stderr
    assert "card 2 must go into device-share mode, but running container(s) qwen-long outside the plan hold it" in hd_check.stderr


def test_with_stop_holders_the_holder_of_the_other_chip_is_stopped_for_the_npu_switch(root):
    (root / "board").write_text("a3\n")
    with held(root, 3, "qwen-long") as holder:
        stand_in_docker(root, "/qwen-long false /dev/davinci3 /dev/davinci_manager ", holder)
        stop = Host(name="npu-c", address="192.0.2.30", board="a3", npus=16, heldCards="stopHolders")
        result = sh(root, device_share_script(stop, [2, 3], own=["qwen-long"], root=str(root)))
    assert result.returncode == 0, result.stderr
    assert sets(root) == [
        "set -t device-share -i 1 -d 1",  # refused: chip 1 is busy
        "docker stop c0ffee",  # the ID of the container named exactly qwen-long
        "set -t device-share -i 1 -d 1",
        "docker start c0ffee",
    ]


# ---- the host check compares the plan with the host ------------------------------------------


def test_a_32_gb_board_against_hbm_gib_64_stops_pulumi_up_naming_host_card_both_values_and_the_key(root):
    (root / "hbm-mb").write_text("32768\n")
    stack = fleet([host("npu-a")], [service("a", 1, 0.5, devices=[1])])
    result = check(root, stack)
    assert result.returncode == 1
    assert (
        "card 1 has 32768 MB of HBM (npu-smi info), but host npu-a declares hbmGiB: 64 (65536 MB): "
        "set its hbmGiB to 32"
    ) in result.stderr
    assert "card 0 has" not in result.stderr, "only the planned cards are compared"


def test_the_declared_hbm_that_matches_the_card_passes_and_hbm_bytes_beyond_the_card_does_not(root):
    (root / "hbm-mb").write_text("32768\n")
    fits = check(root, fleet([host("npu-a", hbmGiB=32)], [service("a", 1, 0.5, devices=[1])]))
    assert "MB of HBM" not in fits.stderr and "compute chip" not in fits.stderr, fits.stderr
    # 35 GB fits a 32 GB card of 33,379 MB or more (plan accepts it), not this one of 32,768 MB
    too_big = check(root, fleet([host("npu-a", hbmGiB=32, hbmBytes=35_000_000_000)], [service("a", 1, 0.5, devices=[1])]))
    assert "declares hbmBytes: 35000000000, not 85-100% of it" in too_big.stderr


def test_a_board_other_than_declared_stops_pulumi_up_with_the_key_to_change(root):
    a2_declared = fleet([host("npu-a")], [service("a", 1, 0.5, devices=[2])])
    (root / "board").write_text("a3\n")
    result = check(root, a2_declared)
    assert "npu-smi info -m shows 2 compute chip(s) per NPU ID, an Atlas A3 board, but host npu-a declares " \
        "board: a2: set its board to a3 (npus: 16)" in result.stderr
    (root / "board").write_text("a2\n")
    result = check(root, a3_fleet(service("a", 1, 0.5, host="npu-c", devices=[2])))
    assert "an Atlas A2 board, but host npu-c declares board: a3: set its board to a2 (npus: 8)" in result.stderr


def test_an_a3_plan_on_an_a3_host_passes_the_board_and_mapping_checks(root):
    (root / "board").write_text("a3\n")
    result = check(root, a3_fleet(service("a", 1, 0.5, host="npu-c", devices=[2]), service("b", 2, 0.5, host="npu-c")))
    assert result.returncode == 1  # the stand-in root has no driver or device files
    assert "compute chip" not in result.stderr and "addresses it as" not in result.stderr, result.stderr
    assert "MB of HBM" not in result.stderr


def test_a_host_whose_npu_ids_are_not_the_card_numbers_is_refused_card_by_card(root):
    """`npu-smi info -m` on some A2 hosts numbers NPUs from 8 (vllm-ascend tests/ut/test_cpu_binding.py)."""
    smi = root / NPU_SMI.lstrip("/")
    smi.write_text(
        "#!/bin/sh\n"
        'case "$*" in "info -m") printf "NPU ID  Chip ID  Chip Logic ID  Chip Name\\n8 0 0 Ascend\\n8 1 - Mcu\\n9 0 1 Ascend\\n" ;; esac\n'
    )
    result = check(root, fleet([host("npu-a")], [service("a", 1, 0.5, devices=[1])]))
    assert "card 1 is NPU 9 chip 0 on host npu-a (npu-smi info -m), but board a2 addresses it as NPU 1 chip 0" in result.stderr


@pytest.mark.parametrize(
    ("screen", "cards"),
    [
        ("npu-smi-info-910b3-idle.txt", 8),
        ("npu-smi-info-910b3-seed.txt", 8),
        ("npu-smi-info-910b3-container-column.txt", 8),
        ("npu-smi-info-a3-vllm-ascend-6245.txt", 3),  # A3: the card is the chip row's Phy-ID
    ],
)
def test_the_hbm_reading_parses_the_real_screens_processes_and_all(screen, cards):
    text = (REPO / "tests/data/npu-smi" / screen).read_text()
    out = subprocess.run(["awk", HBM_AWK], input=text, capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:-1] == [f"{c} 65536" for c in range(cards)]


def test_the_chip_mapping_reading_takes_the_phy_id_on_a3_and_the_logic_id_on_a2():
    a3 = "NPU ID  Chip ID  Chip Logic ID  Chip Phy-ID Chip Name\n0 0 0 0 Ascend\n0 1 1 1 Ascend\n0 2 - - Mcu\n"
    # Where only some chips are visible the logic IDs start from 0, the Phy-ID stays the card.
    a3_part = "NPU ID  Chip ID  Chip Logic ID  Chip Phy-ID  Chip Name\n3       0        0              6            Ascend\n"
    a2 = "NPU ID  Chip ID  Chip Logic ID  Chip Name\n4       0        1              Ascend 910B3\n4       1        -              Mcu\n"
    texts = (a3, a3_part, a2)
    read = [subprocess.run(["awk", MAP_AWK], input=t, capture_output=True, text=True, check=True).stdout for t in texts]
    assert read == ["0 0 0\n1 0 1\n", "6 3 0\n", "1 4 0\n"]


def test_doctor_reads_the_device_share_mode_of_an_a3_card_by_npu_and_chip():
    script = gather_script(requirements([2, 3]), (2, 3), (), "a3")
    assert "npu-smi info -t device-share -i 1 -c 1 2>&1 | f device-share 3" in script
    assert "npu-smi info -t device-share -i 3 -c 0 2>&1 | f device-share 3" in gather_script(requirements([3]), (3,))


def test_plan_against_names_the_container_on_the_other_chip_that_must_stop_for_the_npu_switch():
    before = a3_fleet(service("alone", 1, 0.5, host="npu-c", devices=[3]), service("a", 1, 0.4, host="npu-c", devices=[2]))
    after = a3_fleet(
        service("alone", 1, 0.5, host="npu-c", devices=[3]),
        service("a", 1, 0.4, host="npu-c", devices=[2]),
        service("b", 1, 0.4, host="npu-c", devices=[2]),
    )
    old, new = (plan_json_of(f) for f in (before, after))
    (host_diff,) = diff_plans(old, new).hosts
    assert host_diff.stops == (
        "card 2 becomes shared: a holds it and must stop while the card switches to device-share mode; "
        "heldCards refuse: pulumi up stops at the host check until they are stopped by hand (or the host's heldCards is stopHolders)",
        "card 3 shares its NPU with a shared card: alone holds it and must stop while the card switches to device-share "
        "mode; heldCards refuse: pulumi up stops at the host check until they are stopped by hand (or the host's "
        "heldCards is stopHolders)",
    )
