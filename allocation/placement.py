"""Card placement: which host and which cards each service gets.

Services are placed largest first (pinned cards, then pinned hosts, then the
rest; within each, by tensor-parallel size and memory fraction, descending,
then by name), so the order of the YAML never matters. A pinned service
(`devices`) is taken to be running: a service without `devices` goes on a card
one holds only when no host in use (one that already holds a service) has an
aligned block without such cards that fits it, because a newcomer on a running
service's card means switching that card to device-share mode, which needs the
running service stopped. Among the blocks allowed it takes the one that leaves
the least memory unused (best fit); an auto-placed service goes to the first
host in use, by name, with such a block, else to the first host by name with
any block that fits. Memory is counted in exact integer units (see
`config.units`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from allocation.config import FRACTION_SCALE, FleetConfig, Host, Service, units

Block = tuple[int, ...]


def fmt_units(value: int) -> str:
    """0.85-style text for a memory amount in units."""
    text = f"{value / FRACTION_SCALE:.4f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


@dataclass
class Cards:
    """Working memory state of one host's cards while the plan is made."""

    host: Host
    budget: int
    free: list[int] = field(init=False)
    users: list[list[Service]] = field(init=False)

    def __post_init__(self) -> None:
        self.free = [self.budget] * self.host.npus
        self.users = [[] for _ in range(self.host.npus)]

    def alone(self, card: int) -> bool:
        """The card holds a service that shares it with no one: one with `hcclPortRanges: false`,
        or any service on a host with `cardSharing: refuse`."""
        if self.host.card_sharing == "refuse" and self.users[card]:
            return True
        return any(not s.hccl_port_ranges for s in self.users[card])

    def aligned_blocks(self, tp: int) -> list[Block]:
        return [tuple(range(start, start + tp)) for start in range(0, self.host.npus - tp + 1, tp)]

    def fits(self, block: Block, service: Service, avoid: frozenset[int] = frozenset()) -> bool:
        need = units(service.memory_fraction)
        if avoid.intersection(block) or (not service.hccl_port_ranges and any(self.users[c] for c in block)):
            return False
        return all(self.free[c] >= need and not self.alone(c) for c in block)

    @property
    def in_use(self) -> bool:
        """A service is placed here already."""
        return any(self.users)

    def held(self, card: int) -> bool:
        """A pinned service (`devices`) uses the card: it runs there, and putting another service
        beside it means switching the card to device-share mode, which needs it stopped."""
        return any(u.devices is not None for u in self.users[card])

    def best_block(self, service: Service, avoid: frozenset[int] = frozenset(), unheld: bool = False) -> Block | None:
        """The aligned block leaving the least memory unused, none of its cards in `avoid` (nor, with
        `unheld`, held by a pinned service); the lowest cards on a tie."""
        need = units(service.memory_fraction)
        fitting = [
            g
            for g in self.aligned_blocks(service.tensor_parallel_size)
            if self.fits(g, service, avoid) and not (unheld and any(self.held(c) for c in g))
        ]
        return min(fitting, key=lambda g: (sum(self.free[c] - need for c in g), g), default=None)

    def take(self, block: Block, service: Service) -> None:
        for c in block:
            self.free[c] -= units(service.memory_fraction)
            self.users[c].append(service)

    def capacity(self, tp: int, alone: bool, unheld: bool = False) -> int:
        """Largest memory fraction (units) a TP group of this size could still get here (with
        `unheld`: on cards no pinned service holds)."""
        best = -1
        for g in self.aligned_blocks(tp):
            if any(self.alone(c) or (unheld and self.held(c)) for c in g) or (alone and any(self.users[c] for c in g)):
                continue
            best = max(best, min(self.free[c] for c in g))
        return best

    def describe(self) -> str:
        """Free memory per card, for error messages: `0:0.05 1:0.05 ...`."""
        parts = []
        for c in range(self.host.npus):
            note = ""
            if self.alone(c):
                refused = self.host.card_sharing == "refuse"
                note = " (in use; cardSharing refuse)" if refused else " (held by a service with hcclPortRanges: false)"
            parts.append(f"{c}:{fmt_units(max(self.free[c], 0))}{note}")
        return " ".join(parts)


class LeftmostAtLeast:
    """Max segment tree over hosts: the first host (in name order) whose value is >= x.

    Keeps auto-placement first-fit across 1,000 hosts at O(log n) per service.
    """

    def __init__(self, values: list[int]) -> None:
        self.size = 1
        while self.size < len(values):
            self.size *= 2
        self.tree = [-1] * (2 * self.size)
        self.tree[self.size : self.size + len(values)] = values
        for i in range(self.size - 1, 0, -1):
            self.tree[i] = max(self.tree[2 * i], self.tree[2 * i + 1])

    def update(self, index: int, value: int) -> None:
        i = index + self.size
        self.tree[i] = value
        while i > 1:
            i //= 2
            self.tree[i] = max(self.tree[2 * i], self.tree[2 * i + 1])

    def first_at_least(self, x: int) -> int | None:
        if self.tree[1] < x:
            return None
        i = 1
        while i < self.size:
            i = 2 * i if self.tree[2 * i] >= x else 2 * i + 1
        return i - self.size


