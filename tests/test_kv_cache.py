"""The KV cache layout vLLM(-Ascend) builds, version by version, and the log lines it prints."""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from allocation.capacity import GIB, RUNTIME_TOTAL_BYTES, Capacity, Shape, capacity
from records.deployment import deploy
from allocation.errors import AllocationError
from allocation.kv_cache import (
    Engine, GatedDeltaNet, Layout, Unsized, dense_block_size, engine_of, hybrid_layout, log_lines, state_pages,
)  # fmt: skip
from allocation.planner import plan_fleet
from views.report import plan_json
from tests.support.stacks import fleet, host, service

TOTAL_64 = RUNTIME_TOTAL_BYTES[64]
DATA = Path(__file__).parent / "data"

# Qwen3-Next-80B-A3B (transformers' Qwen3NextConfig defaults, the published config.json): 48 layers,
# one full-attention layer in 4, 2 KV heads of 256, Gated DeltaNet 16 key / 32 value heads of 128,
# conv kernel 4, bf16 and no mamba_ssm_dtype.
QWEN3_NEXT = GatedDeltaNet(full_layers=12, linear_layers=36, key_heads=16, value_heads=32, key_head_dim=128,
                           value_head_dim=128, conv_kernel=4, ssm_dtype_bytes=2, model_type="qwen3_next")  # fmt: skip
# Qwen3.6-27B (tests/data/qwen3.6-27b/SOURCES.md): 16 full + 48 linear layers, 4 KV heads of 256,
# 16 key / 48 value heads of 128, conv kernel 4, float32 recurrent state.
QWEN36 = GatedDeltaNet(full_layers=16, linear_layers=48, key_heads=16, value_heads=48, key_head_dim=128,
                       value_head_dim=128, conv_kernel=4, ssm_dtype_bytes=4, model_type="qwen3_5_text")  # fmt: skip


def hybrid(gdn: GatedDeltaNet, kv_heads: int, tp: int, engine: Engine, max_model_len: int) -> Layout:
    layout = hybrid_layout(gdn, kv_heads=kv_heads, head_dim=256, dtype_bytes=2, tp=tp, engine=engine, max_model_len=max_model_len)
    assert isinstance(layout, Layout), layout
    return layout


def log(layout: Layout, blocks: int, max_model_len: int, version: tuple[int, int]) -> tuple[str, str]:
    """The two lines as vLLM's `_report_kv_cache_config` formats them."""
    tokens, concurrency = log_lines(layout, blocks, max_model_len, version)
    return f"GPU KV cache size: {tokens:,} tokens", f"Maximum concurrency for {max_model_len:,} tokens per request: {concurrency:.2f}x"


# ---- published logs --------------------------------------------------------------------------


def test_qwen3_next_on_vllm_ascend_0_12_reproduces_its_published_log_to_the_token():
    """vllm-ascend issue 5020 (v0.12.0rc1, Qwen3-Next's tutorial, TP 4 (workers up to Worker_TP2+),
    --max-model-len 4096): "GPU KV cache size: 282,240 tokens" and "Maximum concurrency for 4,096
    tokens per request: 210.07x". The log gives the cache in GiB to two decimals only, coarser than a
    block, so the test hands the arithmetic the bytes of 2941 blocks of the page it computes; the
    lines only come out as published with the <=0.15 alignment (384-token blocks), 4 groups
    (12 full, 36 linear) and 14 blocks a request (11 of attention, one per state group)."""
    layout = hybrid(QWEN3_NEXT, kv_heads=2, tp=4, engine=Engine((0, 12)), max_model_len=4096)
    assert (layout.block_tokens, layout.groups, layout.layers_per_group, layout.blocks_per_request) == (384, 4, 12, 14)
    # state: 8 value heads x 128 x 128 x 2 + (8192 / 4) x 3 x 2 = 274432 <= 384 tokens x 1024 B (K+V, 1 head)
    assert layout.page_bytes == 384 * 1024
    blocks = layout.blocks(2941 * layout.page_bytes * layout.layers_per_group + layout.page_bytes)
    assert blocks == 2941
    assert log(layout, blocks, 4096, (0, 12)) == (
        "GPU KV cache size: 282,240 tokens", "Maximum concurrency for 4,096 tokens per request: 210.07x")


