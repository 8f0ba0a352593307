"""`profile` reads the prod models on the simulated host over real SSH, one round trip per host."""

from __future__ import annotations

import json
from pathlib import Path

from ruamel.yaml import YAML

from sim.host import SimHost
from tests.support.sim_stacks import prod_on_the_simulated_host
from tests.support.sim_stacks import allocation
from tests.support.profiles import safetensors

# bge-m3's config.json (an XLM-RoBERTa encoder); Qwen3.6-27B's config as published (Gated DeltaNet
# layers with full attention every fourth layer: tests/data/qwen3.6-27b/SOURCES.md).
BGE_M3 = {"architectures": ["XLMRobertaModel"], "model_type": "xlm-roberta", "num_hidden_layers": 24,
          "num_attention_heads": 16, "hidden_size": 1024}  # fmt: skip
QWEN36 = json.loads((Path(__file__).resolve().parent.parent / "data" / "qwen3.6-27b" / "config.json").read_text())


def test_profile_reads_the_models_on_their_host_over_ssh_and_writes_the_stack_file(sim_host: SimHost, tmp_path):
    config = prod_on_the_simulated_host(sim_host, tmp_path)
    bge = sim_host.make_model("/disk2/bge-m3", BGE_M3)
    bge_bytes = safetensors(bge / "model.safetensors", {"embeddings": ("F32", [1000, 64]), "layer": ("F32", [64, 64])})
    qwen = sim_host.make_model("/disk2/Qwen3.6-27B-w8a8", QWEN36)
    (qwen / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 29_000_000_000}}))

    result = allocation("profile", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert "profiled" in result.stdout and "bge-m3" in result.stdout
    services = YAML(typ="safe").load(config.read_text())["config"]["ascend-fleet:services"]
    profiles = {s["name"]: s["profile"] for s in services}
    assert profiles["bge-m3"] == {"weightBytes": bge_bytes, "numHiddenLayers": 24, "attention": "encoder"}
    assert profiles["qwen-vl"] == profiles["qwen-long"] == {
        "weightBytes": 29_000_000_000, "numHiddenLayers": 64, "attention": "hybrid", "modelType": "qwen3_5_text",
        "numFullAttentionLayers": 16, "numKeyValueHeads": 4, "headDim": 256, "linearNumKeyHeads": 16,
        "linearNumValueHeads": 48, "linearKeyHeadDim": 128, "linearValueHeadDim": 128, "linearConvKernelDim": 4,
        "mambaSsmDtype": "float32",
    }  # fmt: skip
    plan = allocation("plan", "--config", str(config), "--format", "json")
    assert plan.returncode == 0, plan.stderr
    services = {s["name"]: s for s in json.loads(plan.stdout)["hosts"][0]["services"]}
    assert services["bge-m3"]["capacity"]["fits"] is True
    assert services["qwen-vl"]["capacity"]["blockSizeTokens"] == 1536 and services["qwen-vl"]["capacity"]["fits"]
    notes = json.loads(plan.stdout)["notes"]  # an unverified profile is a note (no longer on stderr)
    assert not [n for n in notes if "unverified" in n], "profiling the real folder replaces the unverified profile"