def _unheld_capacity(cards: Cards, tp: int, alone: bool) -> int:
    """The memory a TP group of this size could get on cards no pinned service holds, on a host
    in use; -1 when the host is empty or has no such block."""
    return cards.capacity(tp, alone, unheld=True) if cards.in_use else -1


def _order(service: Service) -> tuple:
    pin_rank = 0 if service.devices is not None else 1 if service.host is not None else 2
    return (pin_rank, -service.tensor_parallel_size, -units(service.memory_fraction), service.name)


def _need_text(service: Service) -> str:
    return (
        f"{service.tensor_parallel_size} card{'s' if service.tensor_parallel_size > 1 else ''} "
        f"with {service.memory_fraction} free each"
        + (" and no other service on them (hcclPortRanges: false)" if not service.hccl_port_ranges else "")
    )


class Placer:
    """Places every service of a fleet on cards; collects every problem instead of stopping.

    Replicas of one service (`replica_of`) go to the hosts with the fewest of its replicas first,
    so to hosts without one while one has room, and never on a sibling's card: losing a host or a
    card loses as few replicas as the fleet allows."""

    def __init__(self, fleet: FleetConfig, replica_of: Mapping[str, str] | None = None) -> None:
        self.replica_of = replica_of or {}
        self.siblings: dict[str, dict[str, set[int]]] = {}
        """Replicated service -> host -> cards its replicas hold there."""
        self.hosts = sorted(fleet.hosts, key=lambda h: h.name)
        self.cards = {h.name: Cards(h, units(fleet.budget(h))) for h in self.hosts}
        self.index = {h.name: i for i, h in enumerate(self.hosts)}
        self.trees: dict[tuple[int, bool], LeftmostAtLeast] = {}
        self.unheld_trees: dict[tuple[int, bool], LeftmostAtLeast] = {}
        self.problems: list[str] = []
        self.placed: dict[str, tuple[str, Block]] = {}
        self.max_budget = max(c.budget for c in self.cards.values())

    def run(self, services: list[Service]) -> dict[str, tuple[str, Block]]:
        for service in sorted(services, key=_order):
            self._place(service)
        return self.placed

    def _place(self, s: Service) -> None:
        need = units(s.memory_fraction)
        budget = self.cards[s.host].budget if s.host else self.max_budget
        if need > budget:
            where = f"host {s.host}" if s.host else "any host"
            self.problems.append(
                f"service {s.name}: memoryFraction {s.memory_fraction} is over the per-card "
                f"memory budget {fmt_units(budget)} of {where}"
            )
            return
        if s.devices is not None:
            self._place_pinned(s, tuple(sorted(s.devices)))
            return
        if s.host is None and (s.hosts is not None or s.name in self.replica_of):
            self._place_among(s)
            return
        if s.host is not None:
            cards = self.cards[s.host]
            choice = self._choose(s, [cards.host])
            if choice is None:
                self.problems.append(
                    f"host {s.host}: service {s.name} needs {_need_text(s)} (aligned); "
                    f"free per card: {cards.describe()}"
                )
                return
            self._commit(s, *choice)
            return
        tp, alone = s.tensor_parallel_size, not s.hccl_port_ranges
        i = self._unheld_tree(tp, alone).first_at_least(need)
        if i is not None:
            cards = self.cards[self.hosts[i].name]
            block = cards.best_block(s, unheld=True)
            assert block is not None, "Cards.capacity and Cards.fits disagree"
            self._commit(s, cards, block)
            return
        i = self._tree(tp, alone).first_at_least(need)
        if i is not None:
            cards = self.cards[self.hosts[i].name]
            block = cards.best_block(s)
            assert block is not None, "Cards.capacity and Cards.fits disagree"
            self._commit(s, cards, block)
            return
        shown = "; ".join(f"{h.name}: {self.cards[h.name].describe()}" for h in self.hosts[:5])
        more = f"; and {len(self.hosts) - 5} more hosts" if len(self.hosts) > 5 else ""
        self.problems.append(
            f"no host has room for service {s.name}, which needs {_need_text(s)} on one host "
            f"(aligned); free per card: {shown}{more}"
        )

    def _candidates(self, s: Service) -> list[Host]:
        if s.host:
            return [self.cards[s.host].host]
        return [h for h in self.hosts if h.name in s.hosts] if s.hosts else self.hosts

    def _avoid(self, s: Service, host: str) -> frozenset[int]:
        """The cards of `host` that other replicas of `s`'s service hold."""
        group = self.replica_of.get(s.name)
        return frozenset(self.siblings.get(group, {}).get(host, ())) if group else frozenset()

    def _place_among(self, s: Service) -> None:
        """A replica or a service limited to `hosts`: the first allowed host, by name, with room,
        among those with the fewest replicas of its service (none first), so replicas spread evenly."""
        candidates = self._candidates(s)
        group = self.siblings.get(self.replica_of.get(s.name, ""), {})
        held = {h.name: len(group.get(h.name, ())) for h in candidates}
        for fewest in sorted(set(held.values())):  # hosts with fewer replicas first, name order within
            choice = self._choose(s, [h for h in candidates if held[h.name] == fewest])
            if choice is not None:
                self._commit(s, *choice)
                return
        where = f"hosts {', '.join(h.name for h in candidates)}" if s.hosts else "any host"
        shown = "; ".join(f"{h.name}: {self.cards[h.name].describe()}" for h in candidates[:5])
        self.problems.append(
            f"no room for service {s.name} on {where}: it needs {_need_text(s)} on one host (aligned)"
            + (", on cards no other replica of its service uses" if s.name in self.replica_of else "")
            + f"; free per card: {shown}"
        )

    def _choose(self, s: Service, hosts: list[Host]) -> tuple[Cards, Block] | None:
        """Where `s` goes among `hosts` (in order of preference): the best-fitting block of cards no
        pinned service holds on the first host in use that has one; else the best-fitting block on the
        first host with room."""
        for host in hosts:
            cards = self.cards[host.name]
            block = cards.best_block(s, self._avoid(s, host.name), unheld=True) if cards.in_use else None
            if block is not None:
                return cards, block
        for host in hosts:
            cards = self.cards[host.name]
            block = cards.best_block(s, self._avoid(s, host.name))
            if block is not None:
                return cards, block
        return None

    def _place_pinned(self, s: Service, block: Block) -> None:
        for host in self._candidates(s):
            cards = self.cards[host.name]
            if max(block) < host.npus and cards.fits(block, s, self._avoid(s, host.name)):
                self._commit(s, cards, block)
                return
        where = f"host {s.host}" if s.host else "any host"
        details = []
        for host in self._candidates(s)[:5]:
            cards = self.cards[host.name]
            for c in block:
                if c >= host.npus:
                    continue
                if c in self._avoid(s, host.name):
                    details.append(
                        f"{host.name} card {c} is held by another replica of {self.replica_of[s.name]}; "
                        "replicas never share a card"
                    )
                elif host.card_sharing == "refuse" and cards.users[c]:
                    others = ", ".join(u.name for u in cards.users[c])
                    details.append(
                        f"{host.name} card {c} is used by {others} and the host has cardSharing refuse, "
                        f"so {s.name} cannot share it (give it other devices, or set cardSharing to "
                        "deviceShare or privileged)"
                    )
                elif cards.alone(c) or (not s.hccl_port_ranges and cards.users[c]):
                    others = ", ".join(u.name for u in cards.users[c])
                    details.append(
                        f"{host.name} card {c} is held by {others}; a service without HCCL port "
                        f"ranges keeps port 16666 and cannot share a card"
                    )
                elif cards.free[c] < units(s.memory_fraction):
                    used = " + ".join(f"{u.memory_fraction} ({u.name})" for u in cards.users[c])
                    total = fmt_units(cards.budget - cards.free[c] + units(s.memory_fraction))
                    details.append(
                        f"{host.name} card {c}: {used} + {s.memory_fraction} ({s.name}) = {total} "
                        f"is over the per-card budget {fmt_units(cards.budget)}"
                    )
        self.problems.append(
            f"service {s.name}: pinned devices {list(block)} do not fit on {where}: "
            + ("; ".join(details) if details else "no host has that many cards")
        )

    def _commit(self, s: Service, cards: Cards, block: Block) -> None:
        cards.take(block, s)
        self.placed[s.name] = (cards.host.name, block)
        if s.name in self.replica_of:
            self.siblings.setdefault(self.replica_of[s.name], {}).setdefault(cards.host.name, set()).update(block)
        i = self.index[cards.host.name]
        for (tp, alone), tree in self.trees.items():
            tree.update(i, cards.capacity(tp, alone))
        for (tp, alone), tree in self.unheld_trees.items():
            tree.update(i, _unheld_capacity(cards, tp, alone))

    def _unheld_tree(self, tp: int, alone: bool) -> LeftmostAtLeast:
        """Hosts by the memory a block of `tp` cards no pinned service holds offers, if in use."""
        key = (tp, alone)
        if key not in self.unheld_trees:
            values = [_unheld_capacity(self.cards[h.name], tp, alone) for h in self.hosts]
            self.unheld_trees[key] = LeftmostAtLeast(values)
        return self.unheld_trees[key]

    def _tree(self, tp: int, alone: bool) -> LeftmostAtLeast:
        key = (tp, alone)
        if key not in self.trees:
            self.trees[key] = LeftmostAtLeast([self.cards[h.name].capacity(tp, alone) for h in self.hosts])
        return self.trees[key]
