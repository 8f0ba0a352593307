"""A multi-host service as the planner places it: one group, one member per host.

A service with `dataParallel` is one object, as Kubernetes' LeaderWorkerSet describes a multi-node
instance (kubernetes-sigs/lws `api/leaderworkerset/v1/leaderworkerset_types.go`: one spec with a
`size`, a leader and workers derived from it and named by index) and as Ray reserves a placement
group's bundles all at once or not at all (ray-project/ray `python/ray/util/placement_group.py`).
Its members are derived from it, never declared one by one: member 0 is the leader, which serves
the API; member i runs data-parallel ranks `i x perHost` to `(i + 1) x perHost - 1` `--headless`.
The placer places a group's members together or refuses the group (`allocation.placement`); the
plan holds one `GroupPlan` whose members each reference it. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property

from allocation import names
from allocation.config import ContainerSettings, MemberPins, Service
from allocation.resolved import Resolved, resolve
from allocation.windows import DP_RPC, LEADER_KINDS, MEMBER_KINDS, PortWindow, WindowKind


@dataclass(frozen=True)
class Member:
    """One host's share of a multi-host service: `perHost` data-parallel ranks on an aligned block of
    `perHost` x `tensorParallelSize` cards, which it holds alone. It answers the placement protocol
    (`allocation.placeable.Placeable`) and the capacity check as an instance does."""

    service: Service
    """As configured; it has `dataParallel`."""
    resolved: Resolved
    index: int
    """0 for the leader, then 1, 2... in member order."""

    @cached_property
    def name(self) -> str:
        return names.member_name(self.service.name, self.index)

    @property
    def previous_names(self) -> tuple[str, ...]:
        """Its names under the service's previous names, oldest first."""
        return tuple(names.member_name(p, self.index) for p in self.service.previous_names or ())

    @property
    def leader(self) -> bool:
        """It serves the API and the other members join it."""
        return self.index == 0

    @property
    def ranks(self) -> range:
        """Its data-parallel ranks: `--data-parallel-start-rank` and the `perHost` after it."""
        per_host = self._dp.per_host
        return range(self.index * per_host, (self.index + 1) * per_host)

    @property
    def _dp(self):
        assert self.service.data_parallel is not None
        return self.service.data_parallel

    @property
    def memory_fraction(self) -> Decimal:
        """`--gpu-memory-utilization` on each of its cards (`auto` is refused for a multi-host service)."""
        assert isinstance(self.service.memory_fraction, Decimal)
        return self.service.memory_fraction

    @property
    def tp_size(self) -> int:
        """The cards it takes on its host, one aligned block: its ranks' tensor-parallel groups side by
        side (vLLM gives local rank k the k-th `tensorParallelSize` of the visible cards)."""
        return self._dp.per_host * self.service.tensor_parallel_size

    @property
    def expert_parallel_size(self) -> int:
        """The cards the experts of each MoE layer are split over: every card of every rank with
        `expertParallel`, else the rank's tensor-parallel group (vllm@0.20.2 `config/parallel.py`)."""
        tp = self.service.tensor_parallel_size
        return tp * self._dp.size if self._dp.expert_parallel else tp

    @property
    def hccl_ranges(self) -> bool:
        return self.service.hccl_port_ranges

    @property
    def alone(self) -> str:
        """It holds its block alone: its ranks' HCCL and DP traffic run on the host network, over its cards."""
        return "a member of a multi-host service"

    @cached_property
    def pins(self) -> MemberPins:
        pins = self._dp.member_pins or ()
        return pins[self.index] if self.index < len(pins) else MemberPins()

    @property
    def host(self) -> str | None:
        return self.pins.host

    @property
    def devices(self) -> list[int] | None:
        return self.pins.devices

    @property
    def allowed_hosts(self) -> list[str] | None:
        return self.service.hosts

    @property
    def group(self) -> None:
        """No replicas: a member's siblings are its group's other members, placed together."""
        return None

    @property
    def shard_key(self) -> None:
        """Its group is placed in one shard as a whole (`allocation.placement`, the hosts' kind)."""
        return None

    def pinned(self, kind: WindowKind, size: int) -> PortWindow | None:
        return self.pins.pinned(kind, size) if kind in MEMBER_KINDS else None

    def kinds(self, members: int) -> tuple[WindowKind, ...]:
        """The windows it binds on its host, in a group of `members`: the leader's API port, and its DP
        RPC port when others join it (with one host, vLLM's handshake stays local: `launch_core_engines`,
        `handshake_local_only`); every member's HCCL windows."""
        leader = tuple(k for k in MEMBER_KINDS if k.key in LEADER_KINDS and (k is not DP_RPC or members > 1))
        return (*(leader if self.leader else ()), *(k for k in MEMBER_KINDS if k.key not in LEADER_KINDS))


@dataclass(frozen=True)
class Group:
    """A multi-host service: its members, the leader first. Placed as one (`allocation.placement`)."""

    service: Service
    members: tuple[Member, ...]

    @property
    def name(self) -> str:
        return self.service.name

    @property
    def leader(self) -> Member:
        return self.members[0]

    # What the placer orders a group by, as it orders instances (`allocation.placement._order`).
    @property
    def devices(self) -> list[int] | None:
        return next((m.devices for m in self.members if m.devices is not None), None)

    @property
    def host(self) -> str | None:
        return next((m.host for m in self.members if m.host is not None), None)

    @property
    def memory_fraction(self) -> Decimal:
        return self.leader.memory_fraction

    @property
    def tp_size(self) -> int:
        return self.leader.tp_size


def groups_of(services: list[Service], defaults: ContainerSettings) -> list[Group]:
    """The group of every multi-host service, by service name, its settings resolved over `defaults`."""
    out = []
    for s in sorted((s for s in services if s.data_parallel is not None), key=lambda s: s.name):
        resolved = resolve(s, defaults)
        assert s.data_parallel is not None
        out.append(Group(s, tuple(Member(s, resolved, i) for i in range(s.data_parallel.hosts))))
    return out
