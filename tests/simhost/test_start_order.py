"""The order on a shared card survives reboots (issue 28), on the simulated host.

Prod shares card 0 between bge-m3 (0.1) and qwen-vl (0.85); `pulumi up` loads bge-m3 first. After a
reboot Docker starts both at once. The start gate (records.containers `START_GATE`) reads the
deploy-time order that the start-order step wrote on the host (records.card_order) and waits for
its predecessors: these tests let qwen-vl reach its gate before bge-m3 even starts, and check that
card 0 is still first claimed by bge-m3, reboot after reboot; that a neighbour stopped by hand
blocks no one after a real reboot of the host's dockerd (whose restore leaves it down); and that
the gate's holder keeps a card's locks past the start timeout while the model still loads. Loads
are stretched (tests/simhost/loads.py) so the order is seen, not timed.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from collections.abc import Callable, Sequence

from allocation.config import parse_fleet
from views.exports.render import docker_run_args
from records.containers import LOCK_DIR_HOST, START_WAIT_ENV
from records.device_share import BOOT_SCRIPT as DEVICE_SHARE_BOOT
from sim.host import CLAIMS_DIR, SimHost
from tests.simhost.loads import now, stretched_loads
from tests.simhost.probes import probed_often
from tests.support.sim_stacks import prod_on_the_simulated_host
from tests.support.sim_stacks import DCMI_BUSY, LABEL
from tests.support.sim_stacks import NO_MEMORY, start_prod
from tests.support.pipeline import deployment_of

PROD = ("bge-m3", "qwen-vl", "qwen-long")
WAITS_FOR_BGE = "waiting for bge-m3, which loads before qwen-vl on card 0"
# vllm-ascend's refusal (worker.py `_init_device`); its successful start logs "Free memory on device ..." too
# (worker.py l. 546, the stand-in's startup lines), so the needle is the refusal's own words.
TOO_LITTLE_FREE = "is less than desired GPU memory utilization"
STILL_LOADING = "ascend-fleet: start gate: still loading after"
REBOOTS = 5


def card_claims(card: int) -> list[str]:
    """The services holding a claim on `card` (sim/npu-sim/vllm), by claim folder."""
    services = []
    for owner in sorted(CLAIMS_DIR.glob(f"card{card}/port*/owner")):
        try:
            text = owner.read_text()
        except FileNotFoundError:  # released while we read
            continue
        services += [line.split("=", 1)[1] for line in text.splitlines() if line.startswith("service=")]
    return services


def wait_until(sim: SimHost, what: str, found: Callable[[], object], names: Sequence[str], since: str, timeout=120):
    """`found()`'s first true value; fails after `timeout` seconds with the containers' log tails."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        time.sleep(0.2)
    tails = {name: sim.logs(name, since)[-1500:] for name in names}
    raise AssertionError(f"no {what} within {timeout}s: {tails}")


def power_cycle(sim: SimHost) -> None:
    """A reboot up to Docker's restarts, with the containers left for the test to start in its own
    order (dockerd's restore would start them all at once, in no order a test can choose): every
    container killed, the NPU state and the gate's boot stamps of a new boot, the device-share unit
    (ordered before docker.service) run."""
    sim.kill_containers(label=LABEL)
    sim.npu_reboot()
    share = sim.run(DEVICE_SHARE_BOOT, check=False)
    assert share.returncode == 0, share.stdout + share.stderr


def docker_restarted(sim: SimHost) -> None:
    """What the start-order unit (ordered after docker.service) does once Docker has started them."""
    settled = sim.docker_started()
    assert settled is not None and settled.returncode == 0, settled and settled.stdout + settled.stderr
    assert "settled" in settled.stdout


def test_after_each_reboot_card_0_loads_in_deploy_time_order_though_qwen_vl_reaches_its_gate_first(
    sim_host: SimHost, tmp_path, boot_files
):
    start_prod(sim_host, tmp_path)
    for reboot in range(REBOOTS):
        power_cycle(sim_host)
        since = now()
        with stretched_loads("bge-m3", "qwen-vl"):
            sim_host.start_containers(["qwen-vl", "qwen-long"])
            # Without the order, qwen-vl would take card 0 now; with it, it waits for bge-m3.
            seen = wait_until(
                sim_host, "wait for bge-m3 nor claim on card 0",
                lambda: WAITS_FOR_BGE in sim_host.logs("qwen-vl", since) or card_claims(0), ["qwen-vl"], since,
            )  # fmt: skip
            assert seen is True, f"reboot {reboot}: {seen} claimed card 0 before bge-m3 started"
            sim_host.start_containers(["bge-m3"])
            docker_restarted(sim_host)
            first = wait_until(sim_host, "claim on card 0", lambda: card_claims(0), ["bge-m3", "qwen-vl"], since)
            assert first == ["bge-m3"], f"reboot {reboot}: card 0 first claimed by {first}"
        for name in PROD:
            sim_host.wait_healthy(name, timeout=120)
        for name in ("bge-m3", "qwen-vl"):
            log = sim_host.logs(name, since)
            assert NO_MEMORY not in log and TOO_LITTLE_FREE not in log and DCMI_BUSY not in log, (reboot, name, log)


def test_a_neighbour_stopped_by_hand_never_blocks_qwen_vl_after_a_reboot(sim_host: SimHost, tmp_path, boot_files):
    start_prod(sim_host, tmp_path)
    sim_host.docker("stop", "bge-m3")
    since = now()
    boot = sim_host.reboot()
    # Docker's restore starts only what was not stopped by hand (restart: unless-stopped): not bge-m3.
    assert boot.started == ["qwen-long", "qwen-vl"]
    assert boot.start_order is not None and "settled" in boot.start_order.stdout, boot.start_order
    sim_host.wait_healthy("qwen-vl", timeout=120)
    assert "cards 0,1,2,3 locked; vllm serve starts" in sim_host.logs("qwen-vl", since)
    assert sim_host.state("bge-m3")["Running"] is False


def test_the_holder_keeps_the_card_locks_past_the_start_timeout_while_the_model_loads(sim_host: SimHost, tmp_path):
    values = json.loads(prod_on_the_simulated_host(sim_host, tmp_path).read_text())["config"]
    fleet = parse_fleet("prod-on-sim", {k.removeprefix("ascend-fleet:"): v for k, v in values.items()})
    [spec] = [sd.spec for sd in deployment_of(fleet).services() if sd.name == "bge-m3"]
    # A start timeout of 1 s: the load outlasts it for as long as the test keeps it loading.
    spec = probed_often(dataclasses.replace(spec, env={**spec.env, START_WAIT_ENV: "1"}))
    sim_host.make_model(spec.command[spec.command.index("serve") + 1])
    since = now()
    with stretched_loads("bge-m3"):
        sim_host.docker("run", *docker_run_args(spec))
        # Said once per start timeout past it: the second time, the holder has gone on polling.
        wait_until(sim_host, "second 'still loading'", lambda: sim_host.logs("bge-m3", since).count(STILL_LOADING) >= 2,
                   ["bge-m3"], since, timeout=60)  # fmt: skip
        probe = subprocess.run(["flock", "-n", f"{LOCK_DIR_HOST}/card-0", "true"], capture_output=True, text=True)
        assert probe.returncode != 0, f"card 0's lock is free while bge-m3 loads: {sim_host.logs('bge-m3', since)}"
    sim_host.wait_healthy("bge-m3", timeout=60)
    wait_until(sim_host, "release on /health", lambda: "/health answered" in sim_host.logs("bge-m3", since),
               ["bge-m3"], since, timeout=60)  # fmt: skip
