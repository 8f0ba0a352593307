"""The placer places anything that answers its small protocol (allocation.placeable.Placeable) and
returns placements holding that very object, its host and its cards: no name to look up again."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from allocation.instance import instances
from allocation.placement import Placer
from allocation.windows import PortWindow, WindowKind
from tests.support.stacks import fleet, host, service


@dataclass(frozen=True)
class Job:
    """A stand-in for an instance: only what the protocol asks."""

    name: str
    memory_fraction: Decimal = Decimal("0.5")
    tp_size: int = 1
    hccl_ranges: bool = True
    alone: str | None = None
    host: str | None = None
    devices: list[int] | None = None
    allowed_hosts: list[str] | None = None
    group: str | None = None

    @property
    def shard_key(self) -> str | None:
        return self.group

    def pinned(self, kind: WindowKind, size: int) -> PortWindow | None:
        return None


def _fleet():
    return fleet([host("npu-a"), host("npu-b")], [service("unused")])


def test_a_placement_holds_the_object_placed_its_host_and_its_cards():
    job, values = Job("a", tp_size=2), _fleet()
    (placement,) = Placer(values).run([job]).value
    assert placement.instance is job
    assert placement.host is next(h for h in values.hosts if h.name == "npu-a")
    assert placement.cards == (0, 1)


def test_one_group_spreads_over_hosts_and_never_shares_a_card_without_a_name_map():
    jobs = [Job(f"r{i}", Decimal("0.3"), group="r") for i in range(3)]
    placed = Placer(_fleet()).run(jobs).value
    where = {p.instance.name: (p.host.name, p.cards) for p in placed}
    assert {h for h, _ in where.values()} == {"npu-a", "npu-b"}, "the group spreads over both hosts"
    held = [(h, c) for h, cards in where.values() for c in cards]
    assert len(held) == len(set(held)), "no two of the group on one card"
    alone = Placer(_fleet()).run([Job(f"s{i}", Decimal("0.3")) for i in range(3)]).value
    assert {p.host.name for p in alone} == {"npu-a"}, "without a group they pack onto the first host"


def test_the_instances_of_a_replicated_service_are_a_group_and_a_service_of_its_own_is_none():
    values = fleet([host("npu-a")], [service("bge", replicas=2), service("solo")])
    groups = {i.name: i.group for s in values.services for i in instances(s, values.defaults)}
    assert groups == {"bge-1": "bge", "bge-2": "bge", "solo": None}
