"""Port windows: every port a service binds on its host, disjoint from every other.

HCCL does not step aside when a port is taken: two instances whose windows
overlap fail with `Socket bind failed, address already in use`. So on each
host, all windows of all services (API port, both HCCL socket ranges, the
32-port HCCL_IF_BASE_PORT window, the VLLM_PORT window) and the reserved ports
are pairwise disjoint, whatever their kind. The NPU-side range would only need
to be disjoint per card; host-wide is the simple, always-safe rule.

Pins are laid down first; the rest is handed out in service-name order, each
kind from its own base in aligned blocks (16666-16681, 16682-16697, ...). A
router's windows (`ROUTER_KINDS`) are rows of the same table, pinned and handed
out the same way, after every service's.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

from allocation.config import Host, Ports, PortRange, Service
from allocation.placeable import Placeable, Placement
from allocation.outcome import Outcome
from allocation.plan import Assignment
from allocation import names
from allocation.windows import (
    HCCL_DEFAULT_NPU_PORT, KINDS, KV_PORT, MAX_PORT, PROXY, ROLE_KINDS, ROUTER_KINDS, PortWindow, WindowKind, transport_range,
    window_text,
)


@dataclass
class Occupied:
    """Sorted, non-overlapping taken windows of one host, each with its owner."""

    starts: list[int] = field(default_factory=list)
    windows: list[tuple[int, int, str]] = field(default_factory=list)

    def clash(self, first: int, last: int) -> tuple[int, int, str] | None:
        i = bisect.bisect_right(self.starts, last)
        if i and self.windows[i - 1][1] >= first:
            return self.windows[i - 1]
        return None

    def add(self, first: int, last: int, owner: str) -> None:
        i = bisect.bisect_left(self.starts, first)
        self.starts.insert(i, first)
        self.windows.insert(i, (first, last, owner))

    def fill(self, first: int, last: int, owner: str) -> None:
        """Takes for `owner` every port of `first`-`last` nothing has taken yet."""
        i = max(bisect.bisect_right(self.starts, first) - 1, 0)
        gaps, at = [], first
        for a, b, _ in self.windows[i:]:
            if a > last:
                break
            if a > at:
                gaps.append((at, a - 1))
            at = max(at, b + 1)
        gaps += [(at, last)] if at <= last else []
        for gap in gaps:
            self.add(*gap, owner)

    def first_free(self, base: int, size: int, avoid: PortWindow | None = None) -> PortWindow | None:
        """The first aligned window of `size` ports from `base` that touches nothing taken (nor `avoid`)."""
        first = base
        while first + size - 1 <= MAX_PORT:
            taken = self.clash(first, first + size - 1)
            if taken is None and avoid is not None and first <= avoid[1] and avoid[0] <= first + size - 1:
                taken = (*avoid, "")
            if taken is None:
                return first, first + size - 1
            # Jump past the obstacle, staying on the grid of `size`-port windows from `base`.
            first += ((taken[1] - first) // size + 1) * size
        return None


def _merged(ranges: list[PortRange]) -> list[PortWindow]:
    out: list[list[int]] = []
    for r in sorted(ranges, key=lambda r: (r.first, r.last)):
        if out and r.first <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], r.last)
        else:
            out.append([r.first, r.last])
    return [(a, b) for a, b in out]


KEPT_DEFAULT = "HCCL's default NPU port (kept by services with hcclPortRanges: false)"
EXPORTER_OWNER = "the NPU exporter's port (ascend-fleet:metrics.npuExporterPort)"
TRANSPORT_OWNER = "AscendDirectTransport's random ports (a prefill or decode instance runs on the host)"


@dataclass
class PinnedPorts:
    """What `assign_ports` will claim on one host before it hands anything out (reserved ports, the
    exporter's, HCCL's default NPU port once a service keeps it, every placed service's pins),
    kept while services are placed, so placement keeps a service off a host where one of its pinned
    windows would clash, as it keeps one off cards that have no room."""

    host: str
    policy: Ports
    taken: Occupied = field(default_factory=Occupied)

    @classmethod
    def of(cls, host: Host, policy: Ports, exporter_port: int | None) -> PinnedPorts:
        pins = cls(host.name, policy)
        for first, last in _merged([*policy.reserved, *host.reserved_ports]):
            pins.taken.add(first, last, "reserved ports")
        if exporter_port is not None and pins.taken.clash(exporter_port, exporter_port) is None:
            pins.taken.add(exporter_port, exporter_port, EXPORTER_OWNER)
        return pins

    def _wanted(self, s: Placeable) -> list[tuple[PortWindow, str]]:
        """The windows `s` pins, each with its owner's words; HCCL's default NPU port if it keeps it."""
        out = [
            (window, f"{kind.key} of {s.name}")
            for kind in KINDS
            if (window := s.pinned(kind, self.policy.size(kind))) is not None
        ]
        default = (HCCL_DEFAULT_NPU_PORT, HCCL_DEFAULT_NPU_PORT)
        if not s.hccl_ranges and self.taken.clash(*default) != (*default, KEPT_DEFAULT):
            out.append((default, KEPT_DEFAULT))
        return out

    def refusal(self, s: Placeable) -> str | None:
        """Why `s` cannot go on this host for its ports, in `assign_ports`' words; None if it can."""
        for window, owner in self._wanted(s):
            other = self.taken.clash(*window)
            if other is not None:
                return f"host {self.host}: {owner} {window_text(window)} overlaps {other[2]} {window_text(other[:2])}"
        return None

    def take(self, s: Placeable) -> None:
        """`s` is placed here: its windows are taken (one that clashes is left to `assign_ports` to report)."""
        for window, owner in self._wanted(s):
            if self.taken.clash(*window) is None:
                self.taken.add(*window, owner)


@dataclass(frozen=True)
class _Owner:
    """Whose windows are handed out: an instance's (every kind) or a router's (`ROUTER_KINDS`)."""

    name: str
    kinds: tuple[WindowKind, ...]
    hccl_ranges: bool
    """An instance without HCCL port ranges gets none of the HCCL range kinds."""
    pinned: Callable[[WindowKind, int], PortWindow | None]
    windows: dict[str, PortWindow] = field(default_factory=dict)
    avoid: PortWindow | None = None
    """Ports none of its windows may take: the ephemeral range, for a member on the host network."""
    sizes: Mapping[str, int] = field(default_factory=dict)
    """Its own size of a kind whose size is the owner's (a role instance's `kvPort` block)."""

    def size(self, kind: WindowKind, policy: Ports) -> int:
        return self.sizes.get(kind.key) or policy.size(kind)


@dataclass(frozen=True)
class HostPorts:
    """The windows handed out on one host: an assignment per instance and per member (each in name
    order), and each router's windows by replicated service."""

    assignments: list[Assignment]
    routers: dict[str, Mapping[str, PortWindow]]
    members: list[Assignment] = field(default_factory=list)
    roles: list[Assignment] = field(default_factory=list)
    """The prefill and decode instances placed here, in name order."""
    proxies: dict[str, Mapping[str, PortWindow]] = field(default_factory=dict)
    """Each disaggregated service's proxy here, by the service's name."""


def assign_ports(
    host: Host,
    placed: Sequence[Placement],
    policy: Ports,
    routers: Sequence[Service] = (),
    exporter_port: int | None = None,
    members: Sequence[tuple[Placement, tuple[WindowKind, ...]]] = (),
    roles: Sequence[Placement] = (),
    proxies: Sequence[Service] = (),
) -> Outcome[HostPorts]:
    """Port windows for the instances placed on one host, and the windows of each router on it,
    handed out after every instance's windows, so a new router moves no service. `members`: the
    members of multi-host services placed here, each with the kinds it binds (`Member.kinds`),
    handed out with the instances in name order, on the host network, so outside `policy.ephemeral`.
    `roles`: the prefill and decode instances placed here (`allocation.disaggregated.RoleInstance`), handed
    out as members are, with their `kvPort` block of `kv_block` ports; on a host with one, AscendDirectTransport's
    random ports (`transport_range`) are taken first, so no window of any service lies there. `proxies`: the
    disaggregated services whose proxy runs here, handed out after the routers.
    `exporter_port`, the host's NPU exporter, is taken first like a reserved port. A window that
    found no room, or clashes, is a problem and missing from its mapping."""
    taken, problems = Occupied(), list[str]()
    ephemeral = policy.ephemeral.window

    def claim(window: PortWindow, owner: str, avoid: PortWindow | None = None) -> None:
        problems.extend(_claim(host.name, taken, window, owner, avoid))

    _take_first(taken, host, policy, exporter_port, transport=bool(roles))
    placed = sorted(placed, key=lambda p: p.instance.name)
    roles = sorted(roles, key=lambda p: p.instance.name)
    members = sorted(members, key=lambda m: m[0].instance.name)
    if any(not p.instance.hccl_ranges for p in (*placed, *(m for m, _ in members), *roles)):
        claim((HCCL_DEFAULT_NPU_PORT, HCCL_DEFAULT_NPU_PORT), KEPT_DEFAULT)
    instances = [_Owner(p.instance.name, KINDS, p.instance.hccl_ranges, p.instance.pinned) for p in placed]
    joined = [_Owner(p.instance.name, kinds, p.instance.hccl_ranges, p.instance.pinned, avoid=ephemeral) for p, kinds in members]
    routed = [_Owner(s.name, ROUTER_KINDS, True, s.pinned) for s in sorted(routers, key=lambda s: s.name)]
    proxies = sorted(proxies, key=lambda s: s.name)
    roled, proxied = _disaggregated_owners(roles, proxies, ephemeral)
    in_order = sorted((*instances, *joined, *roled), key=lambda o: o.name)
    # Pins first, the routers' and proxies' too, before anything is handed out.
    for owner in (*in_order, *routed, *proxied):
        for kind in owner.kinds:
            window = owner.pinned(kind, owner.size(kind, policy))
            if window is not None:
                owner.windows[kind.key] = window
                claim(window, f"{kind.key} of {owner.name}", owner.avoid)
    for owner in (*in_order, *routed, *proxied):
        problems += _hand_out(host.name, owner, policy, taken)
    assignments = [Assignment(host.name, p.cards, MappingProxyType(o.windows)) for p, o in zip(placed, instances)]
    member_assignments = [Assignment(host.name, p.cards, MappingProxyType(o.windows)) for (p, _), o in zip(members, joined)]
    routed_windows = {o.name: MappingProxyType(o.windows) for o in routed}
    role_assignments = [Assignment(host.name, p.cards, MappingProxyType(o.windows)) for p, o in zip(roles, roled)]
    proxy_windows = {s.name: MappingProxyType(o.windows) for s, o in zip(proxies, proxied)}
    ported = HostPorts(assignments, routed_windows, member_assignments, role_assignments, proxy_windows)
    return Outcome(ported, tuple(problems))


def _claim(host: str, taken: Occupied, window: PortWindow, owner: str, avoid: PortWindow | None) -> list[str]:
    """Takes a pinned `window` for `owner`; else says why not: past 65535, in `avoid` (the ephemeral ports), or
    over what is taken."""
    other = taken.clash(*window)
    if window[1] > MAX_PORT:
        return [f"host {host}: {owner} {window_text(window)} runs past port {MAX_PORT}"]
    if avoid is not None and window[0] <= avoid[1] and avoid[0] <= window[1]:
        return [
            f"host {host}: {owner} {window_text(window)} lies in the ephemeral ports {window_text(avoid)} "
            "(ascend-fleet:ports.ephemeral), where the kernel gives the host network's random ports out; "
            "pin it outside them"
        ]
    if other is not None:
        return [f"host {host}: {owner} {window_text(window)} overlaps {other[2]} {window_text(other[:2])}"]
    taken.add(*window, owner)
    return []


def _take_first(taken: Occupied, host: Host, policy: Ports, exporter_port: int | None, transport: bool) -> None:
    """What no window is handed out over: the reserved ports, the exporter's and, on a host with a prefill or
    decode instance (`transport`), AscendDirectTransport's random ports, where nothing else was taken."""
    for first, last in _merged([*policy.reserved, *host.reserved_ports]):
        taken.add(first, last, "reserved ports")
    if exporter_port is not None and taken.clash(exporter_port, exporter_port) is None:
        taken.add(exporter_port, exporter_port, EXPORTER_OWNER)
    if transport:
        taken.fill(*transport_range(host.npus), TRANSPORT_OWNER)


def _disaggregated_owners(
    roles: Sequence[Placement], proxies: Sequence[Service], ephemeral: PortWindow
) -> tuple[list[_Owner], list[_Owner]]:
    """The owners of the windows of prefill and decode instances (each with its `kvPort` block's size) and of
    proxies, in the order given; on the host network, so outside the ephemeral ports."""
    roled = [
        _Owner(p.instance.name, ROLE_KINDS, p.instance.hccl_ranges, p.instance.pinned, avoid=ephemeral,
               sizes={KV_PORT.key: p.instance.kv_block})
        for p in roles
    ]  # fmt: skip
    proxied = [
        _Owner(names.proxy_name(s.name), (PROXY,), True, s.disaggregated.proxy.pinned, avoid=ephemeral)  # type: ignore[union-attr]
        for s in proxies
    ]
    return roled, proxied


def _hand_out(host: str, owner: _Owner, policy: Ports, taken: Occupied) -> list[str]:
    """Adds to the owner's windows the first free window of each of its kinds it lacks, from the
    kind's base; says why for each kind with no room left."""
    problems = []
    for kind in owner.kinds:
        if kind.key in owner.windows or (kind.hccl_range and not owner.hccl_ranges):
            continue
        base, size = policy.base(kind), owner.size(kind, policy)
        window = taken.first_free(base, size, owner.avoid)
        if window is None:
            outside = f" outside the ephemeral ports {window_text(owner.avoid)}" if owner.avoid else ""
            problems.append(
                f"host {host}: no free block of {size} port(s) from {base} up to {MAX_PORT}{outside} "
                f"for {kind.key} of {owner.name}; lower ascend-fleet:ports.{kind.base_key} or free reserved ports"
            )
            continue
        taken.add(*window, f"{kind.key} of {owner.name}")
        owner.windows[kind.key] = window
    return problems
