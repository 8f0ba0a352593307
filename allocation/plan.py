"""The plan: what the allocator decided for every service, frozen.

A plan is made once for the whole stack; each Pulumi component, exporter and
`doctor` check receives its own `PlannedService` slice and never allocates.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from allocation.config import FleetConfig, Host, Service

# HCCL takes this many consecutive host ports from HCCL_IF_BASE_PORT (32 in
# current CANN; 16 in older docs, so 32 is the safe reservation).
HCCL_IF_WINDOW = 32
# HCCL's NPU-side port when HCCL_NPU_SOCKET_PORT_RANGE is unset.
HCCL_DEFAULT_NPU_PORT = 16666

PortSpan = tuple[int, int]


def span_text(span: PortSpan) -> str:
    """`16666-16681`, or `7007` for a single port: how messages name a window."""
    return f"{span[0]}-{span[1]}" if span[0] != span[1] else str(span[0])


@dataclass(frozen=True)
class Assignment:
    """The resources the allocator gives one service: cards on one host and port windows."""

    host: str
    devices: tuple[int, ...]
    api_port: int
    hccl_npu_socket_port_range: PortSpan | None
    hccl_host_socket_port_range: PortSpan | None
    hccl_if_base_port: int
    vllm_port: int
    vllm_port_count: int

    def windows(self) -> list[tuple[str, PortSpan]]:
        """Every port window the service binds on its host, named by its config key."""
        out = [("apiPort", (self.api_port, self.api_port))]
        if self.hccl_npu_socket_port_range:
            out.append(("hcclNpuSocketPortRange", self.hccl_npu_socket_port_range))
        if self.hccl_host_socket_port_range:
            out.append(("hcclHostSocketPortRange", self.hccl_host_socket_port_range))
        out.append(("hcclIfBasePort", (self.hccl_if_base_port, self.hccl_if_base_port + HCCL_IF_WINDOW - 1)))
        out.append(("vllmPort", (self.vllm_port, self.vllm_port + self.vllm_port_count - 1)))
        return out


@dataclass(frozen=True)
class PlannedService:
    """One service's configuration together with its assignment."""

    service: Service
    assignment: Assignment

    @property
    def name(self) -> str:
        return self.service.name

    def to_json(self) -> dict[str, Any]:
        a = self.assignment
        return {
            "name": self.name,
            "host": a.host,
            "devices": list(a.devices),
            "tensorParallelSize": self.service.tensor_parallel_size,
            "memoryFraction": float(self.service.memory_fraction),
            "apiPort": a.api_port,
            "hcclNpuSocketPortRange": _span(a.hccl_npu_socket_port_range),
            "hcclHostSocketPortRange": _span(a.hccl_host_socket_port_range),
            "hcclIfBasePort": a.hccl_if_base_port,
            "vllmPort": a.vllm_port,
        }


def _span(span: PortSpan | None) -> list[int] | None:
    return list(span) if span else None


@dataclass(frozen=True)
class HostPlan:
    host: Host
    budget: Decimal
    services: tuple[PlannedService, ...]
    """Sorted by service name."""

    def card_load(self) -> dict[int, list[PlannedService]]:
        """Services per card, every card of the host present."""
        load: dict[int, list[PlannedService]] = {c: [] for c in range(self.host.npus)}
        for ps in self.services:
            for card in ps.assignment.devices:
                load[card].append(ps)
        return load


@dataclass(frozen=True)
class Plan:
    fleet: FleetConfig
    hosts: tuple[HostPlan, ...]
    """Sorted by host name; every configured host, used or not."""

    @property
    def stack(self) -> str:
        return self.fleet.stack

    def services(self) -> list[tuple[HostPlan, PlannedService]]:
        return [(hp, ps) for hp in self.hosts for ps in hp.services]
