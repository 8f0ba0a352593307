"""What a service's container logged at its last start (`measured:`, written by `calibrate`), and
when the plan takes it instead of the profile, the defaults or an estimate. Pure.

A measurement is of one configuration. Its weights, runtime overhead and graph pool per card follow
the tensor-parallel size (each card holds 1/TP of the weights), so the plan uses them only while the
service's `tensorParallelSize` is the one measured, and says so when it is not. Its KV cache follows
the fraction too, and is shown, never used: the plan computes the cache from the figures.
"""

from __future__ import annotations

from typing import Any, Sequence

from allocation.config import Measured
from allocation.instance import Instance
from allocation.outcome import Outcome, where


def applied(instance: Instance) -> Measured | None:
    """The service's measurement when the plan uses it: taken at the service's tensor-parallel size."""
    measured = instance.service.measured
    if measured is None or measured.tensor_parallel_size != instance.service.tensor_parallel_size:
        return None
    return measured


def graph_measured(instance: Instance) -> bool:
    """The service's own `graphMemoryGiB` is the graph pool its applied measurement logged."""
    measured = applied(instance)
    return measured is not None and instance.service.graph_memory_gi_b == measured.graph_memory_gi_b


def overhead_measured(instance: Instance) -> bool:
    """The runtime overhead comes from the measurement: it has one and the service sets none of its own."""
    measured = applied(instance)
    return measured is not None and measured.overhead_gi_b is not None and instance.service.runtime_overhead_gi_b is None


def source(measured: Measured) -> str:
    """Where the figures come from, in words: `container model-emb-vl on npu-a, 2026-12-05T10:11:12Z`."""
    return f"container {measured.container} on {measured.host}, {measured.date}"


def stale(host: str, instance: Instance, cards: Sequence[int]) -> Outcome[None]:
    """A warning for a measurement the plan does not use, if the service has one."""
    measured, s = instance.service.measured, instance.service
    if measured is None or applied(instance) is not None:
        return Outcome(None)
    graphs = ", and its graphMemoryGiB is still that measurement's" if s.graph_memory_gi_b == measured.graph_memory_gi_b else ""
    return Outcome(None, warnings=(
        f"{where(host, cards)}: measured: {instance.name}'s startup figures ({source(measured)}) were taken at "
        f"tensorParallelSize {measured.tensor_parallel_size} and it now has {s.tensor_parallel_size}, so the plan takes its weights and "
        f"runtime overhead from its profile and runtimeOverheadGiB again{graphs}: run python -m allocation calibrate "
        "once it has started with the new size",
    ))  # fmt: skip


def measured_json(instance: Instance) -> dict[str, Any]:
    """The plan JSON's `measured` of a service that has one: the record as configured, and whether
    the plan uses it (`used`)."""
    measured = instance.service.measured
    assert measured is not None
    record = measured.model_dump(by_alias=True, exclude_none=True)
    return {k: float(v) if k.endswith("GiB") or k == "memoryFraction" else v for k, v in record.items()} | {
        "used": applied(instance) is not None
    }
