"""Capacity: will a model fit its memory fraction, and how much KV cache does it get. Pure.

The arithmetic vLLM(-Ascend) does at start, per tensor-parallel rank (one card):

- the budget is `fraction x total`, where total is what the runtime reports for the card
  (a 64 GB 910B: 65452113920 bytes), not its nominal size;
- the KV cache gets `budget - weights on the card - runtime overhead`, the overhead being
  the activation peak of vLLM's profiling run plus non-torch memory (vllm
  `v1/worker/gpu_worker.py` `determine_available_memory`; vllm-ascend `worker/worker.py` l. 328);
- one token costs, per layer, `2 x max(1, kv_heads // TP) x head_dim x dtype bytes` (keys
  and values; KV heads are replicated, not split, when there are fewer than ranks: vllm
  `config/model.py` `get_num_kv_heads`), or `(kv_lora_rank + qk_rope_head_dim) x dtype
  bytes` for MLA models, not split across ranks (vllm `v1/kv_cache_interface.py`);
- the cache is whole blocks, laid out and logged as `allocation.kv_cache` says for the image's
  version and the service's `args` (block size 16 or 128; Gated DeltaNet hybrids' padded pages).

A service with `kvCacheGiB` fixes its cache instead: vLLM-Ascend takes `--kv-cache-memory-bytes` as
it is and skips the profiling (vllm-ascend@v0.20.2rc1 `worker/worker.py` `determine_available_memory`
l. 341-354, "reserved ... GiB for KV Cache as specified by kv_cache_memory_bytes"; vLLM@0.20.2
`v1/worker/gpu_worker.py` l. 344-362 does the same, and `config/cache.py` l. 158: it "ignores
gpu_memory_utilization"). Only the start-up check still reads the fraction (`_init_device` l. 274-285:
free memory must be at least `fraction x total`), so the plan sets the fraction to what the service
holds, weights + overhead + cache (`fixed_kv_fraction`), and sizes the tokens from the bytes.

NPU graphs are captured after the cache is allocated (vllm-ascend@v0.20.2rc1 `worker/worker.py`
`compile_or_warm_up_model` l. 508), outside the fraction: `allocation.graph_room` checks that the
services of a shared card have room for them (`graphMemoryGiB`, else `allocation.graph_estimate`'s
estimate).
Weights are taken as split evenly over the ranks; the overhead is one allowance per card
(`runtimeOverheadGiB`), chosen from published startup logs so that the plan errs on the safe side.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Sequence

from allocation.config import FRACTION_SCALE, FleetConfig, Host, ModelProfile, Service
from allocation.group import Member
from allocation.instance import Instance
from allocation.measured import applied, overhead_measured
from allocation.outcome import Outcome, where
from allocation.kv_cache import Engine, GatedDeltaNet, Layout, Unsized, dense_layout, engine_of, hybrid_layout, log_lines

GIB = 1 << 30
# What the runtime reports as a card's total HBM, by nominal size in GiB (vllm-ascend issues
# 3843, 4594, 6250, 7352).
RUNTIME_TOTAL_BYTES = {64: 65452113920, 32: 31662800896}
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "int8": 1, "float8": 1, "float32": 4}
FIXED_KV_SINCE = (0, 19)
"""The first vLLM-Ascend whose worker honours `--kv-cache-memory-bytes`: v0.19.1rc1 (PR 8289; v0.18.0's
`worker/worker.py` never reads `kv_cache_memory_bytes`, and there is no 0.19.0 release)."""


@dataclass(frozen=True)
class Shape:
    """What sizes a model's KV cache, from its checkpoint (`profile:` in the stack file)."""

    weight_bytes: int
    layers: int
    kv_dtype_bytes: int
    kv_heads: int | None = None
    head_dim: int | None = None
    mla_width: int | None = None
    """kv_lora_rank + qk_rope_head_dim, for MLA models; None for standard or grouped-query attention."""
    linear: GatedDeltaNet | None = None
    """The Gated DeltaNet layers of a hybrid; `layers` then counts its full-attention layers only."""
    float32: bool = False
    """A float32 checkpoint, which vLLM loads in 16 bits unless `--dtype float32`."""
    expert_bytes: int = 0
    """Of `weight_bytes`, the routed experts' (`expertWeightBytes`): split over the expert-parallel group."""

    def loaded_bytes(self, engine: Engine) -> int:
        """The weights' bytes in memory: half the stored ones for a float32 checkpoint loaded in 16 bits."""
        return self.weight_bytes // 2 if self.float32 and engine.dtype not in ("float32", "float") else self.weight_bytes

    def card_bytes(self, engine: Engine, tp: int, ep: int) -> int:
        """The weights on one card: everything split over the `tp` ranks, but the experts split over the
        `ep` cards of the expert-parallel group when that is larger (`--enable-expert-parallel`)."""
        loaded = self.loaded_bytes(engine)
        if ep == tp or not self.expert_bytes:
            return -(-loaded // tp)
        experts = self.expert_bytes * loaded // self.weight_bytes
        return -(-(loaded - experts) // tp) + -(-experts // ep)

    def layer_token_bytes(self, tp: int) -> int:
        """KV bytes one token takes in one attention layer on one rank."""
        if self.mla_width is not None:
            return self.mla_width * self.kv_dtype_bytes
        assert self.kv_heads is not None and self.head_dim is not None
        return 2 * max(1, self.kv_heads // tp) * self.head_dim * self.kv_dtype_bytes

    def token_bytes(self, tp: int) -> int:
        """KV bytes one token takes on one rank, over all attention layers; 0 for an encoder-only model."""
        return self.layers * self.layer_token_bytes(tp) if self.layers else 0

    def layout(self, tp: int, engine: Engine, max_model_len: int | None) -> Layout | Unsized | str | None:
        """The cache's layout on one rank (None: an encoder keeps no cache); `Unsized` or a string
        (vLLM refuses) as `kv_cache.hybrid_layout` returns them."""
        if self.layers == 0:
            return None
        if self.linear is None:
            return dense_layout(self.layer_token_bytes(tp), self.layers, engine, max_model_len)
        if not max_model_len:
            return Unsized("a hybrid's cache layout depends on maxModelLen: set it")
        assert self.kv_heads is not None and self.head_dim is not None
        return hybrid_layout(
            self.linear, kv_heads=self.kv_heads, head_dim=self.head_dim, dtype_bytes=self.kv_dtype_bytes, tp=tp,
            engine=engine, max_model_len=max_model_len,
        )  # fmt: skip


@dataclass(frozen=True)
class Capacity:
    """One service's memory on each of its cards, as vLLM will find it at start."""

    budget_bytes: int
    weight_bytes_per_card: int
    overhead_bytes: int
    kv_bytes_per_card: int
    """Negative when weights and overhead do not fit the budget."""
    kv_tokens: int
    """"GPU KV cache size: N tokens" as the image's vLLM version prints it."""
    max_model_len: int | None
    max_num_seqs: int | None

    encoder: bool = False
    """An encoder-only model: no KV cache, so no token or sequence limit from it."""
    block_tokens: int | None = None
    kv_blocks: int = 0
    blocks_per_request: int | None = None
    """Blocks one request of max_model_len takes; None without max_model_len or a cache."""
    bytes_per_request: int | None = None
    concurrency: float | None = None
    """"Maximum concurrency" unrounded: blocks / blocks per request."""
    fixed: bool = False
    """The cache is `kvCacheGiB`'s bytes (`--kv-cache-memory-bytes`), not what the budget leaves."""

    @property
    def held_bytes(self) -> int:
        """What the service holds on each card before its NPU graphs: its budget, or with a fixed cache
        its weights, the runtime overhead and that cache."""
        if self.fixed:
            return self.weight_bytes_per_card + self.overhead_bytes + self.kv_bytes_per_card
        return self.budget_bytes

    @property
    def fits(self) -> bool:
        """vLLM starts: the cache is positive and holds at least one request of max_model_len."""
        if self.encoder:
            return self.kv_bytes_per_card > 0
        return self.kv_bytes_per_card > 0 and self.kv_blocks >= (self.blocks_per_request or 1)

    @property
    def max_concurrency(self) -> float | None:
        """Requests of max_model_len the cache holds at once, as vLLM's log prints it."""
        return self.concurrency

    @property
    def queues(self) -> bool:
        """It starts, but max_num_seqs requests of max_model_len do not fit at once."""
        if self.encoder or not self.blocks_per_request or not self.max_model_len:
            return False
        return self.fits and (self.max_num_seqs or 1) * self.blocks_per_request > self.kv_blocks

    def arithmetic(self) -> str:
        """The numbers behind the verdict, in GiB."""
        cache = f" = {self.kv_blocks} blocks of {self.block_tokens} tokens" if self.block_tokens else ""
        if self.fixed:
            return (
                f"{gib(self.kv_bytes_per_card)} GiB KV cache per card (kvCacheGiB){cache}, beside "
                f"{gib(self.weight_bytes_per_card)} GiB weights per card and {gib(self.overhead_bytes)} GiB runtime overhead"
            )
        return (
            f"{gib(self.budget_bytes)} GiB budget - {gib(self.weight_bytes_per_card)} GiB weights per card - "
            f"{gib(self.overhead_bytes)} GiB runtime overhead = {gib(self.kv_bytes_per_card)} GiB KV cache per card"
            f"{cache}"
        )


def gib(value: int) -> str:
    return f"{value / GIB:.2f}"


def capacity(
    shape: Shape,
    *,
    tp: int,
    fraction: Decimal,
    total_bytes: int,
    overhead_bytes: int,
    max_model_len: int | None,
    max_num_seqs: int | None,
    engine: Engine = Engine(),
    ep: int | None = None,
    weights_per_card: int | None = None,
    kv_bytes: int | None = None,
) -> Capacity | Unsized | str:
    """The service's capacity; `Unsized` when the planner does not know the layout; a string when
    vLLM(-Ascend) would refuse the layout itself. `ep`: the cards the experts are split over (default `tp`).
    `weights_per_card`: as a startup log measured them, instead of the shape's bytes split over the ranks.
    `kv_bytes`: the cache fixed by `kvCacheGiB`, which the fraction does not size."""
    budget = int(fraction * total_bytes)
    weights = shape.card_bytes(engine, tp, ep or tp) if weights_per_card is None else weights_per_card
    kv = budget - weights - overhead_bytes if kv_bytes is None else kv_bytes
    fixed = kv_bytes is not None
    layout = shape.layout(tp, engine, max_model_len)
    if isinstance(layout, (Unsized, str)):
        return layout
    sized = Capacity(budget, weights, overhead_bytes, kv, 0, max_model_len, max_num_seqs, encoder=layout is None, fixed=fixed)
    if layout is None:
        return sized
    blocks = layout.blocks(kv)
    tokens, concurrency = log_lines(layout, blocks, max_model_len, engine.version)
    return Capacity(
        budget, weights, overhead_bytes, kv, tokens, max_model_len, max_num_seqs,
        block_tokens=layout.block_tokens, kv_blocks=blocks,
        blocks_per_request=layout.blocks_per_request if max_model_len else None,
        bytes_per_request=layout.bytes_per_request if max_model_len else None, concurrency=concurrency, fixed=fixed,
    )  # fmt: skip


def fixed_kv_bytes(service: Service) -> int | None:
    """`kvCacheGiB` as `--kv-cache-memory-bytes`: whole bytes, rounded down; None when not set."""
    return None if service.kv_cache_gi_b is None else int(service.kv_cache_gi_b * GIB)


def runtime_total(host: Host) -> int | None:
    """The card's total as the runtime reports it: `hbmBytes`, else known from `hbmGiB`."""
    return host.hbm_bytes or RUNTIME_TOTAL_BYTES.get(host.hbm_gi_b)


def shape_of(profile: ModelProfile) -> Shape | Unsized:
    """The profile's shape: an encoder-only model has no KV layers, a Gated DeltaNet hybrid its
    full-attention layers plus the linear ones; any other hybrid is not sized."""
    mla = profile.attention == "mla"
    linear = None
    if profile.attention == "hybrid":
        if not profile.gated_delta_net:
            return Unsized(
                "its sliding-window or non-Gated-DeltaNet state layers keep state vLLM sizes per model, "
                "and the planner does not guess it (a Gated DeltaNet profile has linearNumKeyHeads, ...)"
            )
        if profile.kv_cache_dtype not in ("bfloat16", "float16"):
            return Unsized(f"a hybrid with a {profile.kv_cache_dtype} KV cache (vllm issue 26646) is not sized")
        linear = _gated_delta_net(profile)
    layers = {"encoder": 0, "hybrid": profile.num_full_attention_layers}.get(profile.attention, profile.num_hidden_layers)
    return Shape(
        weight_bytes=profile.weight_bytes,
        layers=layers or 0,
        kv_dtype_bytes=DTYPE_BYTES[profile.kv_cache_dtype],
        kv_heads=None if mla else profile.num_key_value_heads,
        head_dim=None if mla else profile.head_dim,
        mla_width=(profile.kv_lora_rank or 0) + (profile.qk_rope_head_dim or 0) if mla else None,
        linear=linear,
        float32=profile.torch_dtype == "float32",
        expert_bytes=profile.expert_weight_bytes or 0,
    )


def _gated_delta_net(profile: ModelProfile) -> GatedDeltaNet:
    full = profile.num_full_attention_layers
    assert full is not None and profile.linear_num_key_heads is not None and profile.linear_num_value_heads is not None
    assert profile.linear_key_head_dim and profile.linear_value_head_dim and profile.linear_conv_kernel_dim
    return GatedDeltaNet(
        full_layers=full,
        linear_layers=profile.num_hidden_layers - full,
        key_heads=profile.linear_num_key_heads,
        value_heads=profile.linear_num_value_heads,
        key_head_dim=profile.linear_key_head_dim,
        value_head_dim=profile.linear_value_head_dim,
        conv_kernel=profile.linear_conv_kernel_dim,
        ssm_dtype_bytes=DTYPE_BYTES[profile.mamba_ssm_dtype or profile.kv_cache_dtype],
        model_type=profile.model_type,
    )


def engine_for(fleet: FleetConfig, instance: Instance | Member) -> Engine | str:
    """The engine the service runs: its vLLM-Ascend version and the defaults' then the service's `args`."""
    return engine_of(list(instance.resolved.args), instance.resolved.vllm_ascend_version)


def _sized(fleet: FleetConfig, instance: Instance | Member, total: int, fraction: Decimal) -> Capacity | Unsized | str:
    """The service's capacity at `fraction` of a card of `total` bytes; `Unsized` or why vLLM refuses."""
    assert instance.service.profile is not None
    shape, engine = shape_of(instance.service.profile), engine_for(fleet, instance)
    if isinstance(engine, str):
        return f"args: {engine}"
    if isinstance(shape, Unsized):
        return shape
    measured = applied(instance)
    overhead = instance.service.runtime_overhead_gi_b
    if overhead_measured(instance):
        assert measured is not None
        overhead = measured.overhead_gi_b
    overhead = fleet.runtime_overhead_gi_b if overhead is None else overhead
    return capacity(
        shape,
        tp=instance.service.tensor_parallel_size,
        fraction=fraction,
        total_bytes=total,
        overhead_bytes=int(overhead * GIB),
        max_model_len=instance.service.max_model_len,
        max_num_seqs=instance.service.max_num_seqs,
        engine=engine,
        ep=instance.expert_parallel_size,
        weights_per_card=None if measured is None else int(measured.weights_gi_b * GIB),
        kv_bytes=fixed_kv_bytes(instance.service),
    )


def size_service(fleet: FleetConfig, host: Host, instance: Instance | Member, cards: Sequence[int] = ()) -> Outcome[Capacity | None]:
    """The capacity of a service with a profile on its host (on `cards`); why vLLM would refuse to
    start, or what runs but not as configured, each warning led by where and the key to change; a
    note when it is sized from a profile marked `unverified`, or not sized."""
    name, s = instance.name, instance.service
    profile = s.profile
    if profile is None:
        return Outcome(None)
    total = runtime_total(host)
    if total is None:
        return Outcome(None, (
            f"service {name}: host {host.name}'s hbmGiB {host.hbm_gi_b} is not a card ascend-fleet knows "
            "(64, 32): set the host's hbmBytes to the total the runtime reports",
        ))  # fmt: skip
    place = where(host.name, cards)
    cap = _sized(fleet, instance, total, instance.memory_fraction)
    if isinstance(cap, Unsized):  # the plan cannot vouch for its figures: a note, not a fault of the layout
        return Outcome(None, notes=(f"{place}: profile: {name} not sized: {cap.why}",))
    if isinstance(cap, str):
        return Outcome(None, (f"service {name}: {cap}",))
    key = "kvCacheGiB" if cap.fixed else "memoryFraction"
    fraction = f"kvCacheGiB {s.kv_cache_gi_b}" if cap.fixed else f"memoryFraction {instance.memory_fraction} of {gib(total)} GiB"
    named = f"service {name} ({fraction} on each of {s.tensor_parallel_size} card(s))"
    if cap.kv_bytes_per_card <= 0:
        advice = f"raise {key}, add cards (tensorParallelSize) or lower runtimeOverheadGiB if measured"
        return Outcome(cap, (f"{named} does not fit: {cap.arithmetic()}; {advice}",))
    if not cap.fits:
        return Outcome(cap, (
            f"{named}: its KV cache holds {cap.kv_blocks} blocks, fewer than the {cap.blocks_per_request} one "
            f"request of maxModelLen {s.max_model_len} needs ({gib(cap.bytes_per_request or 0)} GiB per card), "
            f"and vLLM refuses to start then: {cap.arithmetic()}; raise {key} or lower maxModelLen",
        ))  # fmt: skip
    notes = []
    if cap.queues:
        wanted = (s.max_num_seqs or 1) * (cap.blocks_per_request or 0)
        notes.append(
            f"{place}: maxNumSeqs, {key}: {name}: maxNumSeqs {s.max_num_seqs} requests of maxModelLen "
            f"{s.max_model_len} need {wanted} blocks, more than its KV cache of {cap.kv_blocks} ({fraction}): "
            f"{cap.max_concurrency:.2f} requests of maxModelLen at once, the rest queue"
        )
    engine = engine_for(fleet, instance)
    if isinstance(engine, Engine) and engine.speculative_tokens and not cap.encoder:
        # A warning, not a note: the cache the plan shows is larger than the one vLLM will have.
        notes.append(
            f"{place}: args: {name}'s cache counts --speculative-config's {engine.speculative_tokens} tokens but "
            "not the draft model's own layers, which share the cache (not sized: unverified)"
        )
    unverified = (f"{place}: profile: {name} sized with an unverified profile: {profile.unverified}",)
    return Outcome(cap, warnings=tuple(notes), notes=unverified if profile.unverified else ())


def auto_fraction(fleet: FleetConfig, instance: Instance) -> Outcome[Decimal | None]:
    """`memoryFraction: auto`: the smallest fraction, in hundredths, at which vLLM starts and the
    cache holds `maxNumSeqs` (default 1) requests of `maxModelLen` (an encoder-only model: its weights
    and the allowance); else why none does. A service the allocator places is sized for the smallest
    card of its candidate hosts (`host`, else `hosts`, else every host), so it fits wherever it lands."""
    s = instance.service
    card = _smallest_card(fleet, instance, "memoryFraction auto")
    if isinstance(card, str):
        return Outcome(None, (card,))
    total, budget = card
    seqs = s.max_num_seqs or 1
    cap = None
    for hundredths in range(1, int(budget * 100) + 1):
        fraction = Decimal(hundredths) / 100
        cap = _sized(fleet, instance, total, fraction)
        if isinstance(cap, Unsized):
            return Outcome(None, (f"service {instance.name}: memoryFraction auto: not sized: {cap.why}",))
        if isinstance(cap, str):
            return Outcome(None, (f"service {instance.name}: {cap}",))
        if cap.fits and (cap.encoder or cap.kv_blocks >= seqs * (cap.blocks_per_request or 0)):
            return Outcome(fraction)
    at = f"at {Decimal(int(budget * 100)) / 100}, {cap.arithmetic()}" if isinstance(cap, Capacity) else "the budget is below 0.01"
    encoder = s.profile is not None and s.profile.attention == "encoder"
    wants = (
        "holds its weights and the runtime allowance" if encoder
        else f"holds {seqs} request(s) of maxModelLen {s.max_model_len} (maxNumSeqs x maxModelLen)"
    )  # fmt: skip
    return Outcome(None, (
        f"service {instance.name}: no memoryFraction within the per-card budget {budget} {wants} "
        f"on {s.tensor_parallel_size} card(s): {at}",
    ))  # fmt: skip


def _smallest_card(fleet: FleetConfig, instance: Instance, key: str) -> tuple[int, Decimal] | str:
    """(total, budget) of the smallest card of the instance's candidate hosts (`host`, else `hosts`,
    else every host), so what is sized for it fits wherever it lands; else why not (`key` needs it)."""
    candidates = [instance.host] if instance.host else instance.service.hosts
    hosts = [h for h in fleet.hosts if candidates is None or h.name in candidates]
    totals = [runtime_total(h) for h in hosts]
    if None in totals:
        return f"service {instance.name}: {key} needs every candidate host's hbmBytes (64 and 32 GiB are known)"
    return min(t for t in totals if t is not None), min(fleet.budget(h) for h in hosts)


def fixed_kv_fraction(fleet: FleetConfig, instance: Instance) -> Outcome[Decimal | None]:
    """`kvCacheGiB`: the fraction the plan gives `--gpu-memory-utilization`. vLLM sizes nothing from it
    then, but refuses to start unless that fraction of the card is free (vllm-ascend@v0.20.2rc1
    `worker/worker.py` `_init_device` l. 274-285, before the fixed cache's fast path at l. 341). It is the
    smallest, in the 1/10000 steps of `memoryFraction`, that covers what the service holds (its weights
    per card, `runtimeOverheadGiB` and the fixed cache) on the smallest card of its candidate hosts: so
    the check lets it start only where it fits, and a neighbour finds the most room; `graph_room` checks
    that it passes in both start orders on a shared card. Refused for an image before `FIXED_KV_SINCE`."""
    s, version = instance.service, instance.resolved.vllm_ascend_version
    if version is not None and version < FIXED_KV_SINCE:
        return Outcome(None, (
            f"service {instance.name}: kvCacheGiB needs vLLM-Ascend v0.19.1rc1 or later, the first release whose "
            f"worker honours --kv-cache-memory-bytes (vllm-ascend PR 8289), but its image {instance.resolved.image} "
            f"is vLLM-Ascend {version[0]}.{version[1]}: upgrade the image, or remove kvCacheGiB and set memoryFraction",
        ))  # fmt: skip
    card = _smallest_card(fleet, instance, "kvCacheGiB")
    if isinstance(card, str):
        return Outcome(None, (card,))
    total, budget = card
    cap = _sized(fleet, instance, total, budget)  # the fixed cache does not depend on the fraction
    if isinstance(cap, Unsized):
        return Outcome(None, (f"service {instance.name}: kvCacheGiB: not sized: {cap.why}",))
    if isinstance(cap, str):
        return Outcome(None, (f"service {instance.name}: {cap}",))
    fraction = Decimal(-(-cap.held_bytes * FRACTION_SCALE // total)) / FRACTION_SCALE
    if fraction > budget:
        return Outcome(None, (
            f"service {instance.name}: kvCacheGiB {s.kv_cache_gi_b} does not fit a card: {cap.arithmetic()} are "
            f"{gib(cap.held_bytes)} GiB, {fraction} of the card's {gib(total)} GiB, over the per-card budget "
            f"{budget}; lower kvCacheGiB or add cards (tensorParallelSize)",
        ))  # fmt: skip
    return Outcome(fraction)
