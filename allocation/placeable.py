"""What the placer places and what it returns: a small protocol, and placements that hold references.

The placer (allocation.placement) and the port windows (allocation.ports) read only this of an
instance, so placement can be tested and measured on anything that answers it, and what it returns
holds the instance, its host and its cards, never a name to look up again. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Generic, Protocol, TypeVar

from allocation.config import Host
from allocation.windows import PortWindow, WindowKind


class Placeable(Protocol):
    """What placement reads of what it places (an `allocation.instance.Instance`): its name, memory
    fraction and tensor-parallel size, its ports (HCCL port ranges or the default NPU port, its
    pinned windows), whether it holds its cards alone, where it may go (a pinned host and cards, candidate hosts) and its group."""

    @property
    def name(self) -> str: ...
    @property
    def memory_fraction(self) -> Decimal | str:
        """A fraction by the time it is placed (`auto` is chosen before)."""
    @property
    def tp_size(self) -> int:
        """Cards in its tensor-parallel group, an aligned block on one host."""
    @property
    def hccl_ranges(self) -> bool:
        """It binds HCCL port ranges of its own; else it keeps HCCL's default NPU port and shares no card."""
    @property
    def alone(self) -> str | None:
        """What it is, in words for the operator, when it runs on the host network with HCCL on its cards (a
        multi-host member, a prefill or decode instance): it holds its cards alone (no other service, instance or
        member may use them) and takes only a host with an IP address for `HCCL_IF_IP`; None otherwise."""
    @property
    def host(self) -> str | None: ...
    @property
    def devices(self) -> list[int] | None: ...
    @property
    def allowed_hosts(self) -> list[str] | None:
        """The candidate hosts (`hosts`); None: any."""
    @property
    def group(self) -> str | None:
        """The replicated service whose replicas keep apart (never on one card, hosts spread); None alone."""
    @property
    def shard_key(self) -> str | None:
        """What must be deployed by one shard stack of a sharded fleet, as one name shared by its instances:
        a replicated service (its router), a disaggregated service (its proxy names every instance); None alone."""
    def pinned(self, kind: WindowKind, size: int) -> PortWindow | None: ...


P = TypeVar("P", bound=Placeable)


@dataclass(frozen=True)
class Placement(Generic[P]):
    """Where one instance goes: the instance, its host and its cards."""

    instance: P
    host: Host
    cards: tuple[int, ...]
    """Physical card indices, ascending."""
