"""A service's NPU graph pool: the figure its startup log reported (`graphMemoryGiB`), else an
estimate from its profile, scaled from vLLM-Ascend's two published measurements. Pure.

What the pool follows (vllm-ascend@v0.20.2rc1, which runs vLLM v0.20.2, its Dockerfile's `VLLM_TAG`):

- **graphs per batch size.** vLLM's default `FULL_AND_PIECEWISE` becomes `PIECEWISE` on the NPU
  (`vllm_ascend/platform.py` `check_and_update_config` l. 379), which cuts the model at every attention
  layer: `num_hidden_layers + 1` graphs for each batch size captured, the count vLLM-Ascend itself
  takes per size (`vllm_ascend/utils.py` `update_aclgraph_sizes` l. 567, `resources_per_graph`).
- **the batch sizes.** Unless `cudagraph_capture_sizes` or `max_cudagraph_capture_size` is given
  (`--compilation-config`, `--cudagraph-capture-sizes`, `--max-cudagraph-capture-size`), the largest
  is `min(max_num_seqs x (1 + speculative tokens), 512)` (`platform.py`
  `_get_default_max_cudagraph_capture_size` l. 160-194, vLLM's rule without its `x 2`) and the sizes
  are `[1, 2, 4] + range(8, 256, 8) + range(256, largest + 1, 16)` up to it (vLLM `config/vllm.py`
  `VllmConfig._set_cudagraph_sizes`, read on vLLM's main: the list vllm-ascend's docstring there says
  it keeps). `--max-num-seqs` defaults to 256 on these cards (vLLM `engine/arg_utils.py`
  `get_batch_defaults`: 1024 only with 70 GiB of device memory or more, which a 64 GB 910B has not).
- **the ACL runtime's limit.** It captures at most 1800 graphs, so `update_aclgraph_sizes` keeps at
  most `floor((1800 - 40 g) / (layers + 1) / (1 + 2 g))` sizes, `g` 1 with tensor parallelism and 0
  without, or `floor(1800 / (layers + 1) / (1 + g))` with `HCCL_OP_EXPANSION_MODE=AIV` (its bound for
  MoE models, the larger), sampled evenly.
- **what was measured.** vLLM-Ascend's own test (`tests/e2e/singlecard/test_aclgraph_mem.py`, the same
  at v0.20.2rc1 and on main) measures free memory around `capture_model`: "~0.20 GiB" for Qwen3-0.6B
  (28 layers) and "~0.68 GiB" for DeepSeek-V2-Lite-W8A8 (27 layers, MLA attention, MoE layers), at its
  runner's defaults: one card, `max_num_seqs` 256, so 35 sizes (it allows 1.3x and 1.5x of them).

The estimate: a graph (one piece at one size) costs what a graph of the measured model of the same
kind cost, DeepSeek-V2-Lite-W8A8's (0.71 MiB) for `attention: mla`, Qwen3-0.6B's (0.20 MiB) for every
other kind (gqa, hybrid, encoder), times `(layers + 1) x sizes kept`. The hidden size is not a factor:
the profile does not carry it, and the two measurements do not follow it (hidden 1024 and 2048, a
graph 3.5 times dearer). It is an estimate, and the plan says so wherever it uses one: a MoE model
with standard attention, `cudagraph_mode` other than the default, or another release may take more.
The startup log's "... GiB for NPU graph memory" (`worker/worker.py` l. 537) is the figure: set it
as `graphMemoryGiB`, as `python -m allocation calibrate` does from the running containers (the plan
then calls it `measured`, `allocation.measured`).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from allocation.capacity import GIB
from allocation.config import ModelProfile
from allocation.instance import Instance
from allocation.measured import graph_measured
from allocation.vllm_args import VllmArgs, read_args

DEFAULT_MAX_NUM_SEQS = 256
LARGEST_DEFAULT_SIZE = 512
MAX_GRAPHS = 1800
"""The ACL graphs one process can capture (`update_aclgraph_sizes`' MAX_CAPTURE_SIZE)."""


@dataclass(frozen=True)
class Measured:
    """A published measurement of one model's graph pool, at the test runner's defaults."""

    model: str
    layers: int
    gib: Decimal

    @property
    def graphs(self) -> int:
        return (self.layers + 1) * sizes_kept(len(capture_sizes(None)), self.layers, tp=1)


QWEN3_0_6B = Measured("Qwen/Qwen3-0.6B", 28, Decimal("0.20"))
DEEPSEEK_V2_LITE = Measured("vllm-ascend/DeepSeek-V2-Lite-W8A8", 27, Decimal("0.68"))


def basis(attention: str) -> Measured:
    """The measurement an attention kind is scaled from."""
    return DEEPSEEK_V2_LITE if attention == "mla" else QWEN3_0_6B


def capture_sizes(max_num_seqs: int | None, args: VllmArgs = VllmArgs()) -> tuple[int, ...]:
    """The batch sizes vLLM-Ascend captures graphs for, before the ACL runtime's limit."""
    if args.capture_sizes is not None:
        return tuple(sorted(set(args.capture_sizes)))
    largest = args.max_capture_size
    if largest is None:
        largest = min((max_num_seqs or DEFAULT_MAX_NUM_SEQS) * (1 + args.speculative_tokens), LARGEST_DEFAULT_SIZE)
    small = [s for s in (1, 2, 4) if s <= largest]
    return (*small, *range(8, min(largest + 1, 256), 8), *range(256, largest + 1, 16))


def sizes_kept(sizes: int, layers: int, *, tp: int, aiv: bool = False) -> int:
    """How many of `sizes` batch sizes `update_aclgraph_sizes` keeps under the runtime's 1800 graphs."""
    groups = int(tp > 1)
    if aiv:
        most = MAX_GRAPHS // (layers + 1) // (1 + groups)
    else:
        most = (MAX_GRAPHS - 40 * groups) // (layers + 1) // (1 + 2 * groups)
    return min(sizes, max(most, 1))


def estimate(profile: ModelProfile, *, tp: int, max_num_seqs: int | None, args: VllmArgs = VllmArgs(),
             aiv: bool = False) -> int:  # fmt: skip
    """The estimated graph pool of one card, in bytes."""
    layers = profile.num_hidden_layers
    measured = basis(profile.attention)
    graphs = (layers + 1) * sizes_kept(len(capture_sizes(max_num_seqs, args)), layers, tp=tp, aiv=aiv)
    return int(measured.gib * GIB) * graphs // measured.graphs


@dataclass(frozen=True)
class GraphPool:
    """What one service's NPU graphs take on each of its cards, and where the figure comes from."""

    bytes: int
    source: str
    """`measured` (the service's `graphMemoryGiB` is its `measured:` one, `allocation.measured`),
    `graphMemoryGiB` (set otherwise), `estimate`, or `--enforce-eager` (none)."""

    @property
    def estimated(self) -> bool:
        return self.source == "estimate" and self.bytes > 0


def graph_pool(instance: Instance) -> GraphPool | None:
    """The graph pool of `instance`; None when it captures graphs and neither `graphMemoryGiB` nor a
    profile says how much."""
    resolved = instance.resolved
    if not resolved.captures_graphs:
        return GraphPool(0, "--enforce-eager")
    if resolved.graph_memory_gi_b is not None:
        return GraphPool(int(resolved.graph_memory_gi_b * GIB), "measured" if graph_measured(instance) else "graphMemoryGiB")
    profile, s = instance.service.profile, instance.service
    if profile is None:
        return None
    aiv = resolved.env.get("HCCL_OP_EXPANSION_MODE") == "AIV"
    size = estimate(profile, tp=s.tensor_parallel_size, max_num_seqs=s.max_num_seqs, args=read_args(resolved.args), aiv=aiv)
    return GraphPool(size, "estimate")
