"""How vLLM(-Ascend) lays out one rank's KV cache, and what its two start-up log lines will say. Pure.

vLLM-Ascend x.y runs vLLM x.y (the `VLLM_TAG` of each release's Dockerfile), so one version decides
both. Every rule below was read in the source it cites; tags are vLLM's (`vllm` sdist x.y.z from PyPI)
and vLLM-Ascend's (`vllm-ascend` git tag). Where a release was not read, the nearest one read decides
and docs/capacity.md says so.

The layout, per tensor-parallel rank:

- **block size.** vLLM 0.18 gives an unset `--block-size` the default 16 (vllm@0.18.0
  `config/cache.py` `_apply_block_size_default`); earlier it stays unset (vllm@0.17.0). vLLM-Ascend's
  `refresh_block_size` (vllm-ascend@v0.20.2rc1 `vllm_ascend/utils.py` l. 1305) makes an unset size
  128, and any size but 128 becomes 128 when prefix caching or chunked prefill is on (chunked prefill
  is by default for generative models, prefix caching only for those that are not hybrid: vllm@0.20.2
  `engine/arg_utils.py` `_set_default_chunked_prefill_and_prefix_caching_args`,
  `Engine.caches_prefixes`). From vLLM-Ascend 0.18 it leaves hybrid
  models alone (`model_config.is_hybrid`); before, only `qwen3_next` (vllm-ascend@v0.16.0rc1 l. 1076).
- **dense pages.** One group of every layer; a block of one layer is `block x per-layer token bytes`;
  blocks = available // page // layers (vllm@0.20.2 `v1/core/kv_cache_utils.py` `get_num_blocks`
  l. 930, `get_kv_cache_config_from_groups`).
- **hybrid (Gated DeltaNet) pages.** Per linear layer a conv state of `(conv_dim / TP) x (kernel - 1
  + speculative tokens)` in the model's dtype and a recurrent state of `(value heads / TP) x value
  head dim x key head dim` in `mamba_ssm_dtype` (vllm@0.20.2 `layers/mamba/mamba_utils.py`
  `gated_delta_net_state_shape` l. 213, `_mamba_state_dtype`; `models/config.py` l. 609 copies
  `mamba_ssm_dtype` for Qwen3.5). vLLM-Ascend replaces vLLM's alignment
  (`vllm_ascend/patch/platform/patch_mamba_config.py`):
  - up to 0.15 (vllm-ascend@v0.15.0rc1 l. 62): attention block = 128 x ceil(state page / (128 x
    K+V bytes of one token)); the page is that block of attention, the state padded up to it;
  - from 0.16 (vllm-ascend@v0.16.0rc1 l. 59, unchanged at v0.20.2rc1 l. 72): attention block = 128 x
    ceil(recurrent page / (128 x K bytes of one token)), which must land exactly on the recurrent page
    (an assert); the state page is padded to `attention page + conv page`
    (`mamba_page_size_padded`), and the attention page is padded up to it
    (`worker/model_runner_v1.py` l. 4332 at v0.20.2rc1, l. 3088 at v0.16.0rc1).
  Layers are grouped by kind, `min(full, linear)` layers a group unless the larger count is below
  1.5 (vLLM 0.18 on; 1.25 in 0.16 and 0.17) times it (`_get_kv_cache_groups_uniform_page_size`);
  every group shares one page size, blocks = available // page // layers per group.
- **one request of `maxModelLen`** needs, per full-attention group, ceil(L / block) blocks, and per
  linear group 1 + speculative tokens (2 + them in prefix caching's "align" mode, which vLLM 0.16 on
  picks when prefix caching is on for these models, that is only with `--enable-prefix-caching`:
  `MambaModelConfig`, and neither Qwen3.5 nor
  Qwen3-Next implements `SupportsMambaPrefixCaching`) (`MambaSpec.max_memory_usage_bytes`,
  `get_max_concurrency_for_kv_cache_config` l. 872). vLLM refuses to start when the cache holds
  fewer blocks than that.
- **the log.** "Maximum concurrency for L tokens per request: X" prints blocks / blocks per request.
  "GPU KV cache size: N tokens" prints int(X x L) from vLLM 0.20 (`_report_kv_cache_config` l. 1684,
  vllm issue 40691 / PR 40694's change); before, blocks // groups x the smallest block size of any
  group (vllm@0.19.1 l. 1302), the state groups' "block" being `maxModelLen` outside align mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from allocation.vllm_args import ArgsError, read_args

LATEST = (0, 20)
"""The rules of the newest release read; used when the image's version is unknown."""
KERNEL_BLOCK = 128  # vLLM-Ascend's `kernel_block_size` / `block_alignment_bytes`


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Engine:
    """What of the serving engine shapes the cache: its version and the flags in the service's `args`."""

    version: tuple[int, int] = LATEST
    prefix_caching: bool | None = None
    """`--[no-]enable-prefix-caching`; unset: vLLM's default for the model (`caches_prefixes`)."""
    chunked_prefill: bool = True
    block_size: int | None = None
    """`--block-size`, if given."""
    speculative_tokens: int = 0
    """`num_speculative_tokens` of `--speculative-config`."""
    dtype: str = "auto"
    """`--dtype`."""

    def caches_prefixes(self, hybrid: bool) -> bool:
        """Whether prefix caching is on. Unset, vLLM turns it on only where
        `ModelConfig.is_prefix_caching_supported`: not for hybrid generative models (vllm@0.13.0
        `config/model.py` l. 1754 to vllm@0.20.2 l. 1787, applied by `EngineArgs.
        _set_default_chunked_prefill_and_prefix_caching_args`; vllm-ascend issue 6250's log shows it off)."""
        return not hybrid if self.prefix_caching is None else self.prefix_caching


