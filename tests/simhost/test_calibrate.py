"""`calibrate` on the simulated host, over real SSH and real `docker logs`: the compose containers
prod replaces, taken over and kept stopped with their logs, give each planned service the figures
its stand-in logged as vllm-ascend v0.20.2rc1 does; a kept vLLM container whose log holds a forged
or cut startup line is refused in one paragraph, and the stack file is byte-identical."""

from __future__ import annotations

import re
import shlex

import yaml

from sim.host import SimHost
from tests.support.sim_stacks import allocation, prod_on_the_simulated_host
from tests.support.takeover import COMPOSE_IMAGE, OLD, start_the_compose_deployment

BGE, QWEN = "/disk2/bge-m3", "/disk2/Qwen3.6-27B-w8a8"
# What sim/npu-sim/vllm logs per card at each fraction of 65452113920 bytes: weights 1 GiB,
# 0.5 GiB of peak activation and 0.25 GiB of non-torch memory, 0.2 GiB of graphs, the rest KV.
FIGURES = {"weightsGiB": 1.0, "overheadGiB": 0.75, "graphMemoryGiB": 0.2}
EXPECTED = {
    "bge-m3": ("model-emb-vl", 1, 0.1, 4.35),
    "qwen-vl": ("model-emb-vl", 4, 0.85, 50.06),
    "qwen-long": ("model-text", 4, 0.9, 53.11),
}
SUMMARY = (
    "(EngineCore pid=7) INFO 12-05 10:11:12 [worker.py:546] Free memory on device (60.96/60.96 GiB) on startup. "
    "Desired GPU memory utilization is (0.1, 6.1 GiB). Actual usage: 1.0 GiB for weights, 0.5 GiB for peak activation, "
    "0.25 GiB for non-torch memory, 0.2 GiB for NPU graph memory. Replace gpu_memory_utilization with "
    "`--kv-cache-memory=4508876954` (4.2 GiB) to fit into requested memory, or `--kv-cache-memory=63296"
)  # a line cut where the process died


def kept_vllm_container(sim: SimHost, name: str, printed: str) -> None:
    """A stopped container of the vLLM image that serves bge-m3, whose log holds `printed`, a few seconds
    after its start as vLLM's startup lines come: dockerd stamps `State.StartedAt` once the task has
    started (moby v20.10.24 `daemon/start.go` `containerStart`, then `SetRunning`), so a line printed at
    once can carry an earlier time than the start, and `calibrate` reads the log since that start."""
    script = f"sleep 3; printf '%s' {shlex.quote(printed)}; exec vllm serve {BGE} --served-model-name bge-m3 --port 7107"
    labels = [f"--label={k}={v}" for k, v in sim.labels().items()]
    sim.local_docker("run", "-d", "--name", name, *labels, "-v", f"{BGE}:{BGE}:ro", COMPOSE_IMAGE, "sh", "-c", script)
    sim.wait_exit(name, timeout=120)


def test_the_kept_compose_containers_calibrate_prod_and_a_forged_or_cut_line_writes_nothing(sim_host: SimHost, tmp_path):
    config = prod_on_the_simulated_host(sim_host, tmp_path)
    sim_host.make_model(BGE)
    sim_host.make_model(QWEN)
    start_the_compose_deployment(sim_host, BGE, QWEN)
    for name in OLD:  # what the takeover does: disabled for good, stopped, kept with their logs
        sim_host.local_docker("update", "--restart=no", name)
        sim_host.local_docker("stop", name)

    result = allocation("calibrate", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"calibrated {config}: bge-m3, qwen-vl, qwen-long\n"), result.stdout
    services = {s["name"]: s for s in yaml.safe_load(config.read_text())["config"]["ascend-fleet:services"]}
    for name, (container, tp, fraction, kv) in EXPECTED.items():
        measured = services[name]["measured"]
        keys = (*FIGURES, "container", "host", "tensorParallelSize", "memoryFraction", "kvCacheGiB")
        assert {k: measured[k] for k in keys} == {
            **FIGURES, "container": container, "host": "npu-a", "tensorParallelSize": tp, "memoryFraction": fraction,
            "kvCacheGiB": kv,
        }, name  # fmt: skip
        assert re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z", measured["date"])
        assert "[worker.py:546] Free memory on device" in measured["line"]
        assert "0.2 GiB for NPU graph memory." in measured["line"] and services[name]["graphMemoryGiB"] == 0.2
    assert services["bge-m3"]["measured"]["kvCacheTokens"] == 40685, "its engine core loaded it: the line is its own"
    assert services["qwen-long"]["measured"]["kvCacheTokens"] == 497243, "the one server of model-text"
    assert "kvCacheTokens" not in services["qwen-vl"]["measured"], "its engine core names no model beside bge-m3"
    plan = allocation("plan", "--config", str(config))
    assert plan.returncode == 0 and "1.00 GiB measured" in plan.stdout and "0.20 GiB measured" in plan.stdout, plan.stdout

    calibrated = config.read_bytes()
    for name, printed in {
        "model-forged": "(EngineCore pid=7) INFO 12-05 10:11:12 [model_runner_v1.py:3421] Loading model weights took 1e999 GB\n",
        "model-cut": SUMMARY,
    }.items():
        kept_vllm_container(sim_host, name, printed)
        refused = allocation("calibrate", "--config", str(config))
        assert refused.returncode == 1 and refused.stdout == ""
        lead = f"error: stack prod-on-sim: cannot calibrate: host npu-a: container {name}: startup line 1 "
        assert refused.stderr.startswith(lead), refused.stderr
        assert "not read as a measurement" in refused.stderr and "nothing was written" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
        assert config.read_bytes() == calibrated
        sim_host.local_docker("rm", "-f", name)
