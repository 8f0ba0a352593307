"""The start order's host step and boot step (records.card_order), run for real under a temporary
root; `docker` is a stand-in that answers `info` and `inspect` and logs every call."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from pathlib import Path

import pytest

from allocation.config import Host
from allocation.errors import FleetError
from records.card_order import (
    BOOT_SCRIPT, UNIT_PATH, boot_script, boot_unit, card_orders, order_script, removal_script,
)  # fmt: skip
from records.containers import BOOT_ID_FILE, LOCK_DIR_HOST
from tests.support.docker_fakes import container_id, resolving_docker
from tests.support.pipeline import plan_of

HOST = Host(name="npu-a", address="192.0.2.10")
BOOT = Path(BOOT_ID_FILE).read_text().strip()


def fleet_values() -> dict:
    """alpha and beta share card 0; alpha and gamma (renamed from zulu, whose container it keeps)
    card 1; solo has card 2 to itself."""
    def svc(name: str, devices: list[int], port: int, **more) -> dict:
        return {"name": name, "model": f"/models/{name}", "memoryFraction": 0.3, "devices": devices,
                "host": "npu-a", "apiPort": port, **more}  # fmt: skip

    return {
        "hosts": [{"name": "npu-a", "address": "192.0.2.10"}],
        "services": [
            svc("beta", [0], 8002), svc("alpha", [0, 1], 8001, tensorParallelSize=2), svc("gamma", [1], 8003, previousNames=["zulu"]),
            svc("solo", [2], 8004),
        ],
    }


def locks(root: Path) -> Path:
    return root / LOCK_DIR_HOST.lstrip("/")


def sh(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60)


@pytest.fixture
def docker(tmp_path: Path) -> Path:
    """A docker CLI stand-in that resolves names as dockerd does: bge-m3 runs, qwen-vl is stopped."""
    resolving_docker(tmp_path)
    (tmp_path / "containers").write_text("bge-m3|running\nqwen-vl|exited\n")
    return tmp_path / "bin/docker"


def test_each_shared_card_lists_its_containers_in_name_order_under_the_names_they_were_created_with():
    [hp] = plan_of(fleet_values(), "t").hosts
    # gamma ranks by its name, after alpha, and is listed by its container's: zulu.
    assert card_orders(hp) == {0: ("alpha", "beta"), 1: ("alpha", "zulu")}


def test_a_container_name_that_would_reach_the_shell_unsafely_is_refused_naming_the_host():
    [hp] = plan_of(fleet_values(), "t").hosts
    beta = next(ps for ps in hp.services if ps.name == "beta")
    bad_service = beta.service.model_copy(update={"name": "beta; rm -rf /"})
    bad = dataclasses.replace(beta, instance=dataclasses.replace(beta.instance, service=bad_service))
    with pytest.raises(FleetError, match=r"host npu-a: container names 'beta; rm -rf /' are not Docker names"):
        card_orders(dataclasses.replace(hp, services=tuple(bad if ps is beta else ps for ps in hp.services)))


def test_the_order_step_writes_the_shared_cards_removes_stale_ones_settles_this_boot_and_installs_the_boot_step(
    tmp_path: Path,
):
    locks(tmp_path).mkdir(parents=True)
    (locks(tmp_path) / "order-card-5").write_text("gone\nservice\n")  # a card no longer shared
    (locks(tmp_path) / "card-0").write_text("")  # a card lock: not the step's
    script = order_script(HOST, {0: ("bge-m3", "qwen-vl"), 3: ("a-embed", "qwen-vl")}, root=str(tmp_path))
    for _ in range(2):  # a second run changes nothing
        done = sh(script)
        assert done.returncode == 0, done.stderr
        assert sorted(p.name for p in locks(tmp_path).iterdir()) == ["card-0", "order-card-0", "order-card-3", "settled"]
        assert (locks(tmp_path) / "order-card-0").read_text() == "bge-m3\nqwen-vl\n"
        assert (locks(tmp_path) / "order-card-3").read_text() == "a-embed\nqwen-vl\n"
        assert (locks(tmp_path) / "settled").read_text() == BOOT + "\n"
    boot = tmp_path / BOOT_SCRIPT.lstrip("/")
    assert boot.read_text() == boot_script(root=str(tmp_path)) and os.access(boot, os.X_OK)
    assert (tmp_path / UNIT_PATH.lstrip("/")).read_text() == boot_unit()
    assert "After=docker.service" in boot_unit() and "Before=" not in boot_unit()
    assert "start order of cards [0, 3] written" in done.stdout
    # Card 3 no longer shared: its file goes.
    assert sh(order_script(HOST, {0: ("bge-m3", "qwen-vl")}, root=str(tmp_path))).returncode == 0
    assert not (locks(tmp_path) / "order-card-3").exists() and (locks(tmp_path) / "order-card-0").exists()


def test_the_boot_step_settles_the_boot_once_every_running_container_has_started_its_gate(tmp_path: Path, docker):
    locks(tmp_path).mkdir(parents=True)
    (locks(tmp_path) / "order-card-0").write_text("bge-m3\nqwen-vl\n")
    (locks(tmp_path) / "started-bge-m3").write_text("a-boot-before\n")  # another boot's: no stamp
    (locks(tmp_path) / "settled").write_text("a-boot-before\n")
    boot = subprocess.Popen(
        ["sh", "-c", boot_script(root=str(tmp_path))], env={**os.environ, "docker": str(docker)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        calls = tmp_path / "calls"
        # bge-m3 runs but has not started its gate this boot: the step asks again, and again.
        while (calls.read_text().count(container_id("bge-m3")) if calls.exists() else 0) < 2:
            assert time.monotonic() < deadline and boot.poll() is None, boot.communicate()
            time.sleep(0.1)
        assert (locks(tmp_path) / "settled").read_text() == "a-boot-before\n"
        (locks(tmp_path) / "started-bge-m3").write_text(BOOT + "\n")
        out, err = boot.communicate(timeout=30)
    finally:
        boot.kill()
    assert boot.returncode == 0, err
    assert (locks(tmp_path) / "settled").read_text() == BOOT + "\n"
    assert f"boot {BOOT} settled" in out
    assert f"inspect -f {{{{.State.Running}}}} {container_id('qwen-vl')}" in (tmp_path / "calls").read_text()  # stopped: not waited for


def test_the_boot_step_never_waits_for_a_container_whose_id_only_begins_with_a_name_in_the_order(tmp_path: Path, docker):
    """A name of the order no container has (its service never created, say) is not an ID prefix: the
    running container whose ID begins with it started no gate, and would hold the boot for 120 s."""
    locks(tmp_path).mkdir(parents=True)
    (tmp_path / "containers").write_text("unrelated|running\n")
    (locks(tmp_path) / "order-card-0").write_text(container_id("unrelated")[:6] + "\n")
    env = {**os.environ, "docker": str(docker)}
    boot = subprocess.run(["sh", "-c", boot_script(root=str(tmp_path))], env=env, capture_output=True, text=True, timeout=300)
    assert boot.returncode == 0, boot.stderr
    assert "gave up waiting" not in boot.stderr and (locks(tmp_path) / "settled").read_text() == BOOT + "\n"
    assert container_id("unrelated") not in (tmp_path / "calls").read_text()


def test_removal_takes_the_order_files_the_stamp_and_the_boot_step_away(tmp_path: Path):
    assert sh(order_script(HOST, {0: ("bge-m3", "qwen-vl")}, root=str(tmp_path))).returncode == 0
    (locks(tmp_path) / "card-0").write_text("")
    assert sh(removal_script(root=str(tmp_path))).returncode == 0
    assert [p.name for p in locks(tmp_path).iterdir()] == ["card-0"]
    assert not (tmp_path / BOOT_SCRIPT.lstrip("/")).exists() and not (tmp_path / UNIT_PATH.lstrip("/")).exists()