def prefix_caching(args: Sequence[str], hybrid: bool = False) -> bool:
    """Whether vLLM caches prefixes for a service with these `args` (valid ones: the config checked
    them), read as vLLM reads them (`allocation.vllm_args`: either spelling, the last flag wins), by
    `Engine.caches_prefixes`: the one decision the capacity check and the router's policy share."""
    return Engine(prefix_caching=read_args(args).prefix_caching).caches_prefixes(hybrid)


def engine_of(args: Sequence[str], version: tuple[int, int] | None) -> Engine | str:
    """The engine a service's `vllm serve` arguments ask for, read as vLLM reads them
    (`allocation.vllm_args`); or what in them vLLM would refuse."""
    try:
        read = read_args(args)
    except ArgsError as exc:
        return str(exc)
    chunked = read.chunked_prefill is not False
    return Engine(version or LATEST, read.prefix_caching, chunked, read.block_size, read.speculative_tokens, read.dtype or "auto")


@dataclass(frozen=True)
class GatedDeltaNet:
    """The sizes of a hybrid model's Gated DeltaNet (linear-attention) layers, from `config.json`."""

    full_layers: int
    linear_layers: int
    key_heads: int
    value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    ssm_dtype_bytes: int
    model_type: str | None = None


@dataclass(frozen=True)
class Unsized:
    """A layout the planner does not know: the plan says "not sized" and why, and goes on."""

    why: str


@dataclass(frozen=True)
class Layout:
    """One rank's KV cache as vLLM builds it for a `maxModelLen` (L)."""

    block_tokens: int
    """Tokens of one attention block."""
    page_bytes: int
    """Bytes of one block of one layer; one size for every group (padded)."""
    layers_per_group: int
    groups: int
    blocks_per_request: int
    """Blocks one request of L takes, summed over the groups."""
    log_block_tokens: int
    """The smallest block size of any group: what the log before vLLM 0.20 multiplies blocks by."""

    def blocks(self, kv_bytes: int) -> int:
        return max(kv_bytes, 0) // self.page_bytes // self.layers_per_group

    @property
    def bytes_per_request(self) -> int:
        """Memory one request of L takes on this rank: what vLLM checks the cache holds at start."""
        return self.layers_per_group * self.page_bytes * self.blocks_per_request


def dense_block_size(engine: Engine) -> int:
    """The block size of a model without state layers (see the module docstring)."""
    size = engine.block_size or (16 if engine.version >= (0, 18) else KERNEL_BLOCK)
    return KERNEL_BLOCK if size != KERNEL_BLOCK and (engine.caches_prefixes(hybrid=False) or engine.chunked_prefill) else size


def dense_layout(token_bytes_per_layer: int, layers: int, engine: Engine, max_model_len: int | None) -> Layout:
    block = dense_block_size(engine)
    return Layout(
        block_tokens=block,
        page_bytes=block * token_bytes_per_layer,
        layers_per_group=layers,
        groups=1,
        blocks_per_request=cdiv(max_model_len, block) if max_model_len else 1,
        log_block_tokens=block,
    )


