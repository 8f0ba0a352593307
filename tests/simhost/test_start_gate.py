"""The start gate for real: card locks order the loads on a shared card, and nothing else.

Two vLLM instances loading or profiling on one card at the same time fail (vllm issue 55827:
a loading neighbour's memory is counted as the profiling instance's own; the simulator fails
the later one with vLLM's "No available memory for the cache blocks", sim/README.md). Every
container runs the same gate (records.containers.START_GATE): a `flock` per card it uses,
held until its own /health answers. These tests start the prod layout's containers from the
`render --format docker-run` script on the simulated host and then start, stop and race them
as Docker does after a reboot.
"""

from __future__ import annotations

import dataclasses
import json
import time

from allocation.config import parse_fleet
from records.command import START_GATE_NAME
from records.deployment import deploy
from allocation.planner import plan_fleet
from ops.render import docker_run_args
from sim.host import SimHost
from tests.simhost.test_prod_layout import prod_on_the_simulated_host
from tests.simhost.test_shared_cards import DCMI_BUSY, logs, start_rendered

NO_MEMORY = "No available memory for the cache blocks"


def start_prod(sim: SimHost, tmp_path, *, racing: bool = False) -> dict:
    """The prod layout running healthy on the simulated host (card 0 in device-share mode); `racing`:
    its loads and start gates take as long as planned, so neighbours on a card meet."""
    config = prod_on_the_simulated_host(sim, tmp_path, racing=racing)
    start_rendered(sim, config, racing=racing)
    for name in ("bge-m3", "qwen-vl", "qwen-long"):
        sim.wait_healthy(name, timeout=120)
    return json.loads(config.read_text())


def test_two_instances_started_at_once_on_one_card_load_one_after_the_other(sim_host: SimHost, tmp_path, boot_files):
    start_prod(sim_host, tmp_path, racing=True)  # the later one must meet the lock, held 5 s at least
    sim_host.docker("kill", "bge-m3", "qwen-vl")
    sim_host.docker("wait", "bge-m3", "qwen-vl")
    sim_host.sweep_claims()
    sim_host.docker("start", "bge-m3", "qwen-vl")  # one docker call: both at once, as at boot
    for name in ("bge-m3", "qwen-vl"):
        sim_host.wait_healthy(name, timeout=120)
    waited = [n for n in ("bge-m3", "qwen-vl") if "waiting for cards" in logs(sim_host, n)]
    assert len(waited) == 1, {n: logs(sim_host, n)[-600:] for n in ("bge-m3", "qwen-vl")}
    for name in ("bge-m3", "qwen-vl"):
        assert NO_MEMORY not in logs(sim_host, name) and DCMI_BUSY not in logs(sim_host, name)


def test_without_the_gate_the_simulator_fails_the_second_instance_loading_on_the_card(sim_host: SimHost, tmp_path):
    """The contrast that shows the test above can fail: the same two containers, their commands
    without the gate, started at once on card 0 in device-share mode (as the render script leaves
    it); the simulator refuses the later load as vLLM would."""
    values = json.loads(prod_on_the_simulated_host(sim_host, tmp_path, racing=True).read_text())["config"]
    fleet = parse_fleet("prod-on-sim", {k.removeprefix("ascend-fleet:"): v for k, v in values.items()})
    specs = {sd.name: sd.spec for sd in deploy(plan_fleet(fleet)).services()}
    sim_host.set_device_share(0)
    for name in ("bge-m3", "qwen-vl"):
        spec = specs[name]
        assert spec.command[3] == START_GATE_NAME
        bare = dataclasses.replace(spec, command=spec.command[4:])
        sim_host.make_model(bare.command[bare.command.index("serve") + 1])
        sim_host.docker("create", *[a for a in docker_run_args(bare) if a != "-d"])
    sim_host.docker("start", "bge-m3", "qwen-vl")
    failed = wait_for_any_log(sim_host, ("bge-m3", "qwen-vl"), NO_MEMORY)
    assert failed in ("bge-m3", "qwen-vl")


def wait_for_any_log(sim: SimHost, names, text: str, timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name in names:
            if text in logs(sim, name):
                return name
        time.sleep(1)
    raise AssertionError(f"none of {names} logged {text!r}")


def test_a_stopped_neighbour_never_keeps_a_service_from_starting(sim_host: SimHost, tmp_path, boot_files):
    start_prod(sim_host, tmp_path)
    sim_host.docker("stop", "bge-m3")
    since = sim_host.run("date -u +%Y-%m-%dT%H:%M:%SZ").stdout.strip()
    sim_host.docker("restart", "qwen-vl")
    sim_host.wait_healthy("qwen-vl", timeout=120)
    result = sim_host.docker("logs", "--since", since, "qwen-vl")
    restarted = result.stdout + result.stderr
    assert "cards 0,1,2,3 locked; vllm serve starts" in restarted and "waiting for cards" not in restarted
    assert sim_host.state("bge-m3")["Running"] is False
