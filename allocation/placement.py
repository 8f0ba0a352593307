"""Card placement: which host and which cards each service gets.

Services are placed largest first (pinned cards, then pinned hosts, then the
rest; within each, by memory fraction, then tensor-parallel size, descending,
then by name), so the order of the YAML never matters. Fraction first is
first-fit decreasing by the size of the slot each service takes on each of its
cards: the large slots claim cards while they are empty and the small ones fill
what is left, which `benchmarks/plan_bench.py` measures against an exact
card-level lower bound (at 1,000 hosts it cut the gap by about 40% compared
with TP first).

A pinned service (`devices`) is taken to be running: a service without
`devices` goes on a card one holds only when no host in use (one that already
holds a service) has an aligned block without such cards that fits it, because
a newcomer on a running service's card means switching that card to
device-share mode, which needs the running service stopped. Among the blocks
allowed it takes the one that leaves the least memory unused (best fit); an
auto-placed service goes to the first host in use, by name, with such a block,
else to the first host by name with any block that fits. Memory is counted in
exact integer units (see `config.units`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from allocation.config import FRACTION_SCALE, FleetConfig, Host, units
from allocation.group import Group, Member
from allocation.outcome import Outcome
from allocation.ports import PinnedPorts
from allocation.placeable import P, Placeable, Placement
from allocation.windows import KINDS

Block = tuple[int, ...]
NO_NIC = "no IP address for HCCL_IF_IP (set its nic.address)"
"""Why a host takes no member nor prefill or decode instance: its `nic.address`, else its `address`, is no IP address."""


def fmt_units(value: int) -> str:
    """0.85-style text for a memory amount in units."""
    text = f"{value / FRACTION_SCALE:.4f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


@dataclass
class Cards:
    """Working memory state of one host's cards while the plan is made.

    Cards only ever gain services while a plan is made, so what each card's services imply
    (`sole`, `pinned`) is kept up to date by `take` instead of being recounted on every question."""

    host: Host
    budget: int
    ports: PinnedPorts | None = None
    """The windows pinned here so far; None when ports play no part (`benchmarks/plan_bench.py`)."""
    free: list[int] = field(init=False)
    users: list[list[Placeable]] = field(init=False)
    sole: list[bool] = field(init=False)
    """Per card: it holds a service that shares it with no one (see `alone`)."""
    pinned: list[bool] = field(init=False)
    """Per card: a pinned service holds it (see `held`)."""
    in_use: bool = field(init=False, default=False)
    """A service is placed here already."""
    _views: dict[tuple[bool, bool], list[int]] = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.free = [self.budget] * self.host.npus
        self.users = [[] for _ in range(self.host.npus)]
        self.sole = [False] * self.host.npus
        self.pinned = [False] * self.host.npus

    def alone(self, card: int) -> bool:
        """The card holds a service that shares it with no one: one with `hcclPortRanges: false`, one
        that holds its cards alone (`Placeable.alone`), or any service on a host with `cardSharing: refuse`."""
        return self.sole[card]

    def held(self, card: int) -> bool:
        """A pinned service (`devices`) uses the card: it runs there, and putting another service
        beside it means switching the card to device-share mode, which needs it stopped."""
        return self.pinned[card]

    def aligned_blocks(self, tp: int) -> list[Block]:
        return [tuple(range(start, start + tp)) for start in range(0, self.host.npus - tp + 1, tp)]

    def refusal(self, card: int, service: Placeable, avoid: frozenset[int] = frozenset(), group: str = "") -> str | None:
        """Why `card` cannot take `service`, in words for the operator; None when it can. This is
        the fit rule: every placement asks it, and a pinned service that does not fit is told its
        answer. `avoid`: cards other replicas of its service (`group`) hold."""
        users = self.users[card]
        if card in avoid:
            return f"{self.host.name} card {card} is held by another replica of {group}; replicas never share a card"
        if users and self.host.card_sharing == "refuse":
            return (
                f"{self.host.name} card {card} is used by {_names(users)} and the host has cardSharing refuse, "
                f"so {service.name} cannot share it (give it other devices, or set cardSharing to "
                "deviceShare or privileged)"
            )
        holder = next((u for u in users if u.alone), None)
        if holder is not None:
            return f"{self.host.name} card {card} is held by {holder.name}, {holder.alone}, which holds its cards alone"
        if users and service.alone:
            return (
                f"{self.host.name} card {card} is used by {_names(users)}, and {service.name}, {service.alone}, "
                "holds its cards alone (give it other devices)"
            )
        if self.sole[card] or (users and not service.hccl_ranges):
            return (
                f"{self.host.name} card {card} is held by {_names(users)}; a service without HCCL port "
                "ranges keeps port 16666 and cannot share a card"
            )
        need = units(service.memory_fraction)
        if self.free[card] < need:
            used = " + ".join(f"{u.memory_fraction} ({u.name})" for u in users)
            total = fmt_units(self.budget - self.free[card] + need)
            return (
                f"{self.host.name} card {card}: {used} + {service.memory_fraction} ({service.name}) = {total} "
                f"is over the per-card budget {fmt_units(self.budget)}"
            )
        return None

    def fits(self, block: Block, service: Placeable, avoid: frozenset[int] = frozenset()) -> bool:
        """`refusal` is None for every card of `block`: its tests without its words (placement asks
        this for every block of every candidate host)."""
        need = units(service.memory_fraction)
        apart = self.host.card_sharing == "refuse" or keeps_apart(service)
        for c in block:
            if c in avoid or self.sole[c] or self.free[c] < need or (apart and self.users[c]):
                return False
        return True

    def port_refusal(self, service: Placeable) -> str | None:
        """Why the host cannot take `service` for a window it pins (or HCCL's default NPU port it
        keeps); None when it can. Only a service bound to ports (`binds_ports`) can be refused."""
        return self.ports.refusal(service) if self.ports is not None and binds_ports(service) else None

    def best_block(self, service: Placeable, avoid: frozenset[int] = frozenset(), unheld: bool = False) -> Block | None:
        """The aligned block leaving the least memory unused, none of its cards in `avoid` (nor, with
        `unheld`, held by a pinned service); the lowest cards on a tie."""
        if self.port_refusal(service) is not None:
            return None
        need = units(service.memory_fraction)
        fitting = [
            g
            for g in self.aligned_blocks(service.tp_size)
            if self.fits(g, service, avoid) and not (unheld and any(self.pinned[c] for c in g))
        ]
        return min(fitting, key=lambda g: (sum(self.free[c] - need for c in g), g), default=None)

    def take(self, block: Block, service: Placeable) -> None:
        """`service` holds `block`; no other service may join it there when it is `alone`, or on a
        `cardSharing: refuse` host."""
        need = units(service.memory_fraction)
        sole = keeps_apart(service) or self.host.card_sharing == "refuse"
        for c in block:
            self.free[c] -= need
            self.users[c].append(service)
            self.sole[c] = self.sole[c] or sole
            self.pinned[c] = self.pinned[c] or service.devices is not None
        self.in_use = True
        self._views.clear()
        if self.ports is not None and binds_ports(service):
            self.ports.take(service)

    def capacity(self, tp: int, alone: bool, unheld: bool = False) -> int:
        """Largest memory fraction (units) a TP group of this size could still get here (with
        `unheld`: on cards no pinned service holds)."""
        free = self._usable(alone, unheld)
        if tp == 1:
            return max(free, default=-1)
        return max((min(free[start : start + tp]) for start in range(0, self.host.npus - tp + 1, tp)), default=-1)

    def _usable(self, alone: bool, unheld: bool) -> list[int]:
        """Per card, the memory a new group could use there, -1 where it cannot: kept until the next
        `take`, so the capacities of every TP size after a take share one count."""
        key = (alone, unheld)
        free = self._views.get(key)
        if free is None:
            free = self._views[key] = [
                -1 if self.sole[c] or (unheld and self.pinned[c]) or (alone and self.users[c]) else self.free[c]
                for c in range(self.host.npus)
            ]
        return free

    def describe(self) -> str:
        """Free memory per card, for error messages: `0:0.05 1:0.05 ...`."""
        parts = []
        for c in range(self.host.npus):
            note = ""
            if self.alone(c):
                holder = next((u for u in self.users[c] if u.alone), None)
                refused = self.host.card_sharing == "refuse"
                note = (
                    " (in use; cardSharing refuse)" if refused else f" (held alone by {holder.name})" if holder
                    else " (held by a service with hcclPortRanges: false)"
                )
            parts.append(f"{c}:{fmt_units(max(self.free[c], 0))}{note}")
        return " ".join(parts)


def keeps_apart(service: Placeable) -> bool:
    """It takes only cards no one uses and no one may join it there: it holds its cards alone (a
    multi-host member, a prefill or decode instance), or keeps HCCL's default NPU port (no HCCL port ranges)."""
    return service.alone is not None or not service.hccl_ranges