def state_pages(gdn: GatedDeltaNet, tp: int, dtype_bytes: int, speculative_tokens: int) -> tuple[int, int] | str:
    """Bytes of one linear layer's (conv, recurrent) state on one rank; or why vLLM cannot split them."""
    conv_dim = gdn.key_head_dim * gdn.key_heads * 2 + gdn.value_head_dim * gdn.value_heads
    if conv_dim % tp or gdn.value_heads % tp:
        return (
            f"its linear layers' conv width {conv_dim} and {gdn.value_heads} value heads do not divide by "
            f"tensorParallelSize {tp} (vLLM's `divide` refuses)"
        )
    conv = conv_dim // tp * (gdn.conv_kernel - 1 + speculative_tokens) * dtype_bytes
    recurrent = gdn.value_heads // tp * gdn.value_head_dim * gdn.key_head_dim * gdn.ssm_dtype_bytes
    return conv, recurrent


def hybrid_layout(
    gdn: GatedDeltaNet, *, kv_heads: int, head_dim: int, dtype_bytes: int, tp: int, engine: Engine, max_model_len: int
) -> Layout | Unsized | str:
    """The layout of a Gated DeltaNet hybrid; why the planner cannot know it; or (a string) why
    vLLM(-Ascend) would not start with it."""
    pages = state_pages(gdn, tp, dtype_bytes, engine.speculative_tokens)
    if isinstance(pages, str):
        return pages
    conv, recurrent = pages
    k_token = max(1, kv_heads // tp) * head_dim * dtype_bytes
    v = engine.version
    if v <= (0, 15):
        aligned = KERNEL_BLOCK * cdiv(conv + recurrent, KERNEL_BLOCK * 2 * k_token)
        block = max(engine.block_size or 0, aligned)
        page = block * 2 * k_token
    else:
        aligned = KERNEL_BLOCK * cdiv(recurrent, KERNEL_BLOCK * k_token)
        if aligned * k_token != recurrent:
            return (
                f"vLLM-Ascend cannot align its recurrent state page ({recurrent} bytes) with the K page of "
                f"{aligned} tokens ({aligned * k_token} bytes): 'Cannot align ssm_page_size and attn_page_size'"
            )
        block = max(engine.block_size or (16 if v >= (0, 18) else 0), aligned)
        page = block * 2 * k_token + conv
        if v < (0, 18) and block != KERNEL_BLOCK and (engine.caches_prefixes(hybrid=True) or engine.chunked_prefill):
            if gdn.model_type is None:
                return Unsized("before vLLM-Ascend 0.18 its block size depends on the model type: set profile.modelType")
            if gdn.model_type != "qwen3_next":
                block = KERNEL_BLOCK  # refresh_block_size runs after the alignment; the page stays padded
    align_mode = v >= (0, 16) and engine.caches_prefixes(hybrid=True)
    low, high = sorted((gdn.full_layers, gdn.linear_layers))
    per_group = high if high < low * (1.5 if v >= (0, 18) else 1.25) else low
    full_groups, linear_groups = cdiv(gdn.full_layers, per_group), cdiv(gdn.linear_layers, per_group)
    state_blocks = (2 if align_mode else 1) + engine.speculative_tokens
    return Layout(
        block_tokens=block,
        page_bytes=page,
        layers_per_group=per_group,
        groups=full_groups + linear_groups,
        blocks_per_request=full_groups * cdiv(max_model_len, block) + linear_groups * state_blocks,
        log_block_tokens=block if align_mode else min(block, max_model_len),
    )


def log_lines(layout: Layout, blocks: int, max_model_len: int | None, version: tuple[int, int]) -> tuple[int, float | None]:
    """("GPU KV cache size" tokens, "Maximum concurrency") as that version's log prints them; the
    concurrency unrounded (the log shows two decimals), None without a `maxModelLen`."""
    if not max_model_len:
        return blocks * layout.block_tokens, None
    concurrency = blocks / layout.blocks_per_request
    if version >= (0, 20):
        return int(concurrency * max_model_len), concurrency
    return blocks // layout.groups * layout.log_block_tokens, concurrency
