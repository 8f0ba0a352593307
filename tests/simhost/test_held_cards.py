"""A newcomer pinned onto a running service's card, for real: the card must go into device-share
mode, which it cannot while the running container holds it.

With the host's `heldCards: stopHolders`, the device-share command (the same script `pulumi up` runs
over SSH) stops the holder, switches the card and starts the holder again; then the newcomer
starts. The other services are never touched. With the default `refuse`, the host check stops
first, naming the card and the holder, and nothing changes.
"""

from __future__ import annotations

import json

from allocation.config import parse_fleet
from views.exports.render import docker_run_args
from sim.host import SimHost
from tests.simhost.probes import probed_often
from tests.support.sim_stacks import start_prod
from tests.support.pipeline import deployment_of

NEWCOMER = {"name": "a-embed", "model": "/srv/models/a-embed", "host": "npu-a", "devices": [4], "memoryFraction": 0.05}


def with_newcomer(values: dict, held: str) -> dict:
    values = json.loads(json.dumps(values))
    values["ascend-fleet:hosts"][0]["heldCards"] = held
    values["ascend-fleet:services"].append(NEWCOMER)
    return values


def host_deployment(values: dict):
    fleet = parse_fleet("prod-on-sim", {k.removeprefix("ascend-fleet:"): v for k, v in values.items()})
    [hd] = [h for h in deployment_of(fleet).hosts if h.services]
    return hd


def started_at(sim: SimHost, name: str) -> str:
    return sim.state(name)["StartedAt"]


def test_stop_holders_switches_a_held_card_and_the_holder_comes_back_healthy(sim_host: SimHost, tmp_path, boot_files):
    values = start_prod(sim_host, tmp_path)["config"]
    before = {n: started_at(sim_host, n) for n in ("bge-m3", "qwen-vl", "qwen-long")}
    hd = host_deployment(with_newcomer(values, "stopHolders"))
    assert hd.shared_cards == (0, 4)
    sim_host.make_model(NEWCOMER["model"])

    switched = sim_host.run(hd.device_share_script, check=False, timeout=300)
    assert switched.returncode == 0, switched.stdout + switched.stderr
    assert "card 4: stopping qwen-long" in switched.stdout and "qwen-long started again" in switched.stdout
    assert sim_host.device_shared_cards() == [0, 4]
    spec = next(sd.spec for sd in hd.services if sd.name == "a-embed")
    sim_host.docker("run", *docker_run_args(probed_often(spec)))
    for name in ("qwen-long", "a-embed"):
        sim_host.wait_healthy(name, timeout=180)
    assert started_at(sim_host, "qwen-long") != before["qwen-long"], "stopped and started again"
    assert {n: started_at(sim_host, n) for n in ("bge-m3", "qwen-vl")} == {
        n: before[n] for n in ("bge-m3", "qwen-vl")
    }, "nothing else touched"


def test_by_default_the_host_check_refuses_the_held_card_and_nothing_changes(sim_host: SimHost, tmp_path, boot_files):
    values = start_prod(sim_host, tmp_path)["config"]
    before = {n: started_at(sim_host, n) for n in ("bge-m3", "qwen-vl", "qwen-long")}
    hd = host_deployment(with_newcomer(values, "refuse"))
    sim_host.make_model(NEWCOMER["model"])
    check = sim_host.run(hd.check_script, check=False, timeout=120)
    assert check.returncode == 1
    assert "card 4 must go into device-share mode, but running container(s) qwen-long hold it" in check.stderr
    assert "MB of HBM" not in check.stderr and "npu-smi info -m" not in check.stderr, "the A2 sim is what prod declares"
    assert sim_host.device_shared_cards() == [0]
    assert {n: started_at(sim_host, n) for n in before} == before
