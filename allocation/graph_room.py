"""Room for NPU graphs on shared cards: do the services on a card all start, in start order? Pure.

vLLM-Ascend sizes a service's KV cache to fill `fraction x total` and captures its NPU (ACL) graph
pool afterwards, outside the fraction (vllm-ascend@v0.20.2rc1 `worker/worker.py`
`compile_or_warm_up_model` l. 506-508, which logs "... GiB for NPU graph memory", PR 8289). At start
each service asks to find its whole fraction free (`_init_device` l. 274: "Free memory on device ...
is less than desired GPU memory utilization"). So, per card, in start order (the deploy-time rank:
name order on the card, as `_running_totals` and records/start_order.py take it):

- a service holds its fraction once started, the KV cache filling what weights and the runtime
  overhead leave; an encoder-only model allocates no KV cache (vllm-ascend@v0.20.2rc1
  `worker/model_runner_v1.py` `get_kv_cache_spec`: "Skip modules that don't need KV cache (eg
  encoder-only attention)"), so it holds its weights plus `runtimeOverheadGiB`, the activation peak
  and non-torch memory the capacity check models inside the fraction; a service with `kvCacheGiB`
  holds its weights, that allowance and its fixed cache, and the plan's fraction
  (`capacity.fixed_kv_fraction`) is what it asks to find free;
- plus its graph pool (`allocation.graph_estimate`): `graphMemoryGiB`, the figure its startup log
  reported, else an estimate from its profile; none with `--enforce-eager` (`Resolved.captures_graphs`).
  Pooling models capture graphs too: vLLM-Ascend's own bge-m3 test runs it with ACL graphs
  (`tests/e2e/singlecard/pooling/test_embedding.py` `test_bge_m3_correctness`). A card with a service
  that has neither figure nor profile is not checked; the planner says so where it names the service
  it could not size.

A start fails when the card has less free than the fraction (vLLM refuses) or than what the service
then holds with its graphs (the capture runs out of memory: vllm-ascend issue 5650, "Failed to apply for memory" on a
shared NPU). The deploy order and its reverse are checked: a service restarted while the others run
starts last. Before 0.18 a later service counts the others' memory against its own fraction or KV
cache (vllm-ascend issue 7308, `_running_totals`), so it holds less than its fraction: cards with
such a service are left to `_running_totals`.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Sequence

from allocation.capacity import gib, runtime_total
from allocation.config import Host
from allocation.graph_estimate import GraphPool, graph_pool
from allocation.outcome import Outcome, where
from allocation.plan import ServicePlan

ADVICE = (
    "Lower a {keys} there, set graphMemoryGiB to each service's startup log (\"... GiB for NPU graph "
    "memory\"), or add --enforce-eager to a service's args"
)
REFUSED = '"Free memory on device ... is less than desired GPU memory utilization"'


@dataclass(frozen=True)
class Tenant:
    """One service on one card: what vLLM asks to find free at its start, and what it then holds."""

    name: str
    fraction: Decimal
    ask: int
    """memoryFraction x the card's total."""
    held: int
    """What it holds before its graphs: `ask`, or an encoder's weights and runtime overhead."""
    pool: GraphPool
    why: str
    """Where `held` comes from, in words."""
    asks: str = "memoryFraction"
    """The key that sets its fraction: `memoryFraction`, or `kvCacheGiB`, from which the plan derives it."""

    @property
    def total(self) -> int:
        return self.held + self.pool.bytes

    def words(self) -> str:
        pool = self.pool
        if pool.source == "--enforce-eager":
            return f"{self.name} {gib(self.held)} GiB ({self.why}), no graphs (--enforce-eager)"
        return f"{self.name} {gib(self.held)} GiB ({self.why}) + graphs {gib(pool.bytes)} GiB ({pool.source})"


def tenant(ps: ServicePlan, total: int, pool: GraphPool) -> Tenant:
    fraction, ask = ps.memory_fraction, int(ps.memory_fraction * total)
    cap = ps.capacity
    if cap is not None and cap.fixed:
        weights, overhead, kv = gib(cap.weight_bytes_per_card), gib(cap.overhead_bytes), gib(cap.kv_bytes_per_card)
        why = f"kvCacheGiB: {kv} GiB KV cache + {weights} GiB weights + {overhead} GiB runtimeOverheadGiB"
        return Tenant(ps.name, fraction, ask, cap.held_bytes, pool, why, asks="kvCacheGiB")
    if cap is not None and cap.encoder:
        held = cap.weight_bytes_per_card + cap.overhead_bytes
        weights, overhead = gib(cap.weight_bytes_per_card), gib(cap.overhead_bytes)
        why = f"no KV cache: {weights} GiB weights + {overhead} GiB runtimeOverheadGiB"
        return Tenant(ps.name, fraction, ask, held, pool, why)
    return Tenant(ps.name, fraction, ask, ask, pool, f"memoryFraction {fraction}")


def _fraction_words(t: Tenant) -> str:
    """Its fraction and the key that sets it."""
    if t.asks == "memoryFraction":
        return f"memoryFraction {t.fraction}"
    return f"--gpu-memory-utilization {t.fraction}, from its kvCacheGiB"


def _after(order: Sequence[Tenant]) -> str:
    return f"after {', '.join(f'{p.name} ({gib(p.total)} GiB)' for p in order)}, " if order else ""


