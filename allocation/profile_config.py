"""`profile:` of a service: what sizes a model's memory, read from its checkpoint by `profile`.

Split out of `allocation.config` (which re-exports `ModelProfile`); pure.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator
from pydantic.alias_generators import to_camel

from allocation.config_types import ContainerName, Model, Name, PowerOfTwo
from allocation.scalars import Number, Whole
from allocation.values import Text


class ModelProfile(Model):
    """What sizes a model's memory, read from its checkpoint (`config.json` and the safetensors).

    Field names are `config.json`'s, camel-cased (under `text_config` for vision-language models)."""

    weight_bytes: Whole = Field(ge=1, le=1 << 50)
    """Bytes of the weights as stored: `metadata.total_size` of `model.safetensors.index.json`, or the
    sum of the tensors in the safetensors headers (quantized checkpoints keep some tensors in bf16)."""
    # Left out of the fleet's hash while unset, so shard files cut before it still match (FleetConfig.fleet_hash).
    expert_weight_bytes: Whole | None = Field(default=None, ge=1, le=1 << 50, exclude_if=lambda v: v is None)
    """Of `weightBytes`, the routed experts' of a mixture-of-experts model: the tensors under
    `.mlp.experts.` in the safetensors headers (`profile` sums them where it reads the headers, a
    checkpoint without `model.safetensors.index.json`; with one, set it by hand). With `dataParallel.expertParallel` they are split over
    every card of every rank instead of each rank's tensor-parallel group; unset, the capacity check
    splits all weights over the tensor-parallel group, which errs on the safe side."""
    num_hidden_layers: Whole = Field(ge=1, le=10_000)
    """`num_hidden_layers` (under `text_config` for vision-language models)."""
    attention: Literal["gqa", "mla", "encoder", "hybrid"] = "gqa"
    """`gqa`: standard or grouped-query attention; `mla`: DeepSeek-style multi-head latent attention;
    `encoder`: an encoder-only model (embeddings, rerankers), which keeps no KV cache; `hybrid`:
    full-attention layers plus layers that keep other state. A hybrid with the Gated DeltaNet fields
    below (Qwen3-Next, Qwen3.5, Qwen3.6) is sized; without them (sliding windows, other mamba kinds)
    it is not, and the plan says why."""
    model_type: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")] | None = None
    """`model_type` (hybrid): vLLM-Ascend before 0.18 treats `qwen3_next` apart when it sets the block size."""
    num_key_value_heads: Whole | None = Field(default=None, ge=1, le=10_000)
    """`num_key_value_heads` (gqa, and the full-attention layers of a hybrid)."""
    head_dim: Whole | None = Field(default=None, ge=1, le=100_000)
    """`head_dim`, else `hidden_size / num_attention_heads` (gqa, hybrid)."""
    kv_lora_rank: Whole | None = Field(default=None, ge=1, le=100_000)
    """`kv_lora_rank` (mla)."""
    qk_rope_head_dim: Whole | None = Field(default=None, ge=1, le=100_000)
    """`qk_rope_head_dim` (mla)."""
    kv_cache_dtype: Literal["bfloat16", "float16", "int8", "float8"] = "bfloat16"
    """Type of the KV cache entries; for a hybrid also the model's dtype, which its conv state takes."""
    unverified: Text | None = None
    """What in this profile was not read from the checkpoint, in words; the plan repeats it in its
    notes. `profile` never writes it, so profiling the real folder clears it."""
    torch_dtype: Literal["float32"] | None = None
    """`torch_dtype` (or `dtype`), set only for a float32 checkpoint: vLLM's `--dtype auto` loads it
    in 16 bits (vllm@0.20.2 `config/model.py` l. 1948), so its weights take half their stored bytes."""
    num_full_attention_layers: Whole | None = Field(default=None, ge=1, le=10_000)
    """Full-attention layers of a hybrid: `full_attention` entries of `layer_types`, else
    `num_hidden_layers / full_attention_interval`. The others are Gated DeltaNet layers."""
    linear_num_key_heads: Whole | None = Field(default=None, ge=1, le=10_000)
    """`linear_num_key_heads` (hybrid)."""
    linear_num_value_heads: Whole | None = Field(default=None, ge=1, le=10_000)
    """`linear_num_value_heads` (hybrid)."""
    linear_key_head_dim: Whole | None = Field(default=None, ge=1, le=100_000)
    """`linear_key_head_dim` (hybrid)."""
    linear_value_head_dim: Whole | None = Field(default=None, ge=1, le=100_000)
    """`linear_value_head_dim` (hybrid)."""
    linear_conv_kernel_dim: Whole | None = Field(default=None, ge=1, le=1_000)
    """`linear_conv_kernel_dim` (hybrid)."""
    mamba_ssm_dtype: Literal["bfloat16", "float16", "float32"] | None = None
    """`mamba_ssm_dtype` (hybrid): the type of the linear layers' recurrent state; the model's dtype
    when `config.json` has none (vllm `model_executor/models/config.py`)."""

    @model_validator(mode="after")
    def _experts_within_weights(self) -> ModelProfile:
        """`expertWeightBytes` is part of `weightBytes`."""
        if self.expert_weight_bytes is not None and self.expert_weight_bytes > self.weight_bytes:
            raise ValueError(
                f"expertWeightBytes {self.expert_weight_bytes} is more than weightBytes {self.weight_bytes}, "
                "of which the experts are a part"
            )
        return self

    @model_validator(mode="after")
    def _attention_fields(self) -> ModelProfile:
        """`attention: gqa` needs `numKeyValueHeads` and `headDim`, `mla` needs `kvLoraRank` and
        `qkRopeHeadDim`; the Gated DeltaNet fields belong to `hybrid` only, all of them or none, with
        `numFullAttentionLayers` below `numHiddenLayers`."""
        need = {"gqa": ("num_key_value_heads", "head_dim"), "mla": ("kv_lora_rank", "qk_rope_head_dim")}.get(self.attention, ())
        missing = [to_camel(n) for n in need if getattr(self, n) is None]
        if missing:
            raise ValueError(f"attention {self.attention} needs {' and '.join(missing)}")
        linear = [n for n in LINEAR_FIELDS if getattr(self, n) is not None]
        if linear and self.attention != "hybrid":
            raise ValueError(f"{', '.join(map(to_camel, linear))} belong to attention hybrid, not {self.attention}")
        absent = [to_camel(n) for n in (*LINEAR_FIELDS, "num_key_value_heads", "head_dim") if getattr(self, n) is None]
        if linear and absent:
            raise ValueError(f"a Gated DeltaNet hybrid needs all of its fields; missing {', '.join(absent)}")
        if linear and (self.num_full_attention_layers or 0) >= self.num_hidden_layers:
            raise ValueError(
                f"numFullAttentionLayers {self.num_full_attention_layers} leaves no linear layer of "
                f"numHiddenLayers {self.num_hidden_layers}"
            )
        return self

    @property
    def gated_delta_net(self) -> bool:
        """A hybrid whose other layers are Gated DeltaNet ones with every size known: it can be sized."""
        return self.attention == "hybrid" and self.linear_num_key_heads is not None


