"""The plan diff computed: two plan JSON documents compared into a `PlanDiff`.

Every service, replica and router of either plan gets a `ServiceDiff` saying what happens to it:
added, removed, renamed, moved, other ports, a container re-created (and by which of its keys, as
`records.restarts` classifies them) or updated in place, another capacity. Hosts get a `HostDiff`.
The facts carry their own short wording (`lines`, `detail`), which every format of
`views.diff.render` shows as it is.

Ordering is canonical (host, then service name), never the order of the input, so the same two
plans always give the same diff.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from allocation import names
from allocation.plan import CAPACITY_KEYS
from allocation.windows import BY_KEY, KINDS, ROUTER_KINDS, window_text
from records.group import DIGEST_LABEL
from records.held_cards import HELD_CARDS
from records.restarts import changed
from records.start_order import longest_start
from records.takeover import PULLED_FIRST, downtime
from views.diff.container import compact, container_changes, key_change, security_changes
from views.diff.exporter import PORT_KEY, exporters

# Port fields of a planned service or router, in the order they are reported.
PORT_FIELDS = tuple(k.key for k in (*KINDS, *ROUTER_KINDS))
SECURITY = "security"
IN_PLACE = "updated in place"
CAPACITY = "capacity"
# The capacity keys the plan JSON writes (allocation.plan.CAPACITY_KEYS), the verdict first, then the
# sizes behind it, then the rest in the order written.
_VERDICT_FIRST = ("fits", "kvCacheTokens", "maxConcurrency", "kvCacheGiBPerCard", "weightsGiBPerCard")
CAPACITY_FIELDS = (*_VERDICT_FIRST, *(k for k in CAPACITY_KEYS if k not in _VERDICT_FIRST))
HOST_FIELDS = ("address", "npus", "hbmGiB", "memoryBudget", "sharedCards", "cardSharing", "heldCards")


@dataclass(frozen=True)
class FieldChange:
    """One value that differs between the old and the new plan."""

    key: str
    old: Any
    new: Any

    def __str__(self) -> str:
        return f"{self.key} {_show(self.old, self.key)} -> {_show(self.new, self.key)}"


@dataclass(frozen=True)
class Placement:
    host: str
    devices: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.host} cards {_cards(self.devices)}"


@dataclass(frozen=True)
class ServiceDiff:
    """Everything that happens to one service. A service can be moved, get other ports and
    a new container spec at once; each list is empty when that kind of change is absent."""

    name: str
    host: str
    """The new host, or the old one for a removed service."""
    added: bool = False
    removed: bool = False
    moved_from: Placement | None = None
    moved_to: Placement | None = None
    ports: tuple[FieldChange, ...] = ()
    security: tuple[str, ...] = ()
    """Changes to privilege, device files, mounts or IPC: they also re-create the container."""
    restart_reasons: tuple[str, ...] = ()
    in_place: tuple[str, ...] = ()
    """Changes the docker provider applies to the running container (restart policy, start wait)."""
    recreate_keys: tuple[str, ...] = ()
    """The container keys whose change re-creates it (`records.restarts`)."""
    capacity: tuple[FieldChange, ...] = ()
    """What the capacity check says differently (KV cache, tokens, concurrency); re-creates nothing."""
    placement: Placement | None = None
    """Where an added service lands, or where a removed one was."""
    replica_of: str | None = None
    """The configured service the container serves (the plan JSON's `replicaOf`): a replica's or a
    router's service, or a service of its own itself, where a plan before the replica model has None."""
    kind: str = names.SERVICE
    """What the entry is (the plan JSON's `kind`, allocation.names): a service, a replica or a router."""
    renamed_from: str | None = None
    """Its name in the old plan, found through its `previousNames`, or (`unaliased`) through the docker
    name of its container; None when it kept its name."""
    unaliased: bool = False
    """Renamed without a `previousNames` entry for its old name, but its container keeps the old
    one's docker name (a rename back with `previousNames` dropped): to Pulumi a new resource beside
    the old, so its container is re-created."""
    exporter: bool = False
    """The host's NPU exporter (`metrics.npuExporter`), not a service: its restart costs the host's
    NPU metrics for a while, no model."""

    @property
    def moved(self) -> bool:
        return self.moved_from is not None

    @property
    def recreated(self) -> bool:
        """`pulumi up` deletes its container and creates a new one: down for the model load."""
        return not (self.added or self.removed) and bool(
            self.recreate_keys or self.moved or self.ports or self.security or self.restart_reasons
        )

    @property
    def changed(self) -> bool:
        """Kept, but placed, wired, started or sized differently; all but a capacity change re-create
        its container."""
        return self.recreated or bool(self.in_place) or bool(self.capacity) or self.renamed_from is not None

    @property
    def unchanged(self) -> bool:
        return not (self.added or self.removed or self.changed)

    @property
    def status(self) -> str:
        if self.added:
            return "added"
        if self.removed:
            return "removed"
        return "changed" if self.changed else "unchanged"

    def kinds(self) -> list[str]:
        """The kinds of change, in the order they are reported."""
        out = [k for k, on in (("added", self.added), ("removed", self.removed)) if on]
        if self.renamed_from is not None:
            out.append("renamed")
        if self.moved:
            out.append("moved")
        if self.ports:
            out.append("ports changed")
        if self.security:
            out.append(SECURITY)
        if self.restart_reasons:
            out.append("restarted")
        if self.in_place:
            out.append(IN_PLACE)
        if self.capacity:
            out.append(CAPACITY)
        return out or ["unchanged"]

    def lines(self) -> list[tuple[str, str]]:
        """(kind, detail) pairs, one per fact a reviewer should read."""
        out: list[tuple[str, str]] = []
        of = f"replica of {self.replica_of}, " if self.replica_of not in (None, self.name) else ""
        what = "the host's NPU exporter (metrics.npuExporter)" if self.exporter else ""
        if self.added:
            out.append(("added", of + (f"on {self.placement}" if self.placement else what)))
        if self.removed:
            out.append(("removed", of + (f"was on {self.placement}" if self.placement else what)))
        if self.renamed_from is not None:
            out.append(("renamed", f"{self.renamed_from} -> {self.name}"))
        if self.moved:
            out.append(("moved", f"{self.moved_from} -> {self.moved_to}"))
        out += [("ports changed", str(p)) for p in self.ports]
        out += [(SECURITY, r) for r in self.security]
        out += [("restarted", r) for r in self.restart_reasons]
        out += [(IN_PLACE, r) for r in self.in_place]
        out += [(CAPACITY, str(c)) for c in self.capacity]
        return out


@dataclass(frozen=True)
class HostDiff:
    name: str
    added: bool = False
    removed: bool = False
    fields: tuple[FieldChange, ...] = ()
    stops: tuple[str, ...] = ()
    """Per card that becomes shared while a running container holds it: who must stop for the switch."""
    takeovers: tuple[str, ...] = ()
    """Containers outside the plan that `pulumi up` newly disables for good (the host's `replaces`)."""
    takeover_chain: tuple[int, tuple[str, ...]] = (0, ())
    """With `takeovers`: the longest the new containers take to serve after the takeover, and the chain
    of services that takes it (records.start_order.longest_start)."""

    def takeover(self) -> str:
        """What `pulumi up` does to the containers it takes over from, before anything else there, and
        what it costs."""
        return (
            f"stops and disables {', '.join(self.takeovers)} (outside the plan: restart policy no, then "
            f"stopped; kept for the way back) {PULLED_FIRST}; their services are {downtime(self.takeover_chain)}"
        )

    def detail(self) -> str:
        if self.added:
            return "; ".join(["host added", *([self.takeover()] if self.takeovers else [])])
        if self.removed:
            return "host removed"
        return "; ".join([*([self.takeover()] if self.takeovers else []), *(str(f) for f in self.fields), *self.stops])


@dataclass(frozen=True)
class PlanDiff:
    stack: str
    services: tuple[ServiceDiff, ...]
    """Every service of either plan, sorted by host, then name."""
    hosts: tuple[HostDiff, ...] = ()
    """Hosts added, removed, or with another address, card count or memory budget."""
    stack_is_new: bool = False
    """The stack did not exist in the old revision, so every service is added."""
    against: str | None = None
    """The revision the new plan is compared to, for the headings; None if unknown."""
    groups: tuple[str, ...] = ()
    """One line per multi-host service added, removed or changed: its members are one unit, so a change
    to any of them restarts all of them (vLLM's leader cannot take a restarted follower back)."""
    disaggregated: tuple[str, ...] = ()
    """One line per disaggregated service added, removed or changed, naming what the change restarts."""

    def counts(self) -> dict[str, int]:
        out = {"changed": 0, "added": 0, "removed": 0, "unchanged": 0}
        for s in self.services:
            out[s.status] += 1
        return out

    @property
    def has_changes(self) -> bool:
        return bool(self.hosts) or bool(self.groups) or bool(self.disaggregated) or any(not s.unchanged for s in self.services)

    def takeovers(self) -> list[HostDiff]:
        """Hosts where `pulumi up` first disables containers outside the plan."""
        return [h for h in self.hosts if h.takeovers]

    def changes(self) -> list[ServiceDiff]:
        return [s for s in self.services if not s.unchanged]

    def recreated(self) -> list[ServiceDiff]:
        """The containers `pulumi up` deletes and creates again, in report order."""
        return [s for s in self.services if s.recreated]

    def summary(self) -> str:
        c = self.counts()
        return f"{c['changed']} changed, {c['added']} added, {c['removed']} removed, {c['unchanged']} unchanged"


def diff_plans(old: Mapping[str, Any] | None, new: Mapping[str, Any], *, against: str | None = None) -> PlanDiff:
    """Compare two plan JSON documents; `old` is None when the stack did not exist before."""
    old_services = _services(old) if old is not None else {}
    new_services = _services(new)
    renames = _renames(old_services, new_services)
    unaliased = _unaliased(old_services, new_services, renames)
    renames |= unaliased
    diffs = []
    for name in (old_services.keys() - renames.values()) | new_services.keys():
        before, after = old_services.get(renames.get(name, name)), new_services.get(name)
        if before is None or after is None:
            diffs.append(_added_or_removed(name, before, after))
        else:
            diffs.append(_service_diff(name, before, after, renames.get(name), name in unaliased))
    diffs += _exporter_diffs(old or {}, new)
    diffs.sort(key=lambda d: (d.host, d.name))
    return PlanDiff(
        stack=str(new.get("stack", "")),
        services=tuple(diffs),
        # A new stack lists no host as added (every service is), but still what it takes over from.
        hosts=_host_diffs(old, new) if old is not None else tuple(h for h in _host_diffs({}, new) if h.takeovers),
        stack_is_new=old is None,
        against=against,
        groups=_group_lines(old or {}, new),
        disaggregated=_disaggregated_lines(old or {}, new),
    )


def _group_lines(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[str, ...]:
    """A line per multi-host service (`groups`) added, removed or with a member that changed: every key
    of it or of a member but the capacity check counts, and any such change restarts the whole group."""
    lines = []
    for name, was, now in _by_name(old, new, "groups"):
        if was is None or now is None:
            g = now or was
            where = ", ".join(f"{m['name']} on {m['host']}" for m in g["members"])  # type: ignore[index]
            lines.append(f"multi-host service {name} {'added' if was is None else 'removed'}: {where}")
            continue
        changed = _group_changes(was, now)
        if changed:
            members = ", ".join(m["name"] for m in now["members"])
            lines.append(f"multi-host service {name}: {changed}; a change to any member restarts every member: {members}")
    return tuple(lines)


def _by_name(old: Mapping[str, Any], new: Mapping[str, Any], key: str) -> list[tuple[str, Any, Any]]:
    """The entries of list `key` in both plans, by name: (name, the old entry or None, the new one or None)."""
    before = {e["name"]: e for e in old.get(key, ())}
    after = {e["name"]: e for e in new.get(key, ())}
    return [(name, before.get(name), after.get(name)) for name in sorted(before.keys() | after.keys())]


def _disaggregated_lines(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[str, ...]:
    """A line per disaggregated service (`disaggregated`) added, removed or changed, naming what restarts: each
    prefill or decode instance, and the proxy, whose container `pulumi up` re-creates (a key of its `container`
    that `records.restarts` says re-creates it; its `kvTransferConfig` carries both roles' sizes, so a change to
    either role's tensorParallelSize re-creates every instance of both, and the proxy's flags name every
    instance's address and port). Each changed entry names its changed plan keys (but the capacity check's) and
    container keys (`container KEY`); in a plan written before entries had a container, any changed key restarts."""
    lines = []
    for name, was, now in _by_name(old, new, "disaggregated"):
        if was is None or now is None:
            d = now or was
            where = ", ".join(f"{i['name']} on {i['host']}" for i in (*d["prefill"], *d["decode"]))  # type: ignore[index]
            lines.append(f"disaggregated service {name} {'added' if was is None else 'removed'}: {where}, proxy on {d['proxy']['host']}")  # type: ignore[index]
            continue
        old_entries = {i["name"]: i for i in (*was["prefill"], *was["decode"], was["proxy"])}
        parts, restarts = [], []
        for entry in (*now["prefill"], *now["decode"], now["proxy"]):
            prior = old_entries.get(entry["name"], {})
            keys = sorted(k for k in prior.keys() | entry.keys() if k not in ("capacity", "container") and prior.get(k) != entry.get(k))
            before, after = prior.get("container"), entry.get("container")
            recreated = changed(before, after)[0] if before is not None and after is not None else list(keys)
            keys += _container_keys(before, after)
            if keys:
                parts.append(f"{entry['name']}: {', '.join(keys)}")
            restarts += [entry["name"]] if recreated else []
        gone = sorted(old_entries.keys() - {e["name"] for e in (*now["prefill"], *now["decode"], now["proxy"])})
        parts += [f"{n}: removed" for n in gone]
        if parts:
            lines.append(f"disaggregated service {name}: {'; '.join(parts)}; restarts {', '.join(restarts) or 'nothing'}")
    return tuple(lines)


def _group_changes(was: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    """What changed in a group, `key` for the group's own keys and `member: key, key` for a member's: its
    plan keys, and its container's keys (`records.restarts`) but the group-digest label, which changes on
    every member with any of them (records.group)."""
    old_members = {m["name"]: m for m in was["members"]}
    parts = [", ".join(k for k in sorted(was.keys() | now.keys()) if k != "members" and was.get(k) != now.get(k))]
    for m in now["members"]:
        before = old_members.get(m["name"], {})
        keys = sorted(k for k in before.keys() | m.keys() if k not in ("capacity", "container") and before.get(k) != m.get(k))
        keys += _container_keys(before.get("container"), m.get("container"))
        parts += [f"{m['name']}: {', '.join(keys)}"] if keys else []
    return "; ".join(p for p in parts if p)


def _container_keys(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[str]:
    """The keys of a member's container that changed; none when either plan has no container (written
    before members had one)."""
    if old is None or new is None:
        return []
    recreate, in_place = changed(*(_undigested(c) for c in (old, new)))
    return [f"container {k}" for k in [*recreate, *in_place]]


def _undigested(container: Mapping[str, Any]) -> dict[str, Any]:
    return {**container, "labels": {k: v for k, v in container.get("labels", {}).items() if k != DIGEST_LABEL}}


def _added_or_removed(name: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> ServiceDiff:
    """An entry only one plan has: added, with where it lands, or removed, with where it was."""
    svc = after if after is not None else before
    assert svc is not None
    return ServiceDiff(
        name, svc["host"], added=before is None, removed=after is None, placement=_placement(svc),
        replica_of=svc.get("replicaOf"), kind=svc["kind"],
    )  # fmt: skip


def _exporter_diffs(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[ServiceDiff]:
    """Each host's NPU exporter, added, removed or compared (views.diff.exporter)."""
    before, after = exporters(old), exporters(new)
    out = []
    for host in before.keys() | after.keys():
        was, now = before.get(host), after.get(host)
        if was is None or now is None:
            name = (now or was)["name"]  # type: ignore[index]
            out.append(ServiceDiff(name, host, added=was is None, removed=now is None, exporter=True))
        else:
            diff = _service_diff(now["name"], was, now, port_fields=(PORT_KEY,))
            out.append(replace(diff, exporter=True))
    return out


def _services(plan: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for host in plan.get("hosts", ()):
        for svc in host.get("services", ()):
            out[svc["name"]] = {"kind": _instance_kind(svc), **svc, "host": svc.get("host") or host["name"]}
    # A router is compared like a service without cards: its ports, its container (workers, policy).
    for router in plan.get("routers", ()):
        out[router["name"]] = {"kind": names.ROUTER, **router, "devices": [], "replicaOf": router["service"]}
    return out


def _instance_kind(svc: Mapping[str, Any]) -> str:
    """An entry's `kind`; a plan written before the key says it by `replicaOf` (None before replicas)."""
    return svc.get("kind") or (names.SERVICE if svc.get("replicaOf") in (None, svc["name"]) else names.REPLICA)


def _renames(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, str]:
    """New name -> old name, for a service, replica or router of the new plan that the old plan knew
    under one of its `previousNames` (and that no longer has that name)."""
    out = {}
    for name, svc in new.items():
        if name not in old:
            found = [p for p in svc.get("previousNames") or () if p in old and p not in new]
            if found:
                out[name] = found[-1]  # the most recent name the old plan has
    return out


def _unaliased(old: Mapping[str, Any], new: Mapping[str, Any], renames: Mapping[str, str]) -> dict[str, str]:
    """New name -> old name, for an entry of the new plan whose container has the docker name of a
    container that an old entry, gone from the new plan and from every `previousNames`, runs on the
    same host. To Pulumi that is a new resource and a deleted one, no update: it deletes a resource the
    program no longer registers once every resource has registered (pulumi pkg/resource/deploy/
    step_generator.go, GenerateDeletes), so the new container is created while the old one runs."""
    gone = {
        (svc["host"], _container_name(svc)): name
        for name, svc in old.items()
        if name not in new and name not in renames.values() and _container_name(svc)
    }
    return {
        name: gone[svc["host"], _container_name(svc)]
        for name, svc in new.items()
        if name not in old and name not in renames and (svc["host"], _container_name(svc)) in gone
    }


def _container_name(svc: Mapping[str, Any]) -> str | None:
    return (svc.get("container") or {}).get("name")


def _placement(svc: Mapping[str, Any]) -> Placement:
    return Placement(svc["host"], tuple(svc.get("devices") or ()))


def _service_diff(
    name: str,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    renamed_from: str | None = None,
    unaliased: bool = False,
    port_fields: tuple[str, ...] = PORT_FIELDS,
) -> ServiceDiff:
    was, now = _placement(before), _placement(after)
    moved = was != now
    ports = tuple(FieldChange(k, before.get(k), after.get(k)) for k in port_fields if before.get(k) != after.get(k))
    explained = {p.key for p in ports} | ({"devices"} if moved else set())
    old, new = before.get("container") or {}, after.get("container") or {}
    recreate, in_place = changed(old, new)
    # A key the old revision's plan did not print is unknown then, not changed.
    sized = (before.get("capacity") or {}, after.get("capacity") or {}) if "capacity" in before else ({}, {})
    capacity = tuple(
        FieldChange(k, sized[0].get(k), sized[1].get(k))
        for k in CAPACITY_FIELDS
        if (k in sized[0] or not sized[0]) and sized[0].get(k) != sized[1].get(k)
    )
    return ServiceDiff(
        name,
        now.host,
        moved_from=was if moved else None,
        moved_to=now if moved else None,
        ports=ports,
        security=tuple(security_changes(old, new)),
        restart_reasons=(
            *([_unaliased_reason(name, renamed_from or "", before)] if unaliased else []),
            *container_changes(old, new, explained, recreate),
        ),
        in_place=tuple(key_change(key, old, new) for key in in_place),
        recreate_keys=tuple(recreate),
        capacity=capacity,
        replica_of=after.get("replicaOf"),
        kind=after.get("kind", names.SERVICE),  # an exporter entry has no kind
        renamed_from=renamed_from,
        unaliased=unaliased,
    )


def _unaliased_reason(name: str, was: str, before: Mapping[str, Any]) -> str:
    """Why a rename that keeps the docker name but drops the old name re-creates the container, and the
    `previousNames` that keeps it: the old entry's, then its name (the first stays the docker name)."""
    history = ", ".join(dict.fromkeys([*(before.get("previousNames") or ()), was]))
    return (
        f"previousNames does not list {was}: pulumi up creates {name} as a new resource and deletes {was}, "
        f"whose container has the same docker name {_container_name(before)} (it creates first, so the create "
        f"may fail on the name in use); previousNames [{history}] keeps the container"
    )


def _host_diffs(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[HostDiff, ...]:
    before = {h["name"]: h for h in old.get("hosts", ())}
    after = {h["name"]: h for h in new.get("hosts", ())}
    out = []
    for name in sorted(before.keys() | after.keys()):
        takeovers = _takeovers(before.get(name, {}), after.get(name, {}))
        chain = _takeover_chain(after[name]) if takeovers else (0, ())
        if name not in before:
            out.append(HostDiff(name, added=True, takeovers=takeovers, takeover_chain=chain))
        elif name not in after:
            out.append(HostDiff(name, removed=True))
        else:
            fields = tuple(
                FieldChange(k, before[name].get(k), after[name].get(k))
                for k in HOST_FIELDS
                # A key the old plan predates is new output, not a change.
                if k in before[name] and before[name].get(k) != after[name].get(k)
            )
            stops = _device_share_stops(before[name], after[name])
            if fields or stops or takeovers:
                out.append(HostDiff(name, fields=fields, stops=stops, takeovers=takeovers, takeover_chain=chain))
    return tuple(out)


def _takeover_chain(host: Mapping[str, Any]) -> tuple[int, tuple[str, ...]]:
    """The longest the host's new containers take to serve, from the plan JSON's services."""
    services = host.get("services", ())
    return longest_start((s["name"], s["devices"], s["container"]["startTimeoutSeconds"]) for s in services)


def _takeovers(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[str, ...]:
    """Containers the new plan replaces that the old one did not (a plan before `replaces`: none)."""
    return tuple(n for n in after.get("replaces") or () if n not in (before.get("replaces") or ()))


def _device_share_stops(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[str, ...]:
    """A card that turns shared goes into device-share mode, which npu-smi refuses while a container
    uses the card: the containers the old plan put on it must stop for the switch. On an A3 board the
    other chip of its NPU goes into the mode with it (`deviceShareCards`; a plan written before the
    key existed has its `sharedCards` there), so that chip's containers must stop too."""
    if after.get("cardSharing", "deviceShare") != "deviceShare" or "sharedCards" not in before:
        return ()
    out = []
    mode_before, mode_after = (set(p.get("deviceShareCards", p.get("sharedCards")) or ()) for p in (before, after))
    for card in sorted(mode_after - mode_before):
        holders = sorted(s["name"] for s in before.get("services", ()) if card in (s.get("devices") or ()))
        if holders:
            verb = "holds" if len(holders) == 1 else "hold"
            why = "becomes shared" if card in (after.get("sharedCards") or ()) else "shares its NPU with a shared card"
            out.append(
                f"card {card} {why}: {', '.join(holders)} {verb} it and must stop while the card "
                f"switches to device-share mode; {HELD_CARDS[after.get('heldCards', 'refuse')]}"
            )
    return tuple(out)


def _cards(devices: Iterable[int]) -> str:
    """`0-3` for a contiguous block, `0,2` otherwise, `none` for no card."""
    cards = list(devices)
    if not cards:
        return "none"
    if len(cards) > 1 and cards == list(range(cards[0], cards[0] + len(cards))):
        return f"{cards[0]}-{cards[-1]}"
    return ",".join(str(c) for c in cards)


def _show(value: Any, key: str = "") -> str:
    if value is None:
        return "unset" if key in PORT_FIELDS else "none"
    if isinstance(value, (list, tuple)) and len(value) == 2 and key in BY_KEY:
        return window_text((value[0], value[1]))
    return compact(value)
