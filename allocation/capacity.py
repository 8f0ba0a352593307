"""Capacity: will a model fit its memory fraction, and how much KV cache does it get. Pure.

The arithmetic vLLM(-Ascend) does at start, per tensor-parallel rank (one card):

- the budget is `fraction x total`, where total is what the runtime reports for the card
  (a 64 GB 910B: 65452113920 bytes), not its nominal size;
- the KV cache gets `budget - weights on the card - runtime overhead`, the overhead being
  the activation peak of vLLM's profiling run plus non-torch memory (vllm
  `v1/worker/gpu_worker.py` `determine_available_memory`; vllm-ascend `worker.py`);
- one token costs, per layer, `2 x max(1, kv_heads // TP) x head_dim x dtype bytes` (keys
  and values; KV heads are replicated, not split, when there are fewer than ranks: vllm
  `config/model.py` `get_num_kv_heads`), or `(kv_lora_rank + qk_rope_head_dim) x dtype
  bytes` for MLA models, not split across ranks (vllm `v1/kv_cache_interface.py`);
- the cache is whole blocks of 128 tokens on Ascend (vllm-ascend `refresh_block_size`).

Weights are taken as split evenly over the ranks; the overhead is one allowance per card
(`runtimeOverheadGiB`), chosen from published startup logs so that the plan errs on the safe side.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from allocation.config import FleetConfig, Host, ModelProfile, Service

GIB = 1 << 30
BLOCK_TOKENS = 128
# What the runtime reports as a card's total HBM, by nominal size in GiB (vllm-ascend issues
# 3843, 4594, 6250, 7352).
RUNTIME_TOTAL_BYTES = {64: 65452113920, 32: 31662800896}
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "int8": 1, "float8": 1}


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

    def token_bytes(self, tp: int) -> int:
        """KV bytes one token takes on one rank, over all layers; 0 for an encoder-only model."""
        if self.layers == 0:
            return 0
        if self.mla_width is not None:
            return self.layers * self.mla_width * self.kv_dtype_bytes
        assert self.kv_heads is not None and self.head_dim is not None
        return 2 * self.layers * max(1, self.kv_heads // tp) * self.head_dim * self.kv_dtype_bytes


@dataclass(frozen=True)
class Capacity:
    """One service's memory on each of its cards, as vLLM will find it at start."""

    budget_bytes: int
    weight_bytes_per_card: int
    overhead_bytes: int
    kv_bytes_per_card: int
    """Negative when weights and overhead do not fit the budget."""
    kv_tokens: int
    max_model_len: int | None
    max_num_seqs: int | None

    encoder: bool = False
    """An encoder-only model: no KV cache, so no token or sequence limit from it."""

    @property
    def fits(self) -> bool:
        """vLLM starts: the cache is positive and holds at least one sequence of max_model_len."""
        if self.encoder:
            return self.kv_bytes_per_card > 0
        return self.kv_bytes_per_card > 0 and self.kv_tokens >= (self.max_model_len or 1)

    @property
    def max_concurrency(self) -> float | None:
        """Sequences of max_model_len the cache holds at once."""
        return self.kv_tokens / self.max_model_len if self.max_model_len and not self.encoder else None

    @property
    def queues(self) -> bool:
        """It starts, but max_num_seqs sequences of max_model_len do not fit at once."""
        wanted = (self.max_num_seqs or 1) * (self.max_model_len or 0)
        return self.fits and not self.encoder and wanted > self.kv_tokens

    def arithmetic(self) -> str:
        """The numbers behind the verdict, in GiB."""
        return (
            f"{gib(self.budget_bytes)} GiB budget - {gib(self.weight_bytes_per_card)} GiB weights per card - "
            f"{gib(self.overhead_bytes)} GiB runtime overhead = {gib(self.kv_bytes_per_card)} GiB KV cache per card"
            f" = {self.kv_tokens} tokens"
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
) -> Capacity:
    budget = int(fraction * total_bytes)
    weights = -(-shape.weight_bytes // tp)
    kv = budget - weights - overhead_bytes
    token_bytes = shape.token_bytes(tp)
    blocks = max(kv, 0) // (token_bytes * BLOCK_TOKENS) if token_bytes else 0
    return Capacity(
        budget_bytes=budget,
        weight_bytes_per_card=weights,
        overhead_bytes=overhead_bytes,
        kv_bytes_per_card=kv,
        kv_tokens=blocks * BLOCK_TOKENS,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        encoder=shape.layers == 0,
    )


def runtime_total(host: Host) -> int | None:
    """The card's total as the runtime reports it: `hbmBytes`, else known from `hbmGiB`."""
    return host.hbm_bytes or RUNTIME_TOTAL_BYTES.get(host.hbm_gi_b)


def shape_of(profile: ModelProfile) -> Shape:
    """The profile's shape; an encoder-only model has no KV layers."""
    mla = profile.attention == "mla"
    return Shape(
        weight_bytes=profile.weight_bytes,
        layers=0 if profile.attention == "encoder" else profile.num_hidden_layers,
        kv_dtype_bytes=DTYPE_BYTES[profile.kv_cache_dtype],
        kv_heads=None if mla else profile.num_key_value_heads,
        head_dim=None if mla else profile.head_dim,
        mla_width=(profile.kv_lora_rank or 0) + (profile.qk_rope_head_dim or 0) if mla else None,
    )


@dataclass(frozen=True)
class Verdict:
    capacity: Capacity | None
    problem: str | None = None
    """Why vLLM would refuse to start: the plan stops."""
    warning: str | None = None
    """It starts, but not as configured: shown, the plan goes on."""


def _sized(fleet: FleetConfig, service: Service, total: int, fraction: Decimal) -> Capacity:
    """The service's capacity at `fraction` of a card of `total` bytes."""
    assert service.profile is not None
    overhead = service.runtime_overhead_gi_b
    overhead = fleet.runtime_overhead_gi_b if overhead is None else overhead
    return capacity(
        shape_of(service.profile),
        tp=service.tensor_parallel_size,
        fraction=fraction,
        total_bytes=total,
        overhead_bytes=int(overhead * GIB),
        max_model_len=service.max_model_len,
        max_num_seqs=service.max_num_seqs,
    )


def size_service(fleet: FleetConfig, host: Host, service: Service) -> Verdict:
    """The capacity of a service with a profile on its host, and what is wrong with it."""
    name, profile = service.name, service.profile
    if profile is None:
        return Verdict(None)
    if profile.attention == "hybrid":
        why = "layers keep state vLLM sizes per model, and the planner does not guess it"
        return Verdict(None, warning=f"service {name}: not sized: its sliding-window or linear-attention {why}")
    total = runtime_total(host)
    if total is None:
        return Verdict(
            None,
            f"service {name}: host {host.name}'s hbmGiB {host.hbm_gi_b} is not a card ascend-fleet knows "
            "(64, 32): set the host's hbmBytes to the total the runtime reports",
        )
    cap = _sized(fleet, service, total, service.memory_fraction)
    where = (
        f"service {name} (memoryFraction {service.memory_fraction} of {gib(total)} GiB "
        f"on each of {service.tensor_parallel_size} card(s))"
    )
    if cap.kv_bytes_per_card <= 0:
        advice = "raise memoryFraction, add cards (tensorParallelSize) or lower runtimeOverheadGiB if measured"
        return Verdict(cap, f"{where} does not fit: {cap.arithmetic()}; {advice}")
    if not cap.fits:
        return Verdict(
            cap,
            f"{where}: its KV cache holds {cap.kv_tokens} tokens, less than one sequence of maxModelLen "
            f"{service.max_model_len}, and vLLM refuses to start then: {cap.arithmetic()}; "
            "raise memoryFraction or lower maxModelLen",
        )
    if cap.queues:
        wanted = (service.max_num_seqs or 1) * (service.max_model_len or 0)
        return Verdict(
            cap,
            warning=f"{where}: maxNumSeqs {service.max_num_seqs} x maxModelLen {service.max_model_len} = {wanted} "
            f"tokens is more than its KV cache of {cap.kv_tokens} tokens: {cap.max_concurrency:.2f} sequences "
            "of maxModelLen at once, the rest queue",
        )
    return Verdict(cap)


def auto_fraction(fleet: FleetConfig, service: Service) -> Decimal | str:
    """`memoryFraction: auto`: the smallest fraction, in hundredths, at which vLLM starts and the
    cache holds `maxNumSeqs` (default 1) sequences of `maxModelLen`; else why none does. A service
    the allocator places is sized for the smallest card of the stack, so it fits wherever it lands."""
    hosts = [h for h in fleet.hosts if service.host in (None, h.name)]
    totals = [runtime_total(h) for h in hosts]
    if None in totals:
        return f"service {service.name}: memoryFraction auto needs every candidate host's hbmBytes (64 and 32 GiB are known)"
    total = min(t for t in totals if t is not None)
    wanted = (service.max_num_seqs or 1) * (service.max_model_len or 0)
    budget = min(fleet.budget(h) for h in hosts)
    cap = None
    for hundredths in range(1, int(budget * 100) + 1):
        fraction = Decimal(hundredths) / 100
        cap = _sized(fleet, service, total, fraction)
        if cap.fits and cap.kv_tokens >= wanted:
            return fraction
    at = f"at {Decimal(int(budget * 100)) / 100}, {cap.arithmetic()}" if cap else "the budget is below 0.01"
    return (
        f"service {service.name}: no memoryFraction within the per-card budget {budget} holds {wanted} tokens "
        f"(maxNumSeqs x maxModelLen) on {service.tensor_parallel_size} card(s): {at}"
    )
