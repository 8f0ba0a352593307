"""`kvCacheGiB` on the simulated host: two services with fixed KV caches share card 0, plan, render
(`render --format docker-run` and `--format compose`) and start with the planned
`--kv-cache-memory-bytes` and `--gpu-memory-utilization`, in the deploy order and in its reverse.

The stand-in (sim/npu-sim/vllm) checks the fraction as vLLM-Ascend's `_init_device` does, then holds
the fixed cache plus `NPU_SIM_NON_KV_BYTES` (set here to the weights and allowance the plan counts, so
it holds what the plan says), and logs vLLM-Ascend's "reserved ... GiB for KV Cache" line, which
`doctor` reads back and finds equal to the plan.
"""

from __future__ import annotations

import json
from pathlib import Path

from ruamel.yaml import YAML

from allocation.capacity import GIB
from ops.doctor.facts import parse_facts
from ops.doctor.findings import required
from ops.doctor.gather import gather_script
from ops.ssh import run_script
from sim.host import CLAIMS_DIR, SimHost
from tests.simhost.loads import now, stretched_loads, wait_for_any_log
from tests.support.pipeline import deployment_of
from tests.support.sim_stacks import allocation, prod_values_on_the_simulated_host, start_rendered
from tests.support.profiles import SMALL_QWEN3_PROFILE as PROFILE

NON_KV = 12 * GIB  # 8 GiB of weights + the 4 GiB runtimeOverheadGiB: what the plan counts beside the cache
KV = {"alpha": 20, "beta": 12}
# 32 GiB and 24 GiB of the 60.96 GiB card: alpha asks 0.525 (32.00 GiB), beta 0.3938 (24.00 GiB).
FRACTION = {"alpha": "0.525", "beta": "0.3938"}


def kv_values(sim: SimHost) -> dict:
    values = prod_values_on_the_simulated_host(sim)
    [npu_a] = values["hosts"]
    npu_a.pop("replaces", None)
    values["defaults"] |= {"vllmAscendVersion": "0.20.2rc1", "graphMemoryGiB": 0,  # the stand-in captures no graphs
                           "env": {"NPU_SIM_LOAD_SECONDS": "1", "NPU_SIM_NON_KV_BYTES": str(NON_KV)}}  # fmt: skip
    values["services"] = [
        {"name": name, "host": "npu-a", "model": f"/srv/models/{name}", "devices": [0], "maxModelLen": 32768,
         "profile": PROFILE, "kvCacheGiB": kv}
        for name, kv in KV.items()
    ]  # fmt: skip
    return values


def claims(card: int, key: str) -> dict[str, str]:
    """Service -> `key` of its claim on `card` (sim/npu-sim/vllm's owner file)."""
    out = {}
    for owner in CLAIMS_DIR.glob(f"card{card}/port*/owner"):
        fields = dict(line.split("=", 1) for line in owner.read_text().splitlines() if "=" in line)
        out[fields["service"]] = fields[key]
    return out


def claimed_bytes(card: int) -> dict[str, int]:
    return {service: int(value) for service, value in claims(card, "mem_bytes").items()}


def claim_states(card: int) -> dict[str, str]:
    return claims(card, "state")


def kv_line(sim: SimHost, name: str, since: str) -> str:
    [line] = [line for line in sim.logs(name, since).splitlines() if "for KV Cache as specified by" in line]
    return line


def start_in_order(sim: SimHost, order: tuple[str, str]) -> str:
    """Both stopped, then started one after the other, each healthy before the next; the time before."""
    sim.docker("stop", "-t", "10", *order)
    since = now()
    for name in order:
        sim.docker("start", name)
        sim.wait_healthy(name, timeout=120)
    return since


