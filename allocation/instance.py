"""Instance: one container's worth of a configured service.

A service of its own (`replicas: 1`) has one instance, named after it. A replicated service has
one per replica, `<name>-1` ... `<name>-N`, each with that replica's pins (`replicaPins`) and the
names it had under the service's previous names. The service travels with each instance as
configured, so nothing downstream rebuilds a service under a replica's name, and the planner,
`pin`, the diff and the exporters all ask an instance, not a copy, which service it serves.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from decimal import Decimal

from allocation import names
from allocation.config import ContainerSettings, ReplicaPins, Service
from allocation.resolved import Resolved, resolve
from allocation.windows import PortWindow, WindowKind


@dataclass(frozen=True)
class Instance:
    """One container of `service`: the service itself (`index` 0) or its replica number `index`.
    Its name and pins are worked out once (`cached_property`): placement asks for them often."""

    service: Service
    """As configured; `memoryFraction` may be `auto`."""
    resolved: Resolved
    """The service's settings over the defaults."""
    memory_fraction: Decimal | str
    """The fraction it runs with: the configured one, or the one `auto` or `kvCacheGiB` chose for this
    instance (`auto` only until the planner has chosen, in `allocation.planner`)."""
    index: int = 0
    """1 to `replicas` for a replica; 0 for a service of its own."""

    @property
    def replica_of(self) -> str:
        """The configured service this is an instance of: a replica's service, or a service of its own
        itself. The plan JSON's `replicaOf` and Prometheus's `replica_of` label carry it."""
        return self.service.name

    @property
    def kind(self) -> str:
        """The plan JSON's `kind`: `replica`, or `service` for a service of its own."""
        return names.instance_kind(self.index)

    @cached_property
    def name(self) -> str:
        return names.instance_name(self.service.name, self.index)

    @cached_property
    def previous_names(self) -> tuple[str, ...]:
        """Its names under the service's previous names, oldest first."""
        return names.previous_instance_names(self.service.previous_names, self.index)

    @property
    def original_name(self) -> str:
        """The name its container was created with and keeps across renames."""
        return names.original_name(self.name, self.previous_names)

    @property
    def served_model_name(self) -> str:
        """`--served-model-name`: behind a router every replica answers to the service's model name."""
        return self.service.served_model_name or self.service.original_name

    @property
    def auto_fraction(self) -> bool:
        """The configured fraction was `auto`; `memory_fraction` is the one chosen."""
        return self.service.memory_fraction == "auto"

    @cached_property
    def pins(self) -> Service | ReplicaPins:
        """Where its host, cards and windows are pinned: the service, or its replica's `replicaPins` entry."""
        if not self.index:
            return self.service
        pins = self.service.replica_pins or ()
        return pins[self.index - 1] if self.index <= len(pins) else ReplicaPins()

    @cached_property
    def host(self) -> str | None:
        return self.pins.host

    @cached_property
    def devices(self) -> list[int] | None:
        return self.pins.devices

    def pinned(self, kind: WindowKind, size: int) -> PortWindow | None:
        return self.pins.pinned(kind, size)

    # The rest of the placement protocol (allocation.placement.Placeable), in its words: the same for
    # each instance of a service. Sizing reads the service itself.
    @property
    def tp_size(self) -> int:
        return self.service.tensor_parallel_size

    @property
    def hccl_ranges(self) -> bool:
        return self.service.hccl_port_ranges

    @property
    def alone(self) -> str | None:
        """A service's instance may share its cards (within `cardSharing`, and with HCCL port ranges)."""
        return None

    @property
    def expert_parallel_size(self) -> int:
        """The cards each MoE layer's experts are split over: its tensor-parallel group."""
        return self.service.tensor_parallel_size

    @property
    def allowed_hosts(self) -> list[str] | None:
        return self.service.hosts

    @property
    def group(self) -> str | None:
        """A replica's service, whose replicas keep apart; None for a service of its own."""
        return self.service.name if self.index else None

    @property
    def shard_key(self) -> str | None:
        """Its replicas go to one shard, with their router."""
        return self.group


def instances(service: Service, defaults: ContainerSettings) -> list[Instance]:
    """The instances of a configured service, in replica order, its settings resolved over `defaults`."""
    resolved, fraction = resolve(service, defaults), service.memory_fraction
    return [Instance(service, resolved, fraction, i) for i in names.instance_indexes(service.replicas)]
