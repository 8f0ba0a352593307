"""The NPU graph pool estimated from a profile where no startup log measured it
(`allocation/graph_estimate.py`): the published measurements it is scaled from come back as published,
and the estimate follows the layers and the batch sizes `maxNumSeqs` (or `--compilation-config`) implies."""

from __future__ import annotations

from decimal import Decimal

import pytest

from allocation.config import ModelProfile
from allocation.graph_estimate import DEEPSEEK_V2_LITE, QWEN3_0_6B, capture_sizes, estimate, graph_pool, sizes_kept
from allocation.instance import instances
from allocation.vllm_args import read_args
from cli.stackfile import load_fleet
from tests.support.stacks import fleet, host, service

GIB = 1 << 30

# Each model's profile as `profile` writes it from its config.json: Qwen3-0.6B (28 layers, 8 KV heads
# of 128), DeepSeek-V2-Lite (27 layers, MLA 512 + 64), BAAI/bge-m3 (XLM-RoBERTa, 24 layers),
# Qwen3.6-27B (64 layers; Pulumi.prod.yaml), Qwen2.5-72B-Instruct (80 layers, 8 KV heads of 128).
QWEN3_0_6B_PROFILE = ModelProfile(weightBytes=1, numHiddenLayers=28, numKeyValueHeads=8, headDim=128)
DEEPSEEK_V2_LITE_PROFILE = ModelProfile(weightBytes=1, numHiddenLayers=27, attention="mla", kvLoraRank=512, qkRopeHeadDim=64)
BGE_M3 = ModelProfile(weightBytes=1, numHiddenLayers=24, attention="encoder")
QWEN3_6_27B = ModelProfile(weightBytes=1, numHiddenLayers=64, numKeyValueHeads=4, headDim=256)
QWEN2_5_72B = ModelProfile(weightBytes=1, numHiddenLayers=80, numKeyValueHeads=8, headDim=128)


@pytest.mark.parametrize(
    ("what", "profile", "tp", "max_num_seqs", "gib"),
    [
        # vLLM-Ascend's test_aclgraph_mem.py, at its runner's defaults (one card, max_num_seqs 256): as published.
        ("Qwen3-0.6B, published ~0.20", QWEN3_0_6B_PROFILE, 1, None, "0.20"),
        ("DeepSeek-V2-Lite-W8A8, published ~0.68", DEEPSEEK_V2_LITE_PROFILE, 1, None, "0.68"),
        # prod: bge-m3 (no maxNumSeqs: 256, 35 sizes), qwen-vl (maxNumSeqs 10: 4 sizes), qwen-long (2: 2 sizes).
        ("bge-m3", BGE_M3, 1, None, "0.17"),
        ("Qwen3.6-27B TP 4, maxNumSeqs 10", QWEN3_6_27B, 4, 10, "0.05"),
        ("Qwen3.6-27B TP 4, maxNumSeqs 2", QWEN3_6_27B, 4, 2, "0.03"),
        ("Qwen3.6-27B TP 4, maxNumSeqs 256: 9 of 35 sizes kept", QWEN3_6_27B, 4, 256, "0.12"),
        # staging's qwen-72b: 7 of 35 sizes under the 1800 graphs at TP 8, 22 on one card.
        ("Qwen2.5-72B TP 8", QWEN2_5_72B, 8, None, "0.11"),
        ("Qwen2.5-72B TP 1", QWEN2_5_72B, 1, None, "0.35"),
    ],
)  # fmt: skip
def test_the_estimate_of_each_model_by_its_layers_and_batch_sizes(what, profile, tp, max_num_seqs, gib):
    assert f"{estimate(profile, tp=tp, max_num_seqs=max_num_seqs) / GIB:.2f}" == gib, what


def test_each_measurement_is_of_35_batch_sizes_and_the_graphs_of_every_layer():
    assert (QWEN3_0_6B.graphs, DEEPSEEK_V2_LITE.graphs) == (29 * 35, 28 * 35)
    assert (QWEN3_0_6B.gib, DEEPSEEK_V2_LITE.gib) == (Decimal("0.20"), Decimal("0.68"))


def test_the_batch_sizes_follow_max_num_seqs_up_to_512():
    assert capture_sizes(None) == (1, 2, 4, *range(8, 256, 8), 256)  # the default 256 sequences
    assert capture_sizes(10) == (1, 2, 4, 8)
    assert capture_sizes(2) == (1, 2)
    assert capture_sizes(1000) == (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))
    # speculative decoding: (1 + tokens) a sequence
    assert capture_sizes(10, read_args(["--speculative-config", '{"num_speculative_tokens": 2}'])) == (1, 2, 4, 8, 16, 24)


def test_batch_sizes_given_in_args_replace_the_default():
    assert capture_sizes(256, read_args(["--compilation-config", '{"cudagraph_capture_sizes": [8, 4, 4]}'])) == (4, 8)
    assert capture_sizes(256, read_args(["--cudagraph-capture-sizes", "1", "16"])) == (1, 16)
    assert capture_sizes(2, read_args(["--compilation-config.max_cudagraph_capture_size", "24"])) == (1, 2, 4, 8, 16, 24)
    assert capture_sizes(256, read_args(["--max-cudagraph-capture-size", "4"])) == (1, 2, 4)


def test_the_acl_runtimes_1800_graphs_bound_the_sizes_kept():
    assert sizes_kept(35, 28, tp=1) == 35  # 1800 // 29 = 62
    assert sizes_kept(35, 80, tp=1) == 22  # 1800 // 81
    assert sizes_kept(35, 80, tp=8) == 7  # (1800 - 40) // 81 // 3
    assert sizes_kept(35, 80, tp=8, aiv=True) == 11  # 1800 // 81 // 2, HCCL_OP_EXPANSION_MODE=AIV
    assert sizes_kept(35, 5000, tp=1) == 1


def _pool(**extra):
    """The graph pool of a Qwen2.5-72B service at TP 8, with `extra` settings."""
    profile = {"weightBytes": 1, "numHiddenLayers": 80, "numKeyValueHeads": 8, "headDim": 128}
    f = fleet([host()], [service("s", 8, 0.5, **{"profile": profile, **extra})])
    [i] = instances(f.services[0], f.defaults)
    return graph_pool(i)


def test_a_measured_figure_wins_over_the_estimate_and_enforce_eager_takes_none():
    assert (_pool().source, round(_pool().bytes / GIB, 2)) == ("estimate", 0.11)
    assert _pool(env={"HCCL_OP_EXPANSION_MODE": "AIV"}).bytes > _pool().bytes
    assert (_pool(graphMemoryGiB=1.5).source, _pool(graphMemoryGiB=1.5).bytes) == ("graphMemoryGiB", 3 * GIB // 2)
    assert (_pool(args=["--enforce-eager"]).source, _pool(args=["--enforce-eager"]).bytes) == ("--enforce-eager", 0)
    assert _pool(profile=None) is None


def test_prods_services_are_estimated_from_their_committed_profiles():
    prod = load_fleet("prod")[0]
    pools = {i.name: graph_pool(i) for s in prod.services for i in instances(s, prod.defaults)}
    assert {name: (p.source, f"{p.bytes / GIB:.2f}") for name, p in pools.items()} == {
        "bge-m3": ("estimate", "0.17"), "qwen-vl": ("estimate", "0.05"), "qwen-long": ("estimate", "0.03"),
    }