def test_fixed_kv_caches_on_a_shared_card_start_with_the_planned_flag_and_fraction_in_both_orders(sim_host: SimHost, tmp_path: Path, boot_files):
    values = kv_values(sim_host)
    config = tmp_path / "Pulumi.kv-on-sim.yaml"
    config.write_text(json.dumps({"config": {f"ascend-fleet:{k}": v for k, v in values.items()}}))
    plan = json.loads(allocation("plan", "--config", str(config), "--format", "json").stdout)
    for s in plan["hosts"][0]["services"]:
        command = s["container"]["command"]
        flags = (command[command.index("--gpu-memory-utilization") + 1], command[command.index("--kv-cache-memory-bytes") + 1])
        assert flags == (FRACTION[s["name"]], str(KV[s["name"]] * GIB)) and s["kvCacheMemoryBytes"] == KV[s["name"]] * GIB
    assert plan["warnings"] == []
    compose = YAML(typ="safe").load(allocation("render", "--config", str(config), "--format", "compose").stdout)
    for name, kv in KV.items():
        command = compose["services"][name]["command"]
        assert command[command.index("--kv-cache-memory-bytes") + 1] == str(kv * GIB)

    start_rendered(sim_host, config)  # the docker-run script: device-share on card 0, start order, both containers
    for name in KV:
        sim_host.wait_healthy(name, timeout=120)
    # Each holds its cache and what the plan counts beside it, not its fraction of the card.
    assert claimed_bytes(0) == {name: kv * GIB + NON_KV for name, kv in KV.items()}

    since = start_in_order(sim_host, ("alpha", "beta"))  # the deploy order
    assert "Initial free memory 60.96 GiB, reserved 20.00 GiB for KV Cache" in kv_line(sim_host, "alpha", since)
    assert "Initial free memory 28.96 GiB, reserved 12.00 GiB for KV Cache" in kv_line(sim_host, "beta", since)

    since = start_in_order(sim_host, ("beta", "alpha"))  # the reverse: alpha restarted while beta runs
    assert "Initial free memory 60.96 GiB, reserved 12.00 GiB for KV Cache" in kv_line(sim_host, "beta", since)
    assert "Initial free memory 36.96 GiB, reserved 20.00 GiB for KV Cache" in kv_line(sim_host, "alpha", since)
    assert claimed_bytes(0) == {name: kv * GIB + NON_KV for name, kv in KV.items()}

    # doctor reads the line back over SSH, and it is the plan's.
    (hd,) = deployment_of(values, "kv-on-sim").hosts
    gathered = run_script(hd, gather_script(required(hd), kv_logs=list(KV)))
    logged = parse_facts(gathered.stdout).kv_logs
    assert "reserved 20.00 GiB for KV Cache" in logged["alpha"] and "reserved 12.00 GiB for KV Cache" in logged["beta"]
    report = json.loads(allocation("doctor", "--config", str(config), "--format", "json").stdout)
    assert [f for f in report["hosts"][0]["findings"] if f["kind"] == "kv-cache"] == []


def test_the_fraction_alone_is_what_the_stand_in_checks_at_start(sim_host: SimHost):
    """The contrast: beside alpha (32 GiB held), an instance fixing 12 GiB but asking 0.5 (30.48 GiB) is
    refused by the free-memory check, as vLLM-Ascend refuses it before it looks at the fixed bytes."""
    model = sim_host.make_model("alpha")
    env = {"NPU_SIM_NON_KV_BYTES": str(NON_KV)}
    sim_host.set_device_share(0)
    sim_host.start_service("alpha", model=model, cards=[0], port=7007, gpu_memory_utilization=0.525, env=env,
                           extra_args=["--kv-cache-memory-bytes", str(20 * GIB)])  # fmt: skip
    sim_host.wait_healthy("alpha")
    sim_host.start_service("greedy", model=model, cards=[0], port=7008, gpu_memory_utilization=0.5, env=env,
                           extra_args=["--kv-cache-memory-bytes", str(12 * GIB)])  # fmt: skip
    assert sim_host.wait_exit("greedy") == 1
    assert (
        "Free memory on device (28.96/60.96 GiB) on startup is less than desired GPU memory utilization (0.5, 30.48 GiB)"
        in sim_host.logs("greedy")
    )


def test_a_fixed_cache_starting_beside_a_neighbour_still_loading_is_not_emptied_by_its_load(sim_host: SimHost):
    """Without the flag the stand-in's second instance finds "No available memory for the cache blocks" while
    its neighbour loads (vllm-ascend issues 5917, 5707: the profiling counts the neighbour's load as its own);
    with it there is no such profiling (worker.py l. 341), and it serves with its bytes."""
    model = sim_host.make_model("alpha")
    env = {"NPU_SIM_NON_KV_BYTES": str(NON_KV)}
    sim_host.set_device_share(0)
    with stretched_loads("alpha"):
        sim_host.start_service("alpha", model=model, cards=[0], port=7007, gpu_memory_utilization=0.525, env=env,
                               extra_args=["--kv-cache-memory-bytes", str(20 * GIB)])  # fmt: skip
        wait_for_any_log(sim_host, ["alpha"], "Loading model weights")
        sim_host.start_service("beta", model=model, cards=[0], port=7008, gpu_memory_utilization=0.3938,
                               env={**env, "HCCL_NPU_SOCKET_PORT_RANGE": "16670"},
                               extra_args=["--kv-cache-memory-bytes", str(12 * GIB)])  # fmt: skip
        sim_host.wait_healthy("beta")
        assert claim_states(0) == {"alpha": "loading", "beta": "ready"}
    sim_host.wait_healthy("alpha")
    assert "No available memory" not in sim_host.logs("beta")
    assert "reserved 12.00 GiB for KV Cache" in sim_host.logs("beta")