def test_qwen3_next_on_vllm_ascend_0_13_reproduces_its_published_log_from_the_smallest_ranks_bytes():
    """vllm-ascend issue 6250 (v0.13.0rc2 = vLLM 0.13.0, 800I A2, `vllm serve Qwen3-Next-80B-A3B-Instruct
    --tensor-parallel-size 4 --max-model-len 32768 --gpu-memory-utilization 0.8 --max-num-batched-tokens
    4096`; its config line shows enable_prefix_caching=False, enable_chunked_prefill=True):
      [worker.py:302] Available memory: 9786143744 (Worker_TP0), 10023158784 (TP1), 10022433792 (TP3),
      10023117824 (TP2), total memory: 65452113920
      [kv_cache_utils.py:1291] GPU KV cache size: 198,912 tokens
      [kv_cache_utils.py:1296] Maximum concurrency for 32,768 tokens per request: 23.29x
    At v0.13.0rc2 that number is exactly what `determine_available_memory` returns (worker.py l. 298-305),
    so nothing is derived: vLLM 0.13.0 gives every rank the blocks of the smallest one
    (`get_kv_cache_configs` l. 1385), TP0's 2073. The other ranks' 2124 blocks would print 203,904
    tokens and 23.87x. Same <=0.15 alignment as issue 5020 (patch_mamba_config.py identical at v0.12.0rc1
    and v0.13.0rc2): 384-token blocks; a request takes ceil(32768 / 384) = 86 blocks + 1 per state group."""
    layout = hybrid(QWEN3_NEXT, kv_heads=2, tp=4, engine=Engine((0, 13), prefix_caching=False), max_model_len=32768)
    assert (layout.block_tokens, layout.groups, layout.blocks_per_request) == (384, 4, 89)
    per_rank = {"TP0": 9786143744, "TP1": 10023158784, "TP2": 10023117824, "TP3": 10022433792}
    blocks = min(layout.blocks(available) for available in per_rank.values())
    assert blocks == layout.blocks(per_rank["TP0"]) == 2073
    assert log(layout, blocks, 32768, (0, 13)) == (
        "GPU KV cache size: 198,912 tokens", "Maximum concurrency for 32,768 tokens per request: 23.29x")


def test_from_0_16_the_attention_block_lands_on_the_recurrent_page_and_the_page_adds_the_conv_state():
    """vllm-ascend issue 7393 (Qwen3.5 on 0.16+'s patch_mamba_config.py) publishes the numbers of a
    TP 8 rank: ssm page 262144, conv page 12288, K page of one token 512 -> attention block 512 and
    an attention page (K+V) of 524288, the state page padded to 524288 + 12288. A shape with those
    state pages: 64 value heads / 8 x 128 x 128 x 2 B, (128 x 32 x 2 + 128 x 64) / 8 x 3 x 2 B."""
    shape = GatedDeltaNet(full_layers=10, linear_layers=30, key_heads=32, value_heads=64, key_head_dim=128,
                          value_head_dim=128, conv_kernel=4, ssm_dtype_bytes=2)  # fmt: skip
    layout = hybrid(shape, kv_heads=2, tp=8, engine=Engine((0, 18), prefix_caching=False), max_model_len=32768)
    assert layout.block_tokens == 512 and layout.page_bytes == 524288 + 12288


