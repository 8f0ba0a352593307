"""The device-share script, run for real against the simulated npu-smi (sim/npu-smi).

npu-smi's texts, prompt and exit codes are those of the real tool (see sim/npu-smi). The script runs
under a temporary root; `docker` is a stand-in that prints what `docker inspect --format` would.
"""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from allocation.config import Host
from records.containers import NPU_SMI
from records.device_share import BOOT_SCRIPT, DRIVER_WAIT_SECONDS, UNIT_PATH, boot_unit, device_share_script
from records.host_check import host_check_script
from tests.support.docker_fakes import stand_in_docker
from tests.support.pipeline import deployment_of
from tests.support.stacks import fleet, service
from tests.support.stand_in_root import held, npu_smi

HOST = Host(name="npu-a", address="192.0.2.10")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A root with the simulated npu-smi (state under claims/) that logs every call, and a docker
    whose only running container, bge-m3, holds card 0."""
    npu_smi(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(
        "#!/bin/sh\n"
        'case "$1" in ps) echo c0ffee ;; inspect) echo "/bge-m3 false /dev/davinci0 /dev/davinci_manager " ;; esac\n'
    )
    docker.chmod(0o755)
    return tmp_path


def run(root: Path, cards: list[int]) -> subprocess.CompletedProcess:
    return run_on(HOST, root, cards)


def run_on(host: Host, root: Path, cards: list[int], own: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    script = device_share_script(host, cards, own=own, root=str(root))
    env = {**os.environ, "PATH": f"{root}/bin:{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env)


def test_the_shared_cards_go_into_device_share_mode_once_and_the_boot_unit_is_installed(root):
    first = run(root, [0, 3])
    assert first.returncode == 0, first.stderr
    assert [(root / "claims/device-share" / f"card{c}").read_text().strip() for c in (0, 3)] == ["1", "1"]
    assert "card 0: device-share on" in first.stdout and "card 3: device-share on" in first.stdout
    assert (root / UNIT_PATH.lstrip("/")).read_text() == boot_unit()
    assert "Before=docker.service" in boot_unit()
    boot = root / BOOT_SCRIPT.lstrip("/")
    assert os.access(boot, os.X_OK) and "for card in 0 3; do" in boot.read_text()
    sets = [c for c in (root / "calls").read_text().splitlines() if c.startswith("set")]
    assert sets == ["set -t device-share -i 0 -c 0 -d 1", "set -t device-share -i 3 -c 0 -d 1"]

    second = run(root, [0, 3])
    assert second.returncode == 0 and "card 0: device-share already on" in second.stdout
    sets_after = [c for c in (root / "calls").read_text().splitlines() if c.startswith("set")]
    assert sets_after == sets, "a second run reads the state and sets nothing"


def test_the_boot_script_restores_the_mode_after_a_reboot(root):
    assert run(root, [0]).returncode == 0
    (root / "claims/device-share/card0").unlink()  # what a reboot does
    boot = subprocess.run([str(root / BOOT_SCRIPT.lstrip("/"))], capture_output=True, text=True)
    assert boot.returncode == 0, boot.stdout + boot.stderr
    assert (root / "claims/device-share/card0").read_text().strip() == "1"


def driver_answering_after(root: Path, polls: int) -> dict[str, str]:
    """npu-smi failing its first `polls` calls (a driver still loading at boot), and an environment whose
    `sleep` returns at once and counts: the boot step's wait, without the wait."""
    smi = root / NPU_SMI.lstrip("/")
    smi.rename(smi.with_name("npu-smi.sim"))
    smi.write_text(
        "#!/bin/sh\n"
        f'n=$(cat {root}/polls 2>/dev/null || echo 0); echo $((n + 1)) > {root}/polls\n'
        f'[ "$n" -ge {polls} ] || {{ echo "dcmi module initialize failed" >&2; exit 1; }}\n'
        f'exec {smi.with_name("npu-smi.sim")} "$@"\n'
    )
    smi.chmod(0o755)
    fast = root / "fast-bin"
    fast.mkdir()
    (fast / "sleep").write_text(f"#!/bin/sh\necho \"$1\" >> {root}/slept\n")
    (fast / "sleep").chmod(0o755)
    return {**os.environ, "PATH": f"{fast}:{os.environ['PATH']}"}