# The fields only a Gated DeltaNet hybrid has (it also needs numKeyValueHeads and headDim).
LINEAR_FIELDS = (
    "num_full_attention_layers", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
    "linear_value_head_dim", "linear_conv_kernel_dim", "mamba_ssm_dtype",
)  # fmt: skip




GiB = Annotated[Number, Field(ge=0, le=1024)]
Timestamp = Annotated[str, Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")]


class Measured(Model):
    """What a container of the service logged when it last started: vLLM-Ascend's own figures of one
    card, as `python -m allocation calibrate` read them (the largest weights, overhead and graph pool of
    any rank, the smallest KV cache), and where they come from. While `tensorParallelSize` is the one
    measured, the capacity check takes the weights and the runtime overhead from here, not from
    `profile` and `runtimeOverheadGiB` (a service's own `runtimeOverheadGiB` still wins), and the plan
    says which figures are measured and which are estimates (see [Will it fit](capacity.md))."""

    container: ContainerName
    """The container whose log the figures were read from: one of the plan's, or one the host `replaces`."""
    host: Name
    """The host it runs on."""
    date: Timestamp
    """When it logged them: docker's time of the line, UTC."""
    line: Text
    """The line the graph pool was read from, as vLLM-Ascend wrote it (`... GiB for NPU graph memory`)."""
    tensor_parallel_size: PowerOfTwo
    """The `--tensor-parallel-size` it ran with."""
    memory_fraction: Annotated[Number, Field(gt=0, le=1)] | None = None
    """The `--gpu-memory-utilization` it ran with ("Desired GPU memory utilization is (U, ...)"), which
    its KV cache follows."""
    weights_gi_b: GiB
    """GiB of weights on one card ("Loading model weights took X GB", which counts GiB)."""
    overhead_gi_b: GiB | None = None
    """GiB of peak activation plus non-torch memory on one card ("A GiB for peak activation, N GiB for
    non-torch memory"): what `runtimeOverheadGiB` allows for."""
    graph_memory_gi_b: GiB
    """GiB of its NPU graph pool on one card ("G GiB for NPU graph memory"); `calibrate` writes it as the
    service's `graphMemoryGiB` too, unless it ran with `--enforce-eager`."""
    kv_cache_gi_b: Annotated[Number, Field(ge=-1024, le=1024)] | None = None
    """GiB of KV cache on one card ("Current KV cache memory: K GiB", else "Available KV cache memory")."""
    kv_cache_tokens: Whole | None = Field(default=None, ge=0, le=10**12)
    """"GPU KV cache size: N tokens", when its engine's line could be told from a neighbour's."""