def binds_ports(service: Placeable) -> bool:
    """It pins a window, or keeps HCCL's default NPU port: where it goes depends on other ports."""
    return not service.hccl_ranges or any(service.pinned(kind, kind.size) is not None for kind in KINDS)


def _names(services: list[Placeable]) -> str:
    return ", ".join(u.name for u in services)


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
        if self.tree[i] == value:
            return
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


def _order(service: Placeable) -> tuple:
    pin_rank = 0 if service.devices is not None else 1 if service.host is not None else 2
    return (pin_rank, -units(service.memory_fraction), -service.tp_size, service.name)


def _need_text(service: Placeable) -> str:
    return (
        f"{service.tp_size} card{'s' if service.tp_size > 1 else ''} "
        f"with {service.memory_fraction} free each"
        + (" and no other service on them (hcclPortRanges: false)" if not service.hccl_ranges else "")
        + (f" and no other service on them ({service.alone})" if service.alone else "")
    )


class Placer:
    """Places every service of a fleet on cards; says why for each one it leaves out instead of stopping.

    Replicas of one service (one `group`) go to the hosts with the fewest of its replicas first,
    so to hosts without one while one has room, and never on a sibling's card: losing a host or a
    card loses as few replicas as the fleet allows.

    `keep_off_running=False` drops the day-2 rule (a newcomer keeps off pinned services' cards
    while a host in use has room elsewhere); only `benchmarks/plan_bench.py` does, to measure
    what the rule costs in hosts."""

    def __init__(
        self,
        fleet: FleetConfig,
        keep_off_running: bool = True,
        shard_of: Mapping[str, int] | None = None,
    ) -> None:
        self.keep_off_running = keep_off_running
        self.shard_of = shard_of or {}
        """Host -> shard, in a sharded fleet: a replica goes to the shard of the first one placed."""
        self.group_shard: dict[str, int] = {}
        self.siblings: dict[str, dict[str, set[int]]] = {}
        """Replicated service -> host -> cards its replicas hold there."""
        self.hosts = sorted(fleet.hosts, key=lambda h: h.name)
        exporter = fleet.metrics.npu_exporter_port
        self.cards = {
            h.name: Cards(h, units(fleet.budget(h)), PinnedPorts.of(h, fleet.ports, exporter)) for h in self.hosts
        }
        self.index = {h.name: i for i, h in enumerate(self.hosts)}
        self.trees: dict[tuple[int, bool], LeftmostAtLeast] = {}
        self.unheld_trees: dict[tuple[int, bool], LeftmostAtLeast] = {}
        self.placed: list[Placement] = []
        self.members: list[Placement[Member]] = []
        """The members of the groups placed, each group's together, in member order."""
        self.max_budget = max(c.budget for c in self.cards.values())

    def run(self, instances: list[P], groups: Sequence[Group] = ()) -> Outcome[list[Placement[P]]]:
        """Where each instance placed goes, in the order placed; why, for each one left out. The
        members of `groups` (multi-host services), placed in the same order as instances, all of a
        group's or none, are in `members` afterwards."""
        ordered = sorted([*instances, *groups], key=_order)
        refusals = tuple(why for i in ordered if (why := self._place_group(i) if isinstance(i, Group) else self._place(i)))
        return Outcome(self.placed, refusals)

    def _place(self, s: Placeable) -> str | None:
        """Places `s`; else says why it has no room."""
        need = units(s.memory_fraction)
        budget = self.cards[s.host].budget if s.host else self.max_budget
        if need > budget:
            where = f"host {s.host}" if s.host else "any host"
            return (
                f"service {s.name}: memoryFraction {s.memory_fraction} is over the per-card "
                f"memory budget {fmt_units(budget)} of {where}"
            )
        if s.alone and s.host is not None and self.cards[s.host].host.nic_address is None:
            return f"service {s.name} ({s.alone}) is pinned to host {s.host}, which has {NO_NIC}"
        if s.devices is not None:
            return self._place_pinned(s, tuple(sorted(s.devices)))
        if s.host is None and (s.allowed_hosts is not None or s.group is not None or s.alone):
            return self._place_among(s)  # the trees know memory, not NICs
        if s.host is not None:
            cards = self.cards[s.host]
            choice = self._choose(s, [cards.host])
            if choice is None:
                return cards.port_refusal(s) or (
                    f"host {s.host}: service {s.name} needs {_need_text(s)} (aligned); "
                    f"free per card: {cards.describe()}"
                )
            self._commit(s, *choice)
            return None
        if binds_ports(s):
            return self._place_among(s)  # the trees know memory, not ports: ask each host, in the same order
        tp, apart = s.tp_size, keeps_apart(s)
        i = self._unheld_tree(tp, apart).first_at_least(need) if self.keep_off_running else None
        if i is not None:
            cards = self.cards[self.hosts[i].name]
            block = cards.best_block(s, unheld=True)
            assert block is not None, "Cards.capacity and Cards.fits disagree"
            self._commit(s, cards, block)
            return None
        i = self._tree(tp, apart).first_at_least(need)
        if i is not None:
            cards = self.cards[self.hosts[i].name]
            block = cards.best_block(s)
            assert block is not None, "Cards.capacity and Cards.fits disagree"
            self._commit(s, cards, block)
            return None
        shown = "; ".join(f"{h.name}: {self.cards[h.name].describe()}" for h in self.hosts[:5])
        more = f"; and {len(self.hosts) - 5} more hosts" if len(self.hosts) > 5 else ""
        return (
            f"no host has room for service {s.name}, which needs {_need_text(s)} on one host "
            f"(aligned); free per card: {shown}{more}"
        )

    def _candidates(self, s: Placeable) -> list[Host]:
        if s.host:
            return [self.cards[s.host].host]
        hosts = [h for h in self.hosts if h.name in s.allowed_hosts] if s.allowed_hosts else self.hosts
        hosts = [h for h in hosts if h.nic_address is not None] if s.alone else hosts
        shard = self.group_shard.get(s.shard_key) if s.shard_key is not None else None
        return hosts if shard is None else [h for h in hosts if self.shard_of[h.name] == shard]

    def _avoid(self, s: Placeable, host: str) -> frozenset[int]:
        """The cards of `host` that other replicas of `s`'s service hold."""
        return frozenset(self.siblings.get(s.group, {}).get(host, ())) if s.group is not None else frozenset()

    def _place_among(self, s: Placeable) -> str | None:
        """A replica or a service limited to `hosts`: the first allowed host, by name, with room,
        among those with the fewest replicas of its service (none first), so replicas spread evenly."""
        candidates = self._candidates(s)
        if not candidates and s.alone:
            return self._no_nic_refusal(s)
        group = self.siblings.get(s.group, {}) if s.group is not None else {}
        held = {h.name: len(group.get(h.name, ())) for h in candidates}
        for fewest in sorted(set(held.values())):  # hosts with fewer replicas first, name order within
            choice = self._choose(s, [h for h in candidates if held[h.name] == fewest])
            if choice is not None:
                self._commit(s, *choice)
                return None
        where = f"hosts {', '.join(h.name for h in candidates)}" if s.allowed_hosts else "any host"
        shown = "; ".join(f"{h.name}: {self.cards[h.name].describe()}" for h in candidates[:5])
        ports = [why for h in candidates if (why := self.cards[h.name].port_refusal(s))][:5]
        return (
            f"no room for service {s.name} on {where}: it needs {_need_text(s)} on one host (aligned)"
            + (", on cards no other replica of its service uses" if s.group is not None else "")
            + (f", where its pinned ports are free ({'; '.join(ports)})" if ports else "")
            + f"; free per card: {shown}" + (self._no_nic_hosts() if s.alone else "")
        )

    def _no_nic_refusal(self, s: Placeable) -> str:
        """Why `s`, which runs on the host network (`alone`), has no candidate host: none with an IP address."""
        where = f"among hosts {', '.join(s.allowed_hosts)}" if s.allowed_hosts else "in the fleet"
        return f"service {s.name} ({s.alone}) has no host {where} with an IP address for HCCL_IF_IP" + self._no_nic_hosts()

    def _choose(self, s: Placeable, hosts: list[Host]) -> tuple[Cards, Block] | None:
        """Where `s` goes among `hosts` (in order of preference): the best-fitting block of cards no
        pinned service holds on the first host in use that has one; else the best-fitting block on the
        first host with room."""
        for host in hosts if self.keep_off_running else ():
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

    def _place_pinned(self, s: Placeable, block: Block) -> str | None:
        """On the first candidate host whose cards `block` all take it; else a problem with every
        card's refusal on the first five candidates."""
        details: list[str] = []
        group = s.group or ""
        candidates = self._candidates(s)
        if not candidates and s.alone:
            return self._no_nic_refusal(s)
        for i, host in enumerate(candidates):
            cards, avoid = self.cards[host.name], self._avoid(s, host.name)
            refusals = [r for c in block if c < host.npus and (r := cards.refusal(c, s, avoid, group)) is not None]
            refusals += [r for r in [cards.port_refusal(s)] if r is not None]
            if max(block) < host.npus and not refusals:
                self._commit(s, cards, block)
                return None
            details += refusals if i < 5 else []
        where = f"host {s.host}" if s.host else "any host"
        return (
            f"service {s.name}: pinned devices {list(block)} do not fit on {where}: "
            + ("; ".join(details) if details else "no host has that many cards")
        )

    def _place_group(self, g: Group) -> str | None:
        """Every member of a multi-host service on a host of its own, or none (`allocation.group`): the
        pinned members where they are pinned, the others in member order on the first hosts, in use
        first (by name), with an aligned block of empty cards, of one board and HBM size (and in a
        sharded fleet one shard): those of the pinned members, else the first such kind with hosts
        enough. Only hosts with an IP address for `HCCL_IF_IP` take a member."""
        chosen: dict[int, tuple[Cards, Block]] = {}
        for m in (m for m in g.members if m.host is not None):
            cards = self.cards[m.host]
            block = self._member_block(cards, m)
            if block is None or cards.host.nic_address is None:
                why = cards.port_refusal(m) or (
                    NO_NIC if cards.host.nic_address is None
                    else f"no block of {_need_text(m)}, none of them used by another service; free per card: {cards.describe()}"
                )
                return f"service {g.name}: member {m.name} is pinned to host {m.host}, which has {why}"
            chosen[m.index] = (cards, block)
        kinds = {self._kind(c.host) for c, _ in chosen.values()}
        if len(kinds) > 1:
            return (
                f"service {g.name}: its members are pinned to hosts of different boards, HBM sizes or shards "
                f"({', '.join(f'{c.host.name}: {self._kind_text(c.host)}' for c, _ in chosen.values())}); one "
                "model's ranks run on hosts of one kind"
            )
        free = [m for m in g.members if m.index not in chosen]
        used = {c.host.name for c, _ in chosen.values()}
        hosts = [h for h in self._group_hosts(g) if h.name not in used]
        for kind in list(kinds) or list(dict.fromkeys(self._kind(h) for h in hosts)):
            rest = self._fill(free, [h for h in hosts if self._kind(h) == kind])
            if rest is not None:
                for m in g.members:
                    cards, block = chosen.get(m.index) or rest[m.index]
                    self._take(m, cards, block)
                    self.members.append(Placement(m, cards.host, block))
                return None
        return self._group_refusal(g, free, hosts)

    def _fill(self, members: list[Member], hosts: list[Host]) -> dict[int, tuple[Cards, Block]] | None:
        """Each of `members` on the next of `hosts` (in order) with a block for it; None if they run out."""
        out, i = {}, 0
        for m in members:
            while i < len(hosts) and (block := self._member_block(self.cards[hosts[i].name], m)) is None:
                i += 1
            if i == len(hosts):
                return None
            out[m.index] = (self.cards[hosts[i].name], block)
            i += 1
        return out

    def _member_block(self, cards: Cards, m: Member) -> Block | None:
        """The block `m` takes on `cards`' host: its pinned devices, else the lowest aligned block of its
        size; cards no other service uses, with its fraction free. None when there is none, or one of
        its pinned windows clashes there."""
        need, npus = units(m.memory_fraction), cards.host.npus
        blocks = [tuple(sorted(m.devices))] if m.devices is not None else cards.aligned_blocks(m.tp_size) if m.tp_size <= npus else []
        fit = (b for b in blocks if all(c < npus and not cards.users[c] and cards.free[c] >= need for c in b))
        return next(fit, None) if cards.port_refusal(m) is None else None

    def _group_hosts(self, g: Group) -> list[Host]:
        """The hosts a group's unpinned members may take, in order of preference: hosts in use first,
        then the rest, each by name; only those with an IP address for `HCCL_IF_IP`."""
        allowed = [h for h in self.hosts if h.nic_address is not None and (not g.service.hosts or h.name in g.service.hosts)]
        return [h for h in allowed if self.cards[h.name].in_use] + [h for h in allowed if not self.cards[h.name].in_use]

    def _kind(self, host: Host) -> tuple:
        """What a group's hosts share: board, HBM (nominal and as reported) and, sharded, the shard."""
        return host.board, host.hbm_gi_b, host.hbm_bytes, self.shard_of.get(host.name)

    def _kind_text(self, host: Host) -> str:
        shard = self.shard_of.get(host.name)
        return f"{host.board}, {host.hbm_gi_b} GiB" + (f", shard {shard}" if shard is not None else "")

    def _group_refusal(self, g: Group, free: list[Member], hosts: list[Host]) -> str:
        """Why a group found no hosts: what each member needs, and which hosts of each kind have it."""
        fitting = [h for h in hosts if self._member_block(self.cards[h.name], free[0]) is not None]
        shown = ", ".join(f"{h.name} ({self._kind_text(h)})" for h in fitting[:8]) or "none"
        return (
            f"no room for service {g.name} over {len(g.members)} hosts: {len(free)} more member(s) need each a host of "
            f"their own with {_need_text(free[0])}, none of them used by another service, all hosts of one board and "
            f"HBM size; hosts with such a block: {shown}" + self._no_nic_hosts()
        )

    def _no_nic_hosts(self) -> str:
        """The first hosts that take no member nor prefill or decode instance, for a refusal: none when every host can."""
        no_ip = [h.name for h in self.hosts if h.nic_address is None][:5]
        return f"; hosts without an IP address for HCCL_IF_IP (nic.address): {', '.join(no_ip)}" if no_ip else ""

    def _commit(self, s: Placeable, cards: Cards, block: Block) -> None:
        self._take(s, cards, block)
        self.placed.append(Placement(s, cards.host, block))
        if s.group is not None:
            self.siblings.setdefault(s.group, {}).setdefault(cards.host.name, set()).update(block)
        if s.shard_key is not None and self.shard_of:
            self.group_shard.setdefault(s.shard_key, self.shard_of[cards.host.name])

    def _take(self, s: Placeable, cards: Cards, block: Block) -> None:
        """`s` holds `block` of `cards`' host: the host's capacities in the trees follow."""
        cards.take(block, s)
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
