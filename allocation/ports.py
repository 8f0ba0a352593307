"""Port windows: every port a service binds on its host, disjoint from every other.

HCCL does not step aside when a port is taken: two instances whose windows
overlap fail with `Socket bind failed, address already in use`. So on each
host, all windows of all services (API port, both HCCL socket ranges, the
32-port HCCL_IF_BASE_PORT window, the VLLM_PORT block) and the reserved ports
are pairwise disjoint, whatever their kind. The NPU-side range would only need
to be disjoint per card; host-wide is the simple, always-safe rule.

Pins are laid down first; the rest is handed out in service-name order, each
kind from its own base in aligned blocks (16666-16681, 16682-16697, ...).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Sequence

from allocation.config import Host, Ports, PortRange, Service
from allocation.plan import Assignment
from allocation.windows import API, ROUTER_KEYS, HCCL_DEFAULT_NPU_PORT, KINDS, MAX_PORT, PortSpan, span_text


@dataclass
class Occupied:
    """Sorted, non-overlapping taken windows of one host, each with its owner."""

    starts: list[int] = field(default_factory=list)
    spans: list[tuple[int, int, str]] = field(default_factory=list)

    def clash(self, first: int, last: int) -> tuple[int, int, str] | None:
        i = bisect.bisect_right(self.starts, last)
        if i and self.spans[i - 1][1] >= first:
            return self.spans[i - 1]
        return None

    def add(self, first: int, last: int, owner: str) -> None:
        i = bisect.bisect_left(self.starts, first)
        self.starts.insert(i, first)
        self.spans.insert(i, (first, last, owner))

    def first_free(self, base: int, size: int) -> PortSpan | None:
        """The first aligned block of `size` ports from `base` that touches nothing taken."""
        first = base
        while first + size - 1 <= MAX_PORT:
            taken = self.clash(first, first + size - 1)
            if taken is None:
                return first, first + size - 1
            # Jump past the obstacle, staying on the block grid.
            first += ((taken[1] - first) // size + 1) * size
        return None


def _merged(ranges: list[PortRange]) -> list[PortSpan]:
    out: list[list[int]] = []
    for r in sorted(ranges, key=lambda r: (r.first, r.last)):
        if out and r.first <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], r.last)
        else:
            out.append([r.first, r.last])
    return [(a, b) for a, b in out]


def assign_ports(
    host: Host,
    placed: list[tuple[Service, tuple[int, ...]]],
    policy: Ports,
    problems: list[str],
    routers: Sequence[Service] = (),
    exporter_port: int | None = None,
) -> tuple[list[Assignment], dict[str, tuple[int, int]]]:
    """Port windows for the services placed on one host, and the port and metrics port of each
    router on it (by replicated service), taken like API ports after every service's windows, so
    a new router moves no service. `exporter_port`, the host's NPU exporter, is taken first like a
    reserved port. Problems are appended, not raised."""
    taken = Occupied()

    def claim(span: PortSpan, owner: str) -> None:
        other = taken.clash(*span)
        if span[1] > MAX_PORT:
            problems.append(f"host {host.name}: {owner} {span_text(span)} runs past port {MAX_PORT}")
        elif other is not None:
            problems.append(f"host {host.name}: {owner} {span_text(span)} overlaps {other[2]} {span_text(other[:2])}")
        else:
            taken.add(*span, owner)

    for first, last in _merged([*policy.reserved, *host.reserved_ports]):
        taken.add(first, last, "reserved ports")
    if exporter_port is not None and taken.clash(exporter_port, exporter_port) is None:
        taken.add(exporter_port, exporter_port, "the NPU exporter's port (ascend-fleet:metrics.npuExporterPort)")
    placed = sorted(placed, key=lambda p: p[0].name)
    if any(not s.hccl_port_ranges for s, _ in placed):
        owner = "HCCL's default NPU port (kept by services with hcclPortRanges: false)"
        claim((HCCL_DEFAULT_NPU_PORT, HCCL_DEFAULT_NPU_PORT), owner)
    windows: dict[str, dict[str, PortSpan]] = {s.name: {} for s, _ in placed}
    for s, _ in placed:
        for kind in KINDS:
            span = s.pinned(kind, policy.size(kind))
            if span is not None:
                windows[s.name][kind.key] = span
                claim(span, f"{kind.key} of {s.name}")
    # Routers' pins are pins too: laid down before anything is handed out.
    router_pins = {s.name: (s.router_port, s.router_metrics_port) for s in sorted(routers, key=lambda s: s.name)}
    for name, pair in router_pins.items():
        for key, pin in zip(ROUTER_KEYS, pair):
            if pin is not None:
                claim((pin, pin), f"{key} of {name}")
    for s, _ in placed:
        for kind in KINDS:
            if kind.key in windows[s.name] or (kind.hccl_range and not s.hccl_port_ranges):
                continue
            base, size = policy.base(kind), policy.size(kind)
            span = taken.first_free(base, size)
            if span is None:
                problems.append(
                    f"host {host.name}: no free block of {size} port(s) from {base} up to {MAX_PORT} "
                    f"for {kind.key} of {s.name}; lower ascend-fleet:ports.{kind.base_key} or free reserved ports"
                )
                continue
            taken.add(*span, f"{kind.key} of {s.name}")
            windows[s.name][kind.key] = span
    assignments = [Assignment(host.name, cards, MappingProxyType(windows[s.name])) for s, cards in placed]
    return assignments, _router_ports(host, router_pins, policy, taken, problems)


def _router_ports(
    host: Host, pins: dict[str, tuple[int | None, int | None]], policy: Ports, taken: Occupied, problems: list[str]
) -> dict[str, tuple[int, int]]:
    """Each router's two ports: its pins (already taken), else the first free ports from `apiBase`."""
    out: dict[str, tuple[int, int]] = {}
    for name, pair in pins.items():
        ports = []
        for key, pin in zip(ROUTER_KEYS, pair):
            span = (pin, pin) if pin is not None else taken.first_free(policy.base(API), 1)
            if span is None:
                problems.append(f"host {host.name}: no free port from {policy.base(API)} for {key} of {name}")
                break
            if pin is None:
                taken.add(*span, f"{key} of {name}")
            ports.append(span[0])
        else:
            out[name] = (ports[0], ports[1])
    return out
