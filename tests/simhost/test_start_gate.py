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

from allocation.config import parse_fleet
from records.command import START_GATE_NAME
from views.exports.render import docker_run_args
from sim.host import SimHost
from tests.support.sim_stacks import prod_on_the_simulated_host
from tests.simhost.loads import now, stretched_loads, wait_for_any_log
from tests.support.sim_stacks import DCMI_BUSY, WAITING
from tests.support.sim_stacks import NO_MEMORY, start_prod
from tests.support.pipeline import deployment_of


def test_two_instances_started_at_once_on_one_card_load_one_after_the_other(sim_host: SimHost, tmp_path, boot_files):
    start_prod(sim_host, tmp_path)
    sim_host.docker("kill", "bge-m3", "qwen-vl")
    sim_host.docker("wait", "bge-m3", "qwen-vl")
    sim_host.sweep_claims()
    since = now()
    # The first to take card 0's lock keeps loading until the other has met the lock.
    with stretched_loads("bge-m3", "qwen-vl"):
        sim_host.docker("start", "bge-m3", "qwen-vl")  # one docker call: both at once, as at boot
        wait_for_any_log(sim_host, ("bge-m3", "qwen-vl"), WAITING, since=since)
    for name in ("bge-m3", "qwen-vl"):
        sim_host.wait_healthy(name, timeout=120)
    waited = [n for n in ("bge-m3", "qwen-vl") if WAITING in sim_host.logs(n, since)]
    assert len(waited) == 1, {n: sim_host.logs(n, since)[-600:] for n in ("bge-m3", "qwen-vl")}
    for name in ("bge-m3", "qwen-vl"):
        assert NO_MEMORY not in sim_host.logs(name, since) and DCMI_BUSY not in sim_host.logs(name, since)


def test_without_the_gate_the_simulator_fails_the_second_instance_loading_on_the_card(sim_host: SimHost, tmp_path):
    """The contrast that shows the test above can fail: the same two containers, their commands
    without the gate, started at once on card 0 in device-share mode (as the render script leaves
    it); the simulator refuses the later load as vLLM would (the first one keeps loading until then)."""
    values = json.loads(prod_on_the_simulated_host(sim_host, tmp_path).read_text())["config"]
    fleet = parse_fleet("prod-on-sim", {k.removeprefix("ascend-fleet:"): v for k, v in values.items()})
    specs = {sd.name: sd.spec for sd in deployment_of(fleet).services()}
    sim_host.set_device_share(0)
    for name in ("bge-m3", "qwen-vl"):
        spec = specs[name]
        assert spec.command[3] == START_GATE_NAME
        # Without the plan's restart policy too: Docker would start the refused one again, and once
        # the other has loaded, it would serve instead of showing how it failed.
        bare = dataclasses.replace(spec, command=spec.command[4:], restart="no")
        sim_host.make_model(bare.command[bare.command.index("serve") + 1])
        sim_host.docker("create", *[a for a in docker_run_args(bare) if a != "-d"])
    with stretched_loads("bge-m3", "qwen-vl"):
        sim_host.docker("start", "bge-m3", "qwen-vl")
        failed = wait_for_any_log(sim_host, ("bge-m3", "qwen-vl"), NO_MEMORY)
    assert sim_host.wait_exit(failed) == 1


def test_a_stopped_neighbour_never_keeps_a_service_from_starting(sim_host: SimHost, tmp_path, boot_files):
    start_prod(sim_host, tmp_path)
    sim_host.docker("stop", "bge-m3")
    since = now()
    sim_host.docker("restart", "qwen-vl")
    sim_host.wait_healthy("qwen-vl", timeout=120)
    restarted = sim_host.logs("qwen-vl", since)
    assert "cards 0,1,2,3 locked; vllm serve starts" in restarted and "waiting for cards" not in restarted
    assert sim_host.state("bge-m3")["Running"] is False