def test_qwen36_27b_at_tp4_on_0_20_has_1536_token_blocks_four_groups_and_the_padded_page():
    layout = hybrid(QWEN36, kv_heads=4, tp=4, engine=Engine((0, 20), prefix_caching=False), max_model_len=100_000)
    recurrent, conv = 12 * 128 * 128 * 4, (128 * 16 * 2 + 128 * 48) // 4 * 3 * 2
    assert layout.block_tokens == 1536 == recurrent // 512
    assert layout.page_bytes == 1536 * 2 * 512 + conv == 1588224
    assert (layout.groups, layout.layers_per_group) == (4, 16)
    assert layout.blocks_per_request == -(-100_000 // 1536) + 3  # one block per state group, no prefix caching


def test_groups_take_the_larger_layer_count_only_when_it_is_under_1_5_times_the_smaller_from_0_18():
    """vllm@0.18.0 `_get_kv_cache_groups_uniform_page_size`: 12 full + 17 linear layers make one group of
    each, 17 layers apiece (17 < 18); vllm@0.17.0's factor 1.25 makes groups of 12: one full, two linear."""
    odd = replace(QWEN3_NEXT, full_layers=12, linear_layers=17)
    new = hybrid(odd, kv_heads=2, tp=4, engine=Engine((0, 18), prefix_caching=False), max_model_len=4096)
    old = hybrid(odd, kv_heads=2, tp=4, engine=Engine((0, 17), prefix_caching=False), max_model_len=4096)
    assert (new.groups, new.layers_per_group) == (2, 17) and (old.groups, old.layers_per_group) == (3, 12)
    big = hybrid(QWEN3_NEXT, kv_heads=2, tp=4, engine=Engine((0, 18), prefix_caching=False), max_model_len=4096)
    assert (big.groups, big.layers_per_group) == (4, 12)


def test_the_0_20_log_counts_what_requests_use_and_the_older_one_blocks_per_group():
    """vllm issue 40691 / PR 40694: vLLM 0.20 prints int(concurrency x L); 0.19 printed
    blocks // groups x the smallest block size (maxModelLen for the state groups)."""
    layout = hybrid(QWEN36, kv_heads=4, tp=4, engine=Engine((0, 20), prefix_caching=False), max_model_len=100_000)
    assert log(layout, 1602, 100_000, (0, 20)) == (
        "GPU KV cache size: 2,321,739 tokens", "Maximum concurrency for 100,000 tokens per request: 23.22x")
    assert log(layout, 1602, 100_000, (0, 19))[0] == f"GPU KV cache size: {1602 // 4 * 1536:,} tokens"
    short = hybrid(QWEN36, kv_heads=4, tp=4, engine=Engine((0, 19), prefix_caching=False), max_model_len=1000)
    assert log(short, 1602, 1000, (0, 19))[0] == f"GPU KV cache size: {1602 // 4 * 1000:,} tokens", "state groups' block is L"


# ---- the version rules ----------------------------------------------------------------------


@pytest.mark.parametrize("version, args, block", [
    ((0, 20), [], 128),
    ((0, 20), ["--no-enable-prefix-caching"], 128),
    ((0, 20), ["--no-enable-chunked-prefill"], 128),  # prefix caching stays on by default for these models
    ((0, 20), ["--no-enable-prefix-caching", "--no-enable-chunked-prefill"], 16),
    ((0, 20), ["--no-enable-prefix-caching", "--no-enable-chunked-prefill", "--block-size", "64"], 64),
    ((0, 20), ["--block-size=64"], 128),
    ((0, 17), ["--no-enable-prefix-caching", "--no-enable-chunked-prefill"], 128),
    ((0, 20), ["--no-enable-prefix-caching", "--enable-prefix-caching", "--no-enable-chunked-prefill"], 128),
])  # fmt: skip
def test_the_block_size_is_128_with_prefix_caching_or_chunked_prefill_else_vllms_default(version, args, block):
    engine = engine_of(args, version)
    assert isinstance(engine, Engine) and dense_block_size(engine) == block


def test_a_dense_model_on_0_20_logs_blocks_over_blocks_per_request_and_on_0_19_blocks_times_block():
    shape = Shape(weight_bytes=0, layers=36, kv_dtype_bytes=2, kv_heads=8, head_dim=128)
    per_block = 128 * shape.token_bytes(tp=1)
    new, old = (capacity(shape, tp=1, fraction=Decimal(1), total_bytes=1000 * per_block, overhead_bytes=0,
                         max_model_len=10_000, max_num_seqs=None, engine=Engine(v)) for v in ((0, 20), (0, 19)))  # fmt: skip
    assert isinstance(new, Capacity) and isinstance(old, Capacity)
    assert new.kv_blocks == old.kv_blocks == 1000 and new.blocks_per_request == 79
    assert old.kv_tokens == 128_000 and new.kv_tokens == int(1000 / 79 * 10_000) == 126_582


def test_prefix_caching_puts_hybrids_in_align_mode_with_two_state_blocks_and_speculative_tokens_add_more():
    plain = hybrid(QWEN36, kv_heads=4, tp=4, engine=Engine((0, 20), prefix_caching=False), max_model_len=32768)
    align = hybrid(QWEN36, kv_heads=4, tp=4, engine=Engine((0, 20), prefix_caching=True), max_model_len=32768)
    spec = hybrid(QWEN36, kv_heads=4, tp=4, engine=Engine((0, 20), prefix_caching=False, speculative_tokens=2), max_model_len=32768)
    assert align.blocks_per_request - plain.blocks_per_request == 3  # 2 instead of 1 per state group
    assert spec.blocks_per_request - plain.blocks_per_request == 6  # 2 more per state group
    assert spec.page_bytes - plain.page_bytes == 2560 * 2 * 2  # the conv state keeps 2 more positions


def test_speculative_tokens_come_from_the_speculative_config_in_args():
    engine = engine_of(["--speculative-config", json.dumps({"method": "qwen3_5_mtp", "num_speculative_tokens": 3})], None)
    assert isinstance(engine, Engine) and engine.speculative_tokens == 3 and engine.version == (0, 20)
    assert "is not a JSON object" in str(engine_of(["--speculative-config", "{nope"], None))
    assert "is not a block size" in str(engine_of(["--block-size", "big"], None))


def test_before_0_18_a_non_qwen3_next_hybrid_falls_back_to_128_token_blocks_on_the_same_page():
    qwen35 = hybrid(QWEN36, kv_heads=4, tp=4, engine=Engine((0, 17)), max_model_len=32768)
    newer = hybrid(QWEN36, kv_heads=4, tp=4, engine=Engine((0, 18)), max_model_len=32768)
    assert qwen35.block_tokens == 128 and qwen35.page_bytes == newer.page_bytes and newer.block_tokens == 1536
    unknown = hybrid_layout(replace(QWEN36, model_type=None), kv_heads=4, head_dim=256, dtype_bytes=2, tp=4,
                            engine=Engine((0, 17)), max_model_len=32768)  # fmt: skip
    assert isinstance(unknown, Unsized) and "modelType" in unknown.why


def test_a_layout_vllm_ascend_cannot_build_is_refused_with_its_reason():
    odd = GatedDeltaNet(full_layers=4, linear_layers=12, key_heads=16, value_heads=48, key_head_dim=128,
                        value_head_dim=128, conv_kernel=4, ssm_dtype_bytes=4)  # fmt: skip
    assert "do not divide by tensorParallelSize 32" in str(
        hybrid_layout(odd, kv_heads=4, head_dim=256, dtype_bytes=2, tp=32, engine=Engine(), max_model_len=1024))
    assert "Cannot align" in str(
        hybrid_layout(odd, kv_heads=4, head_dim=80, dtype_bytes=2, tp=1, engine=Engine(), max_model_len=1024))


# ---- properties ------------------------------------------------------------------------------

gdns = st.builds(
    GatedDeltaNet,
    full_layers=st.integers(1, 24), linear_layers=st.integers(1, 72), key_heads=st.sampled_from([8, 16, 32]),
    value_heads=st.sampled_from([16, 32, 48, 64]), key_head_dim=st.sampled_from([64, 128]),
    value_head_dim=st.sampled_from([64, 128]), conv_kernel=st.integers(2, 6), ssm_dtype_bytes=st.sampled_from([2, 4]),
    model_type=st.sampled_from(["qwen3_next", "qwen3_5_text"]),
)  # fmt: skip
engines = st.builds(
    Engine, version=st.sampled_from([(0, 12), (0, 15), (0, 16), (0, 17), (0, 18), (0, 19), (0, 20)]),
    prefix_caching=st.booleans(), chunked_prefill=st.booleans(), speculative_tokens=st.integers(0, 4),
)  # fmt: skip


def layouts(gdn, kv_heads, tp, engine, max_model_len):
    layout = hybrid_layout(gdn, kv_heads=kv_heads, head_dim=256, dtype_bytes=2, tp=tp, engine=engine, max_model_len=max_model_len)
    note(f"{gdn} {engine} -> {layout}")
    return layout


@given(gdn=gdns, kv_heads=st.sampled_from([1, 2, 4, 8]), tp=st.sampled_from([1, 2, 4, 8]), engine=engines,
       max_model_len=st.integers(1, 300_000))  # fmt: skip
def test_the_hybrid_page_is_the_attention_page_padded_to_hold_the_state(gdn, kv_heads, tp, engine, max_model_len):
    layout = layouts(gdn, kv_heads, tp, engine, max_model_len)
    if not isinstance(layout, Layout):
        return
    conv, recurrent = state_pages(gdn, tp, 2, engine.speculative_tokens)
    k_token = max(1, kv_heads // tp) * 256 * 2
    if engine.version <= (0, 15):
        assert layout.page_bytes == layout.block_tokens * 2 * k_token >= conv + recurrent
    else:
        aligned = recurrent // k_token
        assert layout.page_bytes == aligned * 2 * k_token + conv >= conv + recurrent


@given(gdn=gdns, kv_heads=st.sampled_from([1, 2, 4]), engine=engines, max_model_len=st.integers(1, 300_000),
       kv_bytes=st.integers(0, 60 * GIB))  # fmt: skip
def test_concurrency_times_blocks_per_request_never_exceeds_the_blocks(gdn, kv_heads, engine, max_model_len, kv_bytes):
    layout = layouts(gdn, kv_heads, 4, engine, max_model_len)
    if not isinstance(layout, Layout):
        return
    blocks = layout.blocks(kv_bytes)
    assert int(blocks / layout.blocks_per_request) * layout.blocks_per_request <= blocks
    assert blocks * layout.page_bytes * layout.layers_per_group <= kv_bytes


@given(gdn=gdns, engine=engines, fraction=st.integers(1, 99), more=st.integers(1, 50),
       max_model_len=st.integers(1, 300_000))  # fmt: skip
def test_more_fraction_never_gives_fewer_blocks_to_a_hybrid(gdn, engine, fraction, more, max_model_len):
    shape = Shape(weight_bytes=20 * GIB, layers=gdn.full_layers, kv_dtype_bytes=2, kv_heads=4, head_dim=256, linear=gdn)

    def blocks(f: int) -> int:
        cap = capacity(shape, tp=4, fraction=Decimal(f) / 100, total_bytes=TOTAL_64, overhead_bytes=4 * GIB,
                       max_model_len=max_model_len, max_num_seqs=None, engine=engine)  # fmt: skip
        return cap.kv_blocks if isinstance(cap, Capacity) else -1

    assert blocks(min(fraction + more, 100)) >= blocks(fraction)


# ---- the planner ----------------------------------------------------------------------------


def qwen36_profile() -> dict:
    from ops.models import Folder, read_profile

    config = (DATA / "qwen3.6-27b" / "config.json").read_text()
    return read_profile(Folder("qwen3.6-27b", config, json.dumps({"metadata": {"total_size": 30 * 10**9}})))


def test_profile_of_the_published_qwen36_config_writes_a_hybrid_profile_the_plan_sizes():
    profile = qwen36_profile()
    assert profile == {
        "weightBytes": 30 * 10**9, "numHiddenLayers": 64, "attention": "hybrid", "modelType": "qwen3_5_text",
        "numFullAttentionLayers": 16, "numKeyValueHeads": 4, "headDim": 256, "linearNumKeyHeads": 16,
        "linearNumValueHeads": 48, "linearKeyHeadDim": 128, "linearValueHeadDim": 128, "linearConvKernelDim": 4,
        "mambaSsmDtype": "float32",
    }  # fmt: skip
    svc = service("qwen-long", 4, 0.9, profile=profile, maxModelLen=100_000, maxNumSeqs=2,
                  args=["--no-enable-prefix-caching"])  # fmt: skip
    plan = plan_fleet(fleet([host("npu-a")], [svc]))
    cap = plan_json(deploy(plan))["hosts"][0]["services"][0]["capacity"]
    assert cap["blockSizeTokens"] == 1536 and cap["fits"] and plan.warnings == ()
    assert cap["bytesPerRequest"] == 16 * 1588224 * 69
    assert cap["maxConcurrency"] == round(cap["kvCacheBlocks"] / 69, 2)


def test_auto_sizes_a_hybrid_to_hold_its_requests():
    svc = {**service("qwen", 4, 0.5, profile=qwen36_profile(), maxModelLen=100_000, maxNumSeqs=4), "memoryFraction": "auto"}
    ps = plan_fleet(fleet([host("npu-a")], [svc])).hosts[0].services[0]
    assert ps.instance.auto_fraction and ps.capacity.kv_blocks >= 4 * ps.capacity.blocks_per_request


def test_a_request_needing_more_blocks_than_the_cache_holds_is_refused():
    svc = service("qwen", 4, 0.3, profile=qwen36_profile(), maxModelLen=1_000_000, args=["--no-enable-prefix-caching"])
    with pytest.raises(AllocationError, match=r"fewer than the 655 one request of maxModelLen 1000000 needs"):
        plan_fleet(fleet([host("npu-a")], [svc]))


def test_a_hybrid_caches_no_prefixes_unless_its_args_ask_as_vllm_defaults_it_off():
    """vLLM turns prefix caching on by default only where `ModelConfig.is_prefix_caching_supported`, which
    is False for hybrid generative models (vllm@0.13.0 `config/model.py` l. 1754, vllm@0.20.2 l. 1787;
    `EngineArgs._set_default_chunked_prefill_and_prefix_caching_args`): issue 6250's Qwen3-Next, started
    without the flag, logs enable_prefix_caching=False (vllm-ascend issue 10313 says the same of Qwen3.5).
    So no align mode, one block per state group, unless `--enable-prefix-caching` is given."""

    def blocks_per_request(args: list[str]) -> int:
        svc = service("qwen", 4, 0.9, profile=qwen36_profile(), maxModelLen=100_000, args=args)
        return plan_fleet(fleet([host("npu-a")], [svc])).hosts[0].services[0].capacity.blocks_per_request

    unset, off, on = blocks_per_request([]), blocks_per_request(["--no-enable-prefix-caching"]), blocks_per_request(["--enable-prefix-caching"])  # fmt: skip
    assert unset == off == -(-100_000 // 1536) + 3 and on == off + 3
