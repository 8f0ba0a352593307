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

from allocation.config import Host, Ports, PortRange, Service
from allocation.plan import HCCL_DEFAULT_NPU_PORT, HCCL_IF_WINDOW, Assignment, PortSpan, span_text

MAX_PORT = 65535
SOCKET_RANGE_KEYS = ("hcclNpuSocketPortRange", "hcclHostSocketPortRange")


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


def _pins(s: Service, policy: Ports) -> dict[str, PortSpan | None]:
    """The windows a service pins, by config key; None where the allocator chooses."""

    def window(first: int | None, size: int) -> PortSpan | None:
        return (first, first + size - 1) if first else None

    def span(r: PortRange | None) -> PortSpan | None:
        return (r.first, r.last) if r else None

    return {
        "apiPort": window(s.api_port, 1),
        "hcclNpuSocketPortRange": span(s.hccl_npu_socket_port_range),
        "hcclHostSocketPortRange": span(s.hccl_host_socket_port_range),
        "hcclIfBasePort": window(s.hccl_if_base_port, HCCL_IF_WINDOW),
        "vllmPort": window(s.vllm_port, policy.vllm_count),
    }


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
) -> list[Assignment]:
    """Port windows for the services placed on one host; problems are appended, not raised."""
    taken = Occupied()

    def claim(first: int, last: int, owner: str) -> None:
        other = taken.clash(first, last)
        if other is not None:
            problems.append(
                f"host {host.name}: {owner} {span_text((first, last))} overlaps "
                f"{other[2]} {span_text(other[:2])}"
            )
        else:
            taken.add(first, last, owner)

    for first, last in _merged([*policy.reserved, *host.reserved_ports]):
        taken.add(first, last, "reserved ports")
    placed = sorted(placed, key=lambda p: p[0].name)
    if any(not s.hccl_port_ranges for s, _ in placed):
        claim(
            HCCL_DEFAULT_NPU_PORT,
            HCCL_DEFAULT_NPU_PORT,
            "HCCL's default NPU port (kept by services with hcclPortRanges: false)",
        )
    windows: dict[str, dict[str, PortSpan | None]] = {}
    for s, _ in placed:
        windows[s.name] = pins = _pins(s, policy)
        for key, span in pins.items():
            if span is not None:
                claim(*span, f"{key} of {s.name}")

    sizes = {
        "apiPort": (policy.api_base, 1),
        "hcclNpuSocketPortRange": (policy.hccl_npu_socket_base, policy.hccl_npu_socket_count),
        "hcclHostSocketPortRange": (policy.hccl_host_socket_base, policy.hccl_host_socket_count),
        "hcclIfBasePort": (policy.hccl_if_base, HCCL_IF_WINDOW),
        "vllmPort": (policy.vllm_base, policy.vllm_count),
    }
    out = []
    for s, devices in placed:
        spans = windows[s.name]
        for key, (base, size) in sizes.items():
            if spans[key] is not None or (key in SOCKET_RANGE_KEYS and not s.hccl_port_ranges):
                continue
            span = taken.first_free(base, size)
            if span is None:
                problems.append(
                    f"host {host.name}: no free block of {size} port(s) from {base} up to {MAX_PORT} "
                    f"for {key} of {s.name}; lower ascend-fleet:ports or free reserved ports"
                )
                span = (0, 0)
            else:
                taken.add(*span, f"{key} of {s.name}")
            spans[key] = span
        out.append(
            Assignment(
                host=host.name,
                devices=devices,
                api_port=spans["apiPort"][0],
                hccl_npu_socket_port_range=spans["hcclNpuSocketPortRange"],
                hccl_host_socket_port_range=spans["hcclHostSocketPortRange"],
                hccl_if_base_port=spans["hcclIfBasePort"][0],
                vllm_port=spans["vllmPort"][0],
                vllm_port_count=policy.vllm_count,
            )
        )
    return out
