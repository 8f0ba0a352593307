"""`kvCacheGiB`: a service fixes its KV cache with `--kv-cache-memory-bytes`, and the plan derives the
fraction vLLM still checks at start: the smallest that covers weights, allowance and cache, passing
the free-memory check in the deploy order and its reverse on a shared card (allocation/capacity.py
`fixed_kv_fraction`, allocation/graph_room.py). Refused for images before v0.19.1rc1 and in `args`."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from allocation.capacity import GIB, RUNTIME_TOTAL_BYTES, Shape, capacity
from allocation.errors import AllocationError, ConfigError
from allocation.graph_estimate import graph_pool
from allocation.graph_room import first_failure, tenant
from allocation.planner import plan_fleet
from cli.main import main
from records.deployment import deploy
from tests.support.pipeline import plan_json_of
from tests.support.profiles import QWEN3, SMALL_QWEN3_PROFILE as PROFILE, model, services_of, stack
from tests.support.stacks import fleet, host, service
from views.report import render_plan

TOTAL = RUNTIME_TOTAL_BYTES[64]  # 60.96 GiB


def fixed(name: str, kv: float, **extra):
    """A service on card 0 of npu-a with its cache fixed at `kv` GiB (and no memoryFraction)."""
    s = service(name, 1, devices=[0], host="npu-a", maxModelLen=32768, profile=PROFILE, kvCacheGiB=kv, **extra)
    del s["memoryFraction"]
    return s


def shared(alpha: float = 20, beta: float = 12, graphs: float = 0.5, **extra):
    return fleet([host("npu-a")], [fixed("alpha", alpha), fixed("beta", beta)], defaults={"graphMemoryGiB": graphs}, **extra)


def command_of(plan, name: str) -> list[str]:
    spec = next(sd.spec for sd in deploy(plan).services() if sd.name == name)
    return list(spec.command[spec.command.index("vllm") :])


def option(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_two_services_sharing_card_0_get_the_flag_and_the_smallest_fraction_covering_weights_allowance_and_cache():
    plan = plan_fleet(shared())
    alpha, beta = command_of(plan, "alpha"), command_of(plan, "beta")
    # alpha holds 8 GiB weights + 4 GiB allowance + 20 GiB cache = 32 GiB of 60.96: 0.52494... -> 0.525;
    # beta 8 + 4 + 12 = 24 GiB: 0.39372... -> 0.3938.
    assert (option(alpha, "--gpu-memory-utilization"), option(alpha, "--kv-cache-memory-bytes")) == ("0.525", "21474836480")
    assert (option(beta, "--gpu-memory-utilization"), option(beta, "--kv-cache-memory-bytes")) == ("0.3938", "12884901888")
    assert alpha.index("--kv-cache-memory-bytes") == alpha.index("--gpu-memory-utilization") + 2
    assert plan.warnings == ()
    [a, b] = plan_json_of(shared())["hosts"][0]["services"]
    assert (a["memoryFraction"], a["gpuMemoryUtilization"], a["kvCacheMemoryBytes"]) == (0.525, 0.525, 20 * GIB)
    assert (b["memoryFraction"], b["kvCacheMemoryBytes"]) == (0.3938, 12 * GIB)


def test_the_fraction_passes_the_free_memory_check_in_both_start_orders_and_a_step_less_would_not_cover_the_service():
    plan = plan_fleet(shared())
    services = plan.hosts[0].services
    tenants = [tenant(ps, TOTAL, graph_pool(ps.instance)) for ps in services]
    assert first_failure(tenants, TOTAL) is None and first_failure(tenants[::-1], TOTAL) is None
    for ps, t in zip(services, tenants):
        held = 8 * GIB + 4 * GIB + ps.kv_cache_bytes
        assert t.held == held and t.ask == int(ps.memory_fraction * TOTAL) >= held
        assert int((ps.memory_fraction - Decimal("0.0001")) * TOTAL) < held, f"{ps.name}: a step less would do"


def test_the_kv_cache_and_its_tokens_are_the_fixed_bytes_whatever_the_fraction():
    plan = plan_fleet(shared())
    cap = plan.hosts[0].services[0].capacity
    per_token = 2 * 8 * 128 * 2  # K and V, 8 KV heads of 128, bf16: one layer
    assert cap.fixed and cap.kv_bytes_per_card == 20 * GIB
    assert cap.kv_blocks == 20 * GIB // (128 * per_token) // 64 == 640
    assert cap.kv_tokens == int(640 / 256 * 32768) == 81920  # vLLM 0.20's "GPU KV cache size" line
    assert "20.00 GiB fixed" in render_plan(deploy(plan), "table")


@given(fraction=st.integers(1, 100), kv_gib=st.integers(1, 40), tp=st.sampled_from([1, 2, 4, 8]))
def test_with_fixed_bytes_the_fraction_sizes_nothing(fraction, kv_gib, tp):
    def sized(f):
        shape = Shape(weight_bytes=10 * GIB, layers=64, kv_dtype_bytes=2, kv_heads=8, head_dim=128)
        return capacity(shape, tp=tp, fraction=Decimal(f) / 100, total_bytes=TOTAL, overhead_bytes=4 * GIB,
                        max_model_len=32768, max_num_seqs=None, kv_bytes=kv_gib * GIB)  # fmt: skip

    one, other = sized(fraction), sized(100 if fraction < 100 else 1)
    note(f"{one}\n{other}")
    assert (one.kv_bytes_per_card, one.kv_blocks, one.kv_tokens) == (other.kv_bytes_per_card, other.kv_blocks, other.kv_tokens)
    assert one.held_bytes == -(-10 * GIB // tp) + 4 * GIB + kv_gib * GIB


@given(kv=st.decimals("0.01", "60", places=2), weights_gib=st.integers(1, 40), tp=st.sampled_from([1, 2, 4, 8]))
def test_the_fraction_is_the_smallest_step_covering_weights_allowance_and_cache_or_the_plan_says_it_does_not_fit(kv, weights_gib, tp):
    profile = {**PROFILE, "weightBytes": weights_gib * GIB}
    s = service("chat", tp, profile=profile, kvCacheGiB=float(kv), maxModelLen=128)
    del s["memoryFraction"]
    held = -(-weights_gib * GIB // tp) + 4 * GIB + int(kv * GIB)
    try:
        plan = plan_fleet(fleet([host("npu-a")], [s]))
    except AllocationError as error:
        note(str(error))
        assert held > Decimal("0.95") * TOTAL or "fewer than the 1 one request" in str(error)
        return
    fraction = plan.hosts[0].services[0].memory_fraction
    note(f"{fraction} for {held} bytes")
    assert int(fraction * TOTAL) >= held > int((fraction - Decimal("0.0001")) * TOTAL)
    assert fraction <= Decimal("0.95") and "--kv-cache-memory-bytes" in command_of(plan, "chat")


def test_fixed_caches_that_leave_no_room_for_the_graphs_are_warned_under_kv_cache_gib():
    # 32 GiB and 25.5 GiB fit the 0.95 budget (0.525 + 0.4183); with 2 GiB of graphs each, 61.5 GiB.
    [warning] = plan_fleet(shared(alpha=20, beta=13.5, graphs=2)).warnings
    assert warning.startswith(
        "host npu-a card 0: kvCacheGiB, graphMemoryGiB: in the start order (name order on the card), after alpha "
        "(34.00 GiB), beta finds 26.96 GiB free: it starts (needs 25.50 GiB) but its graph capture runs out of memory"
    )
    assert "alpha 32.00 GiB (kvCacheGiB: 20.00 GiB KV cache + 8.00 GiB weights + 4.00 GiB runtimeOverheadGiB)" in warning
    assert warning.endswith("Lower a kvCacheGiB there, set graphMemoryGiB to each service's startup log (\"... GiB for NPU graph memory\"), or add --enforce-eager to a service's args")


def test_a_fixed_cache_beside_a_fraction_is_checked_in_both_orders_asking_for_the_fraction_the_plan_derived():
    # alpha holds 32 GiB + 0.5 of graphs and asks 0.525 (32.00 GiB); beta asks 0.46 (28.04) + 1 of graphs.
    # alpha first leaves beta 28.46 GiB: it starts, its graphs do not fit; beta first leaves alpha 31.92: refused.
    beta = service("beta", 1, 0.46, devices=[0], host="npu-a", graphMemoryGiB=1)
    mixed = fleet([host("npu-a")], [fixed("alpha", 20, graphMemoryGiB=0.5), beta], memoryBudget=1)
    [warning] = [w for w in plan_fleet(mixed).warnings if "NPU graph" in w]  # and beta not sized
    assert warning.startswith(
        "host npu-a card 0: memoryFraction, kvCacheGiB, graphMemoryGiB: in the start order (name order on the card), "
        "after alpha (32.50 GiB), beta finds 28.46 GiB free: it starts (needs 28.04 GiB) but its graph capture runs "
        "out of memory (needs 29.04 GiB, 0.58 GiB short). The reverse order fails too: after beta (29.04 GiB), alpha "
        "finds 31.92 GiB free and needs 32.00 GiB (--gpu-memory-utilization 0.525, from its kvCacheGiB): vLLM refuses"
    )
    assert warning.endswith("Lower a memoryFraction or kvCacheGiB there, set graphMemoryGiB to each service's startup "
                            "log (\"... GiB for NPU graph memory\"), or add --enforce-eager to a service's args")


@pytest.mark.parametrize("image", ["quay.io/ascend/vllm-ascend:v0.18.0", "quay.io/ascend/vllm-ascend:v0.11.0rc3"])
def test_an_image_before_v0_19_1rc1_is_refused_naming_the_version(image):
    with pytest.raises(AllocationError) as refused:
        plan_fleet(fleet([host("npu-a")], [fixed("alpha", 20, image=image)]))
    text = str(refused.value)
    assert "service alpha: kvCacheGiB needs vLLM-Ascend v0.19.1rc1 or later" in text
    assert f"its image {image} is vLLM-Ascend 0.{image.split(':v0.')[1].split('.')[0]}" in text
    assert "\n" not in text and "Traceback" not in text


def test_v0_19_1rc1_a_configured_version_and_an_unknown_one_are_accepted_a_configured_older_one_is_not():
    assert plan_fleet(fleet([host("npu-a")], [fixed("alpha", 20, image="quay.io/ascend/vllm-ascend:v0.19.1rc1")]))
    assert plan_fleet(fleet([host("npu-a")], [fixed("alpha", 20, image="registry.example/vllm:prod")]))
    with pytest.raises(AllocationError, match="kvCacheGiB needs vLLM-Ascend v0.19.1rc1"):
        plan_fleet(fleet([host("npu-a")], [fixed("alpha", 20, image="registry.example/vllm:prod", vllmAscendVersion="0.18.0rc1")]))


@pytest.mark.parametrize("arg", ["--kv-cache-memory-bytes", "--kv-cache-memory-bytes=1000", "--kv_cache_memory_bytes=1000",
                                 "--kv-cache-memory=57403864576"])  # fmt: skip
def test_the_flag_in_args_is_refused_naming_kv_cache_gib(arg):
    with pytest.raises(ConfigError, match="sets --kv-cache-memory-bytes, which the plan owns: set kvCacheGiB instead"):
        fleet([host("npu-a")], [service("alpha", args=[arg, "1000"])])


def test_kv_cache_gib_refuses_a_memory_fraction_beside_it_a_missing_profile_and_an_encoder():
    with pytest.raises(ConfigError, match="kvCacheGiB 20 sets --gpu-memory-utilization too .*: remove memoryFraction"):
        fleet([host("npu-a")], [{**fixed("alpha", 20), "memoryFraction": 0.5}])
    with pytest.raises(ConfigError, match="kvCacheGiB needs the model's profile"):
        fleet([host("npu-a")], [{k: v for k, v in fixed("alpha", 20).items() if k != "profile"}])
    with pytest.raises(ConfigError, match="an encoder-only model keeps no KV cache"):
        fleet([host("npu-a")], [{**fixed("alpha", 20), "profile": {"weightBytes": GIB, "numHiddenLayers": 24, "attention": "encoder"}}])


def test_a_cache_that_does_not_fit_a_card_or_one_request_is_a_problem_naming_kv_cache_gib():
    with pytest.raises(AllocationError, match=r"kvCacheGiB 50 does not fit a card: .* are 62.00 GiB, 1.0172 of the card's 60.96 GiB, over the per-card budget 0.95; lower kvCacheGiB"):
        plan_fleet(fleet([host("npu-a")], [fixed("alpha", 50)]))
    with pytest.raises(AllocationError, match=r"kvCacheGiB 1 on each .* fewer than the 256 one request .*; raise kvCacheGiB or lower maxModelLen"):
        plan_fleet(fleet([host("npu-a")], [fixed("alpha", 1)]))
    # Under one byte: `--kv-cache-memory-bytes 0`, which vLLM would read as unset (and profile) is never passed.
    with pytest.raises(AllocationError, match=r"kvCacheGiB 1E-10 on each .* does not fit: 0.00 GiB KV cache per card \(kvCacheGiB\)"):
        plan_fleet(fleet([host("npu-a")], [fixed("alpha", 1e-10)]))


def test_every_other_service_keeps_its_fraction_command_and_plan_json_keys():
    plain = fleet([host("npu-a")], [service("alpha", 1, 0.5, devices=[0], maxModelLen=32768, profile=PROFILE)])
    [ps] = plan_fleet(plain).hosts[0].services
    assert ps.kv_cache_bytes is None and not ps.capacity.fixed
    assert "--kv-cache-memory-bytes" not in command_of(plan_fleet(plain), "alpha")
    assert "kvCacheMemoryBytes" not in plan_json_of(plain)["hosts"][0]["services"][0]


def test_profile_plans_a_kv_cache_gib_service_without_a_profile_yet_and_then_the_plan_derives_its_fraction(tmp_path, capsys):
    root = tmp_path / "copy"
    model(root / "disk2", "qwen", QWEN3, index_total=8 * GIB)
    path = stack(tmp_path, ["qwen"], tp=1)
    path.write_text(path.read_text().replace("memoryFraction: 0.9", "kvCacheGiB: 20"))
    assert main(["profile", "--config", str(path), "--models-root", str(root)]) == 0
    assert services_of(path)["qwen"]["kvCacheGiB"] == 20 and "profile" in services_of(path)["qwen"]
    capsys.readouterr()
    assert main(["plan", "--config", str(path), "--format", "json"]) == 0