def first_failure(order: Sequence[Tenant], total: int) -> str | None:
    """The first start of `order` that fails, in words; None when every one starts."""
    free = total
    for i, t in enumerate(order):
        if free < t.ask:
            return (
                f"{_after(order[:i])}{t.name} finds {gib(free)} GiB free and needs {gib(t.ask)} GiB "
                f"({_fraction_words(t)}): vLLM refuses to start ({REFUSED})"
            )
        if free < t.total:
            return (
                f"{_after(order[:i])}{t.name} finds {gib(free)} GiB free: it starts (needs {gib(t.ask)} GiB) but its "
                f"graph capture runs out of memory (needs {gib(t.total)} GiB, {gib(t.total - free)} GiB short)"
            )
        free -= t.total
    return None


def _last_start(order: Sequence[Tenant], total: int) -> str:
    """How the last start of an order that holds finds the card."""
    last, free = order[-1], total - sum(t.total for t in order[:-1])
    return (
        f"{_after(order[:-1])}{last.name} finds {gib(free)} GiB free and needs {gib(last.ask)} GiB to start, "
        f"{gib(last.total)} GiB with its NPU graphs"
    )


def spare(order: Sequence[Tenant], total: int) -> int:
    """What the tightest start of `order` finds free beyond what it needs (its fraction to start, then what it
    holds with its graphs); negative when a start fails."""
    free, least = total, total
    for t in order:
        least = min(least, free - max(t.ask, t.total))
        free -= t.total
    return least


def estimate_note(place: str, order: Sequence[Tenant], total: int) -> str | None:
    """The note for a card whose services all start in both orders counting an estimated graph pool: how
    much room is left, so a reader sees how far the estimates may be off, and how to measure them."""
    estimated = [t for t in order if t.pool.estimated]
    if not estimated:
        return None
    room = min(spare(order, total), spare(order[::-1], total))
    pools = ", ".join(f"{t.name} {gib(t.pool.bytes)} GiB" for t in estimated)
    return (
        f"{place}: graphMemoryGiB: its services start in both orders with {gib(room)} GiB to spare, counting "
        f"estimated NPU graph pools ({pools}); python -m allocation calibrate writes the measured ones"
    )


def card_warning(place: str, order: Sequence[Tenant], total: int) -> str | None:
    """The warning for the services of a card in start order; None when both orders start. It starts
    with `estimate:` when a graph pool it counts is an estimate."""
    forward, reverse = first_failure(order, total), first_failure(order[::-1], total)
    if forward is None and reverse is None:
        return None
    lead = ("estimate: " if any(t.pool.estimated for t in order) else "") + place
    services = ", ".join(t.words() for t in order)
    keys = sorted({t.asks for t in order}, reverse=True)  # memoryFraction first
    if forward is None:
        return (
            f"{lead}: {', '.join(keys)}: the start order (name order on the card) holds: {_last_start(order, total)}. "
            f"The reverse order fails: {reverse}. A service restarted while the others run starts last: keep the "
            f"start gate's order, or lower a {' or '.join(keys)} there. Its services: {services}, of the card's "
            f"{gib(total)} GiB"
        )
    other = f"fails too: {reverse}" if reverse is not None else f"holds: {_last_start(order[::-1], total)}"
    return (
        f"{lead}: {', '.join(keys)}, graphMemoryGiB: in the start order (name order on the card), {forward}. The "
        f"reverse order {other}. Its services hold {gib(sum(t.total for t in order))} GiB of the card's "
        f"{gib(total)} GiB, NPU graphs (captured after the KV cache, outside memoryFraction) included: {services}. "
        f"{ADVICE.format(keys=' or '.join(keys))}"
    )


def graph_room(host: Host, services: Sequence[ServicePlan]) -> Outcome[tuple[int, ...]]:
    """A warning for each group of shared cards (the same services, in name order) whose services do not
    all start, with their graphs, in start order or in its reverse; a note for each whose services do,
    counting an estimate (`estimate_note`). Its value: the shared cards not checked, for a service with
    neither `graphMemoryGiB` nor a profile."""
    total = runtime_total(host)
    if total is None:
        return Outcome(())  # the capacity check has said so
    groups: dict[tuple[str, ...], list[int]] = {}
    on_card: dict[tuple[str, ...], list[ServicePlan]] = {}
    for card in sorted({c for ps in services for c in ps.assignment.cards}):
        here = sorted((ps for ps in services if card in ps.assignment.cards), key=lambda ps: ps.name)
        versions = [ps.resolved.vllm_ascend_version for ps in here]
        if len(here) < 2 or any(v is not None and v < (0, 18) for v in versions):
            continue
        key = tuple(ps.name for ps in here)
        groups.setdefault(key, []).append(card)
        on_card[key] = here
    warnings, notes, unchecked = list[str](), list[str](), list[int]()
    for key, cards in groups.items():
        pools = [graph_pool(ps.instance) for ps in on_card[key]]
        if None in pools:
            unchecked += cards
            continue
        tenants = [tenant(ps, total, pool) for ps, pool in zip(on_card[key], pools) if pool is not None]
        warning = card_warning(where(host.name, cards), tenants, total)
        note = None if warning else estimate_note(where(host.name, cards), tenants, total)
        warnings += [warning] if warning else []
        notes += [note] if note else []
    return Outcome(tuple(sorted(unchecked)), warnings=tuple(warnings), notes=tuple(notes))
