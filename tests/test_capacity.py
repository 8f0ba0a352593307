"""Capacity: the KV cache vLLM will find for a model on its cards, and the plan's verdict on it."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from allocation.capacity import GIB, RUNTIME_TOTAL_BYTES, Capacity, Shape, capacity
from allocation.kv_cache import Engine
from records.deployment import deploy
from allocation.errors import AllocationError
from allocation.planner import plan_fleet
from views.report import plan_json, render_plan
from tests.support.stacks import fleet, host, service
from tests.support.profiles import QWEN3_PROFILE, profiled
from tests.support.pipeline import plan_json_of

TOTAL_64 = RUNTIME_TOTAL_BYTES[64]
# A Qwen3-style dense model: 64 layers, 8 KV heads of 128 (config.json of Qwen/Qwen3-32B).


def dense(weight_gib: float = 30, layers: int = 64, kv_heads: int = 8, head_dim: int = 128, dtype: int = 2) -> Shape:
    return Shape(weight_bytes=int(weight_gib * GIB), layers=layers, kv_dtype_bytes=dtype, kv_heads=kv_heads, head_dim=head_dim)


def test_the_kv_cache_is_the_budget_less_weights_and_overhead_in_whole_blocks():
    cap = capacity(dense(), tp=4, fraction=Decimal("0.9"), total_bytes=TOTAL_64, overhead_bytes=4 * GIB,
                   max_model_len=32768, max_num_seqs=4)  # fmt: skip
    budget = int(Decimal("0.9") * TOTAL_64)
    weights = int(30 * GIB) // 4
    assert cap.kv_bytes_per_card == budget - weights - 4 * GIB
    per_token = 2 * 64 * (8 // 4) * 128 * 2  # K and V, 2 of the 8 KV heads per rank, bf16
    assert cap.block_tokens == 128 and cap.kv_blocks == cap.kv_bytes_per_card // (per_token * 128)
    assert cap.blocks_per_request == 32768 // 128 and cap.bytes_per_request == 256 * 128 * per_token
    assert cap.fits and cap.max_concurrency == cap.kv_blocks / 256
    assert cap.kv_tokens == int(cap.kv_blocks / 256 * 32768)  # vLLM 0.20's log


def test_kv_heads_are_replicated_not_split_when_there_are_fewer_than_ranks():
    assert dense(kv_heads=4).token_bytes(tp=8) == dense(kv_heads=4).token_bytes(tp=4) == dense(kv_heads=4).token_bytes(tp=1) // 4
    assert dense(kv_heads=1).token_bytes(tp=4) == dense(kv_heads=1).token_bytes(tp=1)


def test_mla_has_no_factor_two_and_no_split_across_ranks():
    mla = Shape(weight_bytes=GIB, layers=61, kv_dtype_bytes=2, mla_width=512 + 64)  # DeepSeek-V3's sizes
    assert mla.token_bytes(tp=1) == mla.token_bytes(tp=8) == 61 * 576 * 2


@given(
    fraction=st.integers(1, 99),
    more=st.integers(1, 50),
    tp=st.sampled_from([1, 2, 4, 8]),
    kv_heads=st.sampled_from([1, 2, 4, 8, 16, 32]),
)
def test_more_fraction_never_gives_fewer_tokens(fraction, more, tp, kv_heads):
    def tokens(f):
        return capacity(dense(weight_gib=10, kv_heads=kv_heads), tp=tp, fraction=Decimal(f) / 100,
                        total_bytes=TOTAL_64, overhead_bytes=2 * GIB, max_model_len=None, max_num_seqs=None).kv_tokens  # fmt: skip

    assert tokens(min(fraction + more, 100)) >= tokens(fraction)


@given(weight_bytes=st.integers(1, 200 * GIB), tp=st.sampled_from([1, 2, 4, 8]))
def test_the_weights_per_card_are_the_largest_ranks_share_so_no_byte_of_them_counts_as_cache(weight_bytes, tp):
    # Each rank holds a shard; with weights that do not divide by TP some rank holds the larger
    # share, and the cache is the smallest over ranks: that rank's share is what is subtracted.
    shape = Shape(weight_bytes=weight_bytes, layers=64, kv_dtype_bytes=2, kv_heads=8, head_dim=128)
    cap = capacity(shape, tp=tp, fraction=Decimal("0.9"), total_bytes=TOTAL_64, overhead_bytes=4 * GIB,
                   max_model_len=None, max_num_seqs=None)  # fmt: skip
    assert weight_bytes <= cap.weight_bytes_per_card * tp < weight_bytes + tp
    assert cap.kv_bytes_per_card == int(Decimal("0.9") * TOTAL_64) - cap.weight_bytes_per_card - 4 * GIB


@given(kv_heads=st.sampled_from([1, 2, 4, 8, 16, 32, 64]), tp=st.sampled_from([1, 2, 4, 8, 16]))
def test_tp_splits_kv_heads_only_when_there_are_at_least_as_many_heads_as_ranks(kv_heads, tp):
    per_rank_heads = dense(kv_heads=kv_heads, head_dim=1, layers=1, dtype=1).token_bytes(tp) // 2
    assert per_rank_heads == (kv_heads // tp if kv_heads >= tp else 1)


def test_the_plan_reports_capacity_per_service_and_the_runtime_total_per_host():
    plan = plan_fleet(profiled(0.9))
    doc = plan_json(deploy(plan))
    [npu_a] = doc["hosts"]
    assert npu_a["hbmBytes"] == 65452113920
    cap = npu_a["services"][0]["capacity"]
    assert set(cap) == {"weightsGiBPerCard", "kvCacheGiBPerCard", "kvCacheTokens", "maxConcurrency", "fits",
                        "blockSizeTokens", "kvCacheBlocks", "bytesPerRequest"}  # fmt: skip
    assert cap["weightsGiBPerCard"] == 7.5 and cap["fits"] is True and cap["blockSizeTokens"] == 128
    assert cap["kvCacheTokens"] > 32768 and cap["maxConcurrency"] == round(cap["kvCacheBlocks"] / 256, 2)
    assert cap["bytesPerRequest"] == 32768 * 2 * 64 * 2 * 128 * 2 == 2 * GIB  # K and V, 64 layers, 2 heads per rank
    table = render_plan(deploy(plan), "table")
    for column, value in [("KV tokens", cap["kvCacheTokens"]), ("KV blocks", cap["kvCacheBlocks"]), ("block", 128),
                          ("seqs at maxModelLen", f"{cap['maxConcurrency']:.2f}"), ("per request", "2.00 GiB")]:
        assert column in table and str(value) in table
    assert "0.9 (54.86 GiB)" in table, "HBM/card from the runtime total, not 64 GiB"
    unprofiled = plan_json_of(fleet([host("npu-a")], [service("chat")]))
    assert unprofiled["hosts"][0]["services"][0]["capacity"] is None


def test_weights_and_overhead_over_the_fraction_stop_the_plan_with_the_arithmetic():
    with pytest.raises(AllocationError) as error:
        plan_fleet(profiled(0.1))
    message = str(error.value)
    assert "service chat (memoryFraction 0.1 of 60.96 GiB on each of 4 card(s)) does not fit" in message
    assert "6.10 GiB budget - 7.50 GiB weights per card - 4.00 GiB runtime overhead = -5.40 GiB" in message


def test_a_cache_smaller_than_one_sequence_stops_the_plan_as_vllm_would():
    with pytest.raises(AllocationError, match=r"holds 2429 blocks, fewer than the 7813 one request of maxModelLen "
                                              r"1000000 needs \(61.04 GiB per card\), and vLLM refuses to start"):
        plan_fleet(profiled(0.5, max_model_len=1_000_000))


def test_more_sequences_than_the_cache_holds_is_a_warning_not_an_error():
    plan = plan_fleet(profiled(0.5, max_model_len=100_000, max_num_seqs=64))
    assert plan.warnings == (
        "host npu-a cards 0,1,2,3: maxNumSeqs, memoryFraction: chat: maxNumSeqs 64 requests of maxModelLen 100000 "
        "need 50048 blocks, more than its KV cache of 2429 (memoryFraction 0.5 of 60.96 GiB): 3.11 requests of "
        "maxModelLen at once, the rest queue",
    )
    assert plan_fleet(profiled(0.9)).warnings == ()


def test_each_note_on_a_sized_service_is_a_warning_of_its_own_led_by_its_cards_and_key():
    speculative = ["--speculative-config", '{"num_speculative_tokens": 2}']
    plan = plan_fleet(profiled(0.5, max_model_len=100_000, max_num_seqs=64, args=speculative))
    assert [w.split(": ")[:3] for w in plan.warnings] == [
        ["host npu-a cards 0,1,2,3", "maxNumSeqs, memoryFraction", "chat"],
        ["host npu-a cards 0,1,2,3", "args", "chat's cache counts --speculative-config's 2 tokens but not the draft "
         "model's own layers, which share the cache (not sized"],
    ]  # fmt: skip


def test_an_unknown_card_size_needs_hbm_bytes():
    svc = service("chat", 1, 0.5, profile={"weightBytes": GIB, **QWEN3_PROFILE})
    with pytest.raises(AllocationError, match="hbmGiB 48 is not a card ascend-fleet knows"):
        plan_fleet(fleet([host("npu-a", hbmGiB=48)], [svc]))
    plan = plan_fleet(fleet([host("npu-a", hbmGiB=48, hbmBytes=48 * GIB)], [svc]))
    assert plan.hosts[0].services[0].capacity.budget_bytes == 24 * GIB


def test_the_overhead_allowance_is_per_stack_and_per_service():
    base = plan_fleet(profiled(0.9)).hosts[0].services[0].capacity
    stack = plan_fleet(profiled(0.9).model_copy(update={"runtime_overhead_gi_b": Decimal(1)}))
    assert stack.hosts[0].services[0].capacity.kv_bytes_per_card == base.kv_bytes_per_card + 3 * GIB
    own = plan_fleet(profiled(0.9, runtimeOverheadGiB=0)).hosts[0].services[0].capacity
    assert own.kv_bytes_per_card == base.kv_bytes_per_card + 4 * GIB


@pytest.mark.parametrize(
    "profile, words",
    [
        ({"weightBytes": 1, "numHiddenLayers": 2}, "attention gqa needs numKeyValueHeads and headDim"),
        ({"weightBytes": 1, "numHiddenLayers": 2, "attention": "mla"}, "attention mla needs kvLoraRank and qkRopeHeadDim"),
    ],
)
def test_a_profile_without_its_attention_fields_is_refused(profile, words):
    from allocation.errors import ConfigError

    with pytest.raises(ConfigError, match=words):
        fleet([host("npu-a")], [service("chat", profile=profile)])


def test_an_encoder_only_model_needs_weights_and_overhead_only():
    svc = service("embed", 1, 0.1, maxModelLen=8192, profile={"weightBytes": GIB, "numHiddenLayers": 24, "attention": "encoder"})
    cap = plan_fleet(fleet([host("npu-a")], [svc])).hosts[0].services[0].capacity
    assert cap.fits and cap.kv_tokens == 0 and cap.max_concurrency is None
    assert cap.kv_bytes_per_card == int(Decimal("0.1") * TOTAL_64) - GIB - 4 * GIB


def test_an_encoder_with_max_model_len_and_auto_gets_the_smallest_fraction_holding_weights_and_allowance():
    profile = {"weightBytes": 2 * GIB, "numHiddenLayers": 24, "attention": "encoder"}
    svc = {**service("embed", 1, 0.1, maxModelLen=8192, maxNumSeqs=4, profile=profile), "memoryFraction": "auto"}
    ps = plan_fleet(fleet([host("npu-a")], [svc])).hosts[0].services[0]
    assert ps.memory_fraction == Decimal("0.10")  # 6.10 GiB holds 2 + 4; 0.09 (5.49 GiB) does not
    assert ps.capacity.fits and ps.capacity.kv_tokens == 0 and ps.capacity.block_tokens is None
    assert int(Decimal("0.09") * TOTAL_64) < 6 * GIB < int(Decimal("0.10") * TOTAL_64)


def test_a_float32_checkpoint_takes_half_its_stored_bytes_unless_served_in_float32():
    profile = {"weightBytes": 4 * GIB, "numHiddenLayers": 24, "attention": "encoder", "torchDtype": "float32"}
    half = plan_fleet(fleet([host("npu-a")], [service("embed", 1, 0.1, profile=profile)])).hosts[0].services[0].capacity
    full = plan_fleet(fleet([host("npu-a")], [service("embed", 1, 0.2, profile=profile, args=["--dtype", "float32"])]))
    assert half.weight_bytes_per_card == 2 * GIB and full.hosts[0].services[0].capacity.weight_bytes_per_card == 4 * GIB


def test_an_unverified_profile_is_sized_and_the_plan_repeats_what_is_unverified_as_a_note_not_a_warning():
    svc = service("chat", 4, 0.9, maxModelLen=32768, profile={"weightBytes": 30 * GIB, **QWEN3_PROFILE, "unverified": "weights guessed"})
    plan = plan_fleet(fleet([host("npu-a")], [svc]))
    assert plan.hosts[0].services[0].capacity.fits
    assert plan.notes == ("host npu-a cards 0,1,2,3: profile: chat sized with an unverified profile: weights guessed",)
    assert plan.warnings == ()


def test_a_hybrid_without_gated_delta_net_fields_is_not_sized_and_the_plan_says_why():
    svc = service("qwen", 4, 0.9, profile={"weightBytes": GIB, "numHiddenLayers": 64, "attention": "hybrid"})
    plan = plan_fleet(fleet([host("npu-a")], [svc]))
    assert plan.hosts[0].services[0].capacity is None
    [note] = plan.notes
    assert "not sized" in note and "sliding-window" in note and "does not guess" in note and plan.warnings == ()


def test_the_plan_names_every_service_it_could_not_size_and_why_in_its_notes():
    services = [
        service("chat", 4, 0.9, maxModelLen=32768, profile={"weightBytes": 30 * GIB, **QWEN3_PROFILE}),
        service("bare", 1, 0.5, devices=[4]),
        service("mamba", 2, 0.5, devices=[6, 7], profile={"weightBytes": GIB, "numHiddenLayers": 64, "attention": "hybrid"}),
    ]  # fmt: skip
    plan = plan_fleet(fleet([host("npu-a")], services))
    assert {ps.name: ps.capacity is not None for ps in plan.hosts[0].services} == {"bare": False, "chat": True, "mamba": False}
    assert plan.warnings == ()
    assert plan.notes == (
        "host npu-a cards 6,7: profile: mamba not sized: its sliding-window or non-Gated-DeltaNet state layers keep "
        "state vLLM sizes per model, and the planner does not guess it (a Gated DeltaNet profile has "
        "linearNumKeyHeads, ...)",
        "host npu-a: profile: bare not sized (no profile): its KV cache is not checked; python -m allocation "
        "profile writes the profile",
    )


def test_the_diff_shows_what_a_change_does_to_the_capacity():
    from views.diff import diff_plans, render_diff

    old = plan_json_of(profiled(0.9))
    new = plan_json_of(profiled(0.9, runtimeOverheadGiB=2))
    diff = diff_plans(old, new)
    [chat] = diff.changes()
    assert chat.kinds() == ["capacity"] and not chat.restart_reasons
    text = render_diff(diff, "markdown")
    before, after = old["hosts"][0]["services"][0]["capacity"], new["hosts"][0]["services"][0]["capacity"]
    assert f"kvCacheTokens {before['kvCacheTokens']} -> {after['kvCacheTokens']}" in text
    unsized = plan_json_of(profiled(0.9))
    del unsized["hosts"][0]["services"][0]["capacity"]  # an older revision's plan
    assert diff_plans(unsized, old).changes() == []


# ---- memoryFraction: auto ------------------------------------------------------------------


def auto_fleet(max_model_len: int = 32768, max_num_seqs: int | None = 8, **host_extra):
    svc = {**service("chat", 4, 0.5, profile={"weightBytes": 30 * GIB, **QWEN3_PROFILE}, maxModelLen=max_model_len),
           "memoryFraction": "auto"}  # fmt: skip
    if max_num_seqs is not None:
        svc["maxNumSeqs"] = max_num_seqs
    return fleet([host("npu-a", **host_extra)], [svc])


@given(max_model_len=st.integers(1024, 200_000), max_num_seqs=st.integers(1, 64))
def test_auto_is_the_smallest_hundredth_that_holds_max_num_seqs_sequences(max_model_len, max_num_seqs):
    config = auto_fleet(max_model_len, max_num_seqs)
    wanted = -(-max_model_len // 128) * max_num_seqs  # blocks
    try:
        plan = plan_fleet(config)
    except AllocationError as error:
        assert "no memoryFraction within the per-card budget 0.95 holds" in str(error)
        at_budget = capacity(dense(), tp=4, fraction=Decimal("0.95"), total_bytes=TOTAL_64, overhead_bytes=4 * GIB,
                             max_model_len=max_model_len, max_num_seqs=max_num_seqs)  # fmt: skip
        assert at_budget.kv_blocks < wanted
        return
    ps = plan.hosts[0].services[0]
    chosen = ps.memory_fraction
    assert ps.instance.auto_fraction and chosen * 100 == int(chosen * 100)
    assert ps.capacity.fits and ps.capacity.kv_blocks >= wanted
    if chosen > Decimal("0.01"):
        below = capacity(dense(), tp=4, fraction=chosen - Decimal("0.01"), total_bytes=TOTAL_64, overhead_bytes=4 * GIB,
                         max_model_len=max_model_len, max_num_seqs=max_num_seqs)  # fmt: skip
        assert not (below.fits and below.kv_blocks >= wanted), "a hundredth less would do"


def test_auto_goes_into_the_command_and_pin_writes_the_number(tmp_path):
    from cli.pin import pin_stack_file

    plan = plan_fleet(auto_fleet())
    chosen = plan.hosts[0].services[0].memory_fraction
    [sd] = deploy(plan).services()
    assert sd.spec.command[sd.spec.command.index("--gpu-memory-utilization") + 1] == str(chosen)
    path = tmp_path / "Pulumi.auto.yaml"
    path.write_text(
        "config:\n  ascend-fleet:hosts:\n    - name: npu-a\n      address: npu-a.example\n"
        "  ascend-fleet:services:\n    - name: chat  # the chat model\n      model: /models/chat\n"
        "      tensorParallelSize: 4\n      memoryFraction: auto\n      maxModelLen: 32768\n      maxNumSeqs: 8\n"
        f"      profile: {{weightBytes: {30 * GIB}, numHiddenLayers: 64, numKeyValueHeads: 8, headDim: 128}}\n"
    )
    pin_stack_file(path, plan)
    text = path.read_text()
    assert f"memoryFraction: {chosen}\n" in text and "# the chat model" in text
    assert "auto" not in text


def test_auto_without_a_profile_or_max_model_len_is_a_config_error():
    from allocation.errors import ConfigError

    with pytest.raises(ConfigError, match="memoryFraction auto needs the model's profile"):
        fleet([host("npu-a")], [{**service("chat"), "memoryFraction": "auto"}])
    with pytest.raises(ConfigError, match="memoryFraction auto needs maxModelLen"):
        fleet([host("npu-a")], [{**service("chat", profile={"weightBytes": GIB, **QWEN3_PROFILE}), "memoryFraction": "auto"}])


def test_the_token_count_matches_a_published_startup_log():
    """vllm-ascend issue 5044 (Qwen3-8B, bf16, TP 1, 32 GB card): `Available memory: 10700878950, total
    memory: 31662800896` then `GPU KV cache size: 72,448 tokens`. Qwen3-8B: 36 layers, 8 KV heads of 128."""
    qwen3_8b = Shape(weight_bytes=0, layers=36, kv_dtype_bytes=2, kv_heads=8, head_dim=128)
    available = 10700878950
    cap = capacity(qwen3_8b, tp=1, fraction=Decimal(1), total_bytes=available, overhead_bytes=0,
                   max_model_len=10000, max_num_seqs=None, engine=Engine((0, 13)))  # fmt: skip
    assert cap.kv_tokens == 72448 and RUNTIME_TOTAL_BYTES[32] == 31662800896


# ---- versions ------------------------------------------------------------------------------


def shared_card(image: str | None = None, **extra):
    # No graph allowance: these tests are about the fractions; the graphs' room is tests/test_graph_memory.py's.
    defaults = {"graphMemoryGiB": 0, **({"image": image} if image else {})}
    services = [service("alpha", 1, 0.1, devices=[0]), service("beta", 4, 0.85, devices=[0, 1, 2, 3]),
                service("gamma", 4, 0.9, devices=[4, 5, 6, 7])]  # fmt: skip
    return fleet([host("npu-a")], services, defaults=defaults, **extra)


def utilization(plan, name: str) -> str:
    spec = next(sd.spec for sd in deploy(plan).services() if sd.name == name)
    return spec.command[spec.command.index("--gpu-memory-utilization") + 1]


def test_before_0_15_a_later_service_on_a_shared_card_gets_the_running_total():
    plan = plan_fleet(shared_card("quay.io/ascend/vllm-ascend:v0.11.0"))
    assert (utilization(plan, "alpha"), utilization(plan, "beta"), utilization(plan, "gamma")) == ("0.1", "0.95", "0.9")
    [note] = plan.warnings
    assert note.startswith("host npu-a cards 0,1,2,3: image: beta: vLLM-Ascend 0.11 counts the memory")
    assert "--gpu-memory-utilization 0.95 (0.1 before it + its 0.85)" in note
    [unsized] = plan.notes
    assert unsized.startswith("host npu-a: profile: alpha, beta, gamma not sized (no profile)")
    beta = next(s for s in plan_json(deploy(plan))["hosts"][0]["services"] if s["name"] == "beta")
    assert (beta["memoryFraction"], beta["gpuMemoryUtilization"]) == (0.85, 0.95)


def sized_shared_card(image: str, fraction: float = 0.85):
    profile = {"weightBytes": 30 * GIB, **QWEN3_PROFILE}
    services = [service("alpha", 1, 0.1, devices=[0]),
                service("beta", 4, fraction, devices=[0, 1, 2, 3], profile=profile, maxModelLen=32768)]  # fmt: skip
    # No graph allowance: these tests are about the fractions; the graphs' room is tests/test_graph_memory.py's.
    return fleet([host("npu-a")], services, defaults={"image": image, "graphMemoryGiB": 0})


@pytest.mark.parametrize("image", ["quay.io/ascend/vllm-ascend:v0.15.0rc1", "quay.io/ascend/vllm-ascend:v0.17.0rc1"])
def test_from_0_15_to_0_17_a_later_service_on_a_shared_card_is_warned_its_cache_is_smaller_and_by_how_much(image):
    plan = plan_fleet(sized_shared_card(image))
    assert utilization(plan, "beta") == "0.85"
    beta = plan.hosts[0].services[1].capacity
    held = int(Decimal("0.1") * TOTAL_64)
    [warning] = plan.warnings
    assert warning.startswith("host npu-a cards 0,1,2,3: image: beta: vLLM-Ascend 0.1")
    assert "before 0.18, vllm-ascend issue 7308" in warning and f"subtracts the {held / GIB:.2f} GiB" in warning
    assert f"{(beta.kv_bytes_per_card - held) / GIB:.2f} GiB per card instead of the plan's {beta.kv_bytes_per_card / GIB:.2f} GiB" in warning
    assert plan_fleet(sized_shared_card("quay.io/ascend/vllm-ascend:v0.18.0rc1")).warnings == ()


def test_from_0_15_to_0_17_the_plan_stops_when_what_is_left_cannot_hold_one_request():
    with pytest.raises(AllocationError, match=r"so vLLM will not start; use vLLM-Ascend 0.18 or later"):
        plan_fleet(sized_shared_card("quay.io/ascend/vllm-ascend:v0.16.0rc1", fraction=0.3))  # 6.79 - 6.10 < 2 GiB
    plan_fleet(sized_shared_card("quay.io/ascend/vllm-ascend:v0.18.0rc1", fraction=0.3))


@pytest.mark.parametrize("image, configured", [(None, None), ("quay.io/ascend/vllm-ascend:latest", None),
                                                ("quay.io/ascend/vllm-ascend:v0.11.0", "0.18.0")])  # fmt: skip
def test_from_0_18_or_unknown_each_service_asks_for_its_own_fraction_and_gets_it(image, configured):
    config = shared_card(image)
    if configured:
        config = config.model_copy(update={"defaults": config.defaults.model_copy(update={"vllm_ascend_version": configured})})
    plan = plan_fleet(config)
    assert utilization(plan, "beta") == "0.85"
    assert plan.warnings == () and [n.split(":")[:2] for n in plan.notes] == [["host npu-a", " profile"]]  # not sized


def test_requests_queue_only_when_max_num_seqs_requests_need_more_blocks_than_the_cache_has():
    def cap(blocks: int) -> Capacity:
        return Capacity(
            budget_bytes=10 * GIB, weight_bytes_per_card=GIB, overhead_bytes=GIB, kv_bytes_per_card=GIB,
            kv_tokens=blocks * 128, max_model_len=640, max_num_seqs=2, block_tokens=128, kv_blocks=blocks,
            blocks_per_request=5,
        )  # fmt: skip

    assert not cap(10).queues, "two requests of five blocks fill ten exactly: nothing waits"
    assert cap(9).queues