def test_at_boot_the_step_waits_ten_minutes_for_the_driver_then_shares_the_cards(root):
    """A driver that answers after 250 s: the old 120 s bound gave up and Docker started the cards unshared."""
    assert run(root, [0]).returncode == 0
    (root / "claims/device-share/card0").unlink()  # what a reboot does
    env = driver_answering_after(root, 125)
    boot = subprocess.run([str(root / BOOT_SCRIPT.lstrip("/"))], capture_output=True, text=True, env=env)
    assert boot.returncode == 0, boot.stdout + boot.stderr
    assert (root / "claims/device-share/card0").read_text().strip() == "1"
    assert (root / "slept").read_text().split() == ["2"] * 125


def test_at_boot_a_driver_that_never_answers_is_waited_for_ten_minutes_and_the_unit_fails(root):
    assert run(root, [0]).returncode == 0
    (root / "claims/device-share/card0").unlink()
    env = driver_answering_after(root, 10_000)
    boot = subprocess.run([str(root / BOOT_SCRIPT.lstrip("/"))], capture_output=True, text=True, env=env)
    assert boot.returncode == 1
    assert len((root / "slept").read_text().split()) * 2 == DRIVER_WAIT_SECONDS - 2 == 598


def test_the_boot_unit_runs_before_docker_and_a_kubernetes_node_s_containerd_and_kubelet():
    assert "\nBefore=docker.service containerd.service kubelet.service\n" in boot_unit()


def test_the_boot_script_fails_when_a_card_cannot_be_shared_so_systemd_shows_the_unit_failed(root):
    """The unit is the only witness at boot: a card left unshared must fail it, not pass quietly."""
    assert run(root, [0, 3]).returncode == 0
    for card in (0, 3):
        (root / "claims/device-share" / f"card{card}").unlink()  # what a reboot does
    with held(root, 3, "bge-m3"):
        boot = subprocess.run([str(root / BOOT_SCRIPT.lstrip("/"))], capture_output=True, text=True)
    assert boot.returncode == 1, boot.stdout + boot.stderr
    assert "card 0: device-share on" in boot.stdout and "card 3 could not be put into device-share mode" in boot.stdout
    assert (root / "claims/device-share/card0").read_text().strip() == "1"


def test_a_card_held_by_a_container_stops_the_deployment_naming_host_card_and_holder(root):
    with held(root, 0, "bge-m3"):
        result = run(root, [0])
    assert result.returncode == 1 and result.stdout == ""
    message = result.stderr
    assert message.startswith("ascend-fleet: host npu-a cannot share cards 0 between containers:")
    assert "card 0 could not be put into device-share mode" in message
    assert "containers holding it: bge-m3" in message
    assert "docker stop" in message and "pulumi up again" in message
    assert not (root / UNIT_PATH.lstrip("/")).exists(), "nothing is installed when a card cannot be shared"


def test_a_board_without_the_mode_is_named_as_such(root):
    (root / "no-device-share").write_text("0\n")
    result = run(root, [0])
    assert result.returncode == 1
    assert "card 0 does not support container sharing (npu-smi: This device does not support querying device-share.)" in result.stderr


@contextmanager
def held_by_a_container(root: Path, card: int) -> Iterator[None]:
    """Card `card` held by a running container `qwen-long` for the block, which the stand-in `docker stop` ends."""
    with held(root, card, "bge-m3") as holder:
        stand_in_docker(root, f"/qwen-long false /dev/davinci{card} /dev/davinci_manager ", holder)
        yield


def test_with_stop_holders_the_script_stops_the_holder_switches_the_card_and_starts_it_again(root):
    with held_by_a_container(root, 4):
        result = run_on(Host(name="npu-a", address="192.0.2.10", heldCards="stopHolders"), root, [4], own=("qwen-long",))
    assert result.returncode == 0, result.stderr
    assert "card 4: device-share on; qwen-long started again" in result.stdout
    calls = [c for c in (root / "calls").read_text().splitlines() if c.startswith(("docker stop", "docker start", "set", "docker ps -a"))]
    assert calls == [
        "set -t device-share -i 4 -c 0 -d 1",  # refused: the card is busy
        "docker ps -aq --no-trunc --filter name=^/\\Qqwen-long\\E$",
        "docker stop c0ffee",  # the ID of the container named exactly qwen-long
        "set -t device-share -i 4 -c 0 -d 1",
        "docker start c0ffee",
    ]
    assert (root / "claims/device-share/card4").read_text().strip() == "1"


def test_with_stop_holders_a_container_outside_the_plan_is_never_stopped_and_the_card_is_refused(root):
    """The compose deployment's containers, say: stopping and starting them again would bring them back
    beside the plan's (a `restart: always` container started again holds its ports and every card)."""
    with held_by_a_container(root, 4):
        host = Host(name="npu-a", address="192.0.2.10", heldCards="stopHolders")
        result = run_on(host, root, [4], own=("bge-m3", "qwen-vl"))
    assert result.returncode == 1
    assert "card 4 is held by qwen-long, outside the plan: pulumi up stops only the plan's own containers" in result.stderr
    assert "docker update --restart=no NAME && docker stop NAME" in result.stderr
    calls = (root / "calls").read_text().splitlines()
    assert not any(c.startswith(("docker stop", "docker start")) for c in calls)


def check_on(host: Host, root: Path, planned: str) -> subprocess.CompletedProcess:
    """The host check of `host` planning one service, `planned`, on card 4, which is to be shared."""
    hd = deployment_of(fleet([{"name": "npu-a", "address": "192.0.2.10"}], [service(planned, 1, 0.4, devices=[4])])).hosts[0]
    script = host_check_script(host, [(sd.plan, sd.spec) for sd in hd.services], shared_cards=[4], root=str(root))
    env = {**os.environ, "PATH": f"{root}/bin:{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env)


def test_by_default_a_held_card_stops_pulumi_up_in_the_host_check_naming_card_and_holder(root):
    with held_by_a_container(root, 4):
        for host, refused in ((HOST, True), (Host(name="npu-a", address="192.0.2.10", heldCards="stopHolders"), False)):
            check = check_on(host, root, "qwen-long")
            line = (
                "card 4 must go into device-share mode, but running container(s) qwen-long hold it, and the mode can "
                "only change while no container uses the card: set host npu-a's heldCards to stopHolders"
            )
            assert check.returncode == 1  # the stand-in root has no driver either
            assert (line in check.stderr) is refused, check.stderr
        assert not any(c.startswith("docker stop") for c in (root / "calls").read_text().splitlines())


def test_a_card_held_outside_the_plan_is_refused_with_the_way_out_that_applies_to_it_never_stop_holders(root):
    """`heldCards: stopHolders` stops only the plan's own containers (the device-share step refuses the
    others), so the host check names `replaces`, or disabling them, for a holder outside the plan."""
    with held_by_a_container(root, 4):
        check = check_on(HOST, root, "bge-m3")
    [line] = [line for line in check.stderr.splitlines() if "card 4 must go into device-share mode" in line]
    assert line == (
        "  - card 4 must go into device-share mode, but running container(s) qwen-long outside the plan hold it, and "
        "the mode can only change while no container uses the card: list them under host npu-a's replaces to let "
        "pulumi up take them out of service, or do it by hand (docker update --restart=no NAME && docker stop NAME); "
        "heldCards: stopHolders stops only the plan's own containers"
    )
