"""Properties of the planner over generated fleets (hypothesis)."""

from __future__ import annotations

import copy
import random
from collections import defaultdict
from decimal import Decimal

from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from allocation.errors import FleetError
from cli.pin import pins_of
from allocation.plan import Plan
from records.deployment import deploy
from views.report import plan_json
from tests.support.pipeline import plan_json_of, plan_of

FRACTIONS = [Decimal(f"0.{n:02d}") for n in range(5, 100, 5)]
SMALL = FRACTIONS[:6]  # up to 0.3: several services can share a card


@st.composite
def fleets(draw: st.DrawFn) -> dict:
    """Fleets that fit their hosts' card counts, so most examples plan a real fleet."""
    host_names = draw(st.lists(st.sampled_from(["npu-a", "npu-b", "npu-c", "npu-d"]), min_size=1, max_size=4, unique=True))
    hosts, npus = [], {}
    for name in host_names:
        npus[name] = draw(st.sampled_from([2, 4, 8]))
        h = {"name": name, "address": f"{name}.example", "npus": npus[name]}
        if draw(st.booleans()):
            h["memoryBudget"] = float(draw(st.sampled_from([Decimal("0.9"), Decimal("0.95"), Decimal("1")])))
        if draw(st.booleans()):
            h["reservedPorts"] = [draw(st.sampled_from([8000, 16666, 60032, "61000-61010", "62000-62100"]))]
        hosts.append(h)
    services = []
    count = draw(st.integers(1, 10))
    api_pins = draw(st.lists(st.integers(7000, 7015), min_size=count, max_size=count, unique=True))
    for i in range(count):
        host = draw(st.sampled_from(host_names)) if draw(st.integers(0, 3)) == 0 else None
        cards = npus[host] if host else max(npus.values())
        tp = draw(st.sampled_from([t for t in (1, 1, 2, 4, 8) if t <= cards]))
        s = {"name": f"svc-{i}", "model": f"/models/m{i}", "tensorParallelSize": tp,
             "memoryFraction": float(draw(st.sampled_from(FRACTIONS if draw(st.integers(0, 3)) == 0 else SMALL)))}  # fmt: skip
        if host:
            s["host"] = host
            if draw(st.integers(0, 2)) == 0:
                s["devices"] = draw(st.permutations(range(cards)))[:tp]
        if draw(st.integers(0, 5)) == 0:
            s["hcclPortRanges"] = False
        if draw(st.integers(0, 3)) == 0:
            s["apiPort"] = api_pins[i]
        services.append(s)
    return {"hosts": hosts, "services": services}


def check_plan(plan: Plan, values: dict) -> None:
    note(plan_json(deploy(plan)))
    configured = {s["name"]: s for s in values["services"]}
    assert sorted(ps.name for _, ps in plan.services()) == sorted(configured)
    for hp in plan.hosts:
        budget = hp.budget
        used: dict[int, Decimal] = defaultdict(Decimal)
        holders: dict[int, list] = defaultdict(list)
        windows = [(r.first, r.last) for r in [*plan.fleet.ports.reserved, *hp.host.reserved_ports]]
        reserved = len(windows)
        for ps in hp.services:
            s, a = ps.service, ps.assignment
            cfg = configured[s.name]
            assert len(a.cards) == s.tensor_parallel_size == len(set(a.cards))
            assert all(0 <= c < hp.host.npus for c in a.cards)
            if "devices" in cfg:
                assert sorted(cfg["devices"]) == list(a.cards)
            else:  # aligned block
                assert a.cards[0] % s.tensor_parallel_size == 0
                assert list(a.cards) == list(range(a.cards[0], a.cards[0] + s.tensor_parallel_size))
            if "host" in cfg:
                assert cfg["host"] == hp.host.name
            if "apiPort" in cfg:
                assert cfg["apiPort"] == a.api_port
            for c in a.cards:
                used[c] += s.memory_fraction
                holders[c].append(s)
            windows += list(a.windows.values())
            if not s.hccl_port_ranges:
                windows.append((16666, 16666))
        for c, total in used.items():
            assert total <= budget, f"card {c} over budget"
            if any(not s.hccl_port_ranges for s in holders[c]):
                assert len(holders[c]) == 1, f"card {c} shared with a service without HCCL ranges"
        planned = sorted(set(windows[reserved:]))  # 16666 may be kept by several services without ranges
        for (a0, a1), (b0, b1) in zip(planned, planned[1:]):
            assert a1 < b0, f"port windows {a0}-{a1} and {b0}-{b1} overlap"
        for first, last in planned:
            assert 1024 <= first <= last <= 65535
            for r0, r1 in windows[:reserved]:
                assert last < r0 or first > r1, f"{first}-{last} is inside reserved {r0}-{r1}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.randoms(use_true_random=False))
def test_generated_fleets_are_planned_without_conflicts_or_rejected_with_a_message(values, rnd):
    before = copy.deepcopy(values)
    try:
        plan = plan_of(values, "gen")
    except FleetError as err:
        event("rejected")
        message = str(err)
        note(message)
        assert message.startswith("stack gen: ") and "\n" not in message
        assert values == before, "a rejected fleet must leave the input untouched"
        return
    assert values == before
    event("planned a fleet with services" if values["services"] else "planned an empty fleet")
    check_plan(plan, values)
    shuffled = copy.deepcopy(values)
    rnd.shuffle(shuffled["hosts"])
    rnd.shuffle(shuffled["services"])
    assert plan_json_of(shuffled, "gen") == plan_json(deploy(plan))


def planned_and_pinned(values: dict) -> tuple[Plan, dict] | None:
    """The fleet's plan and its values with every service pinned to it; None if it does not plan."""
    try:
        plan = plan_of(values, "gen")
    except FleetError:
        return None
    pinned = copy.deepcopy(values)
    for entry in pinned["services"]:
        ps = next(p for _, p in plan.services() if p.name == entry["name"])
        entry.update({k: list(v) if isinstance(v, list) else v for k, v in pins_of(ps).items()})
    return plan, pinned


@settings(max_examples=100, deadline=None)
@given(fleets(), st.integers(1, 8).map(lambda n: 1 << (n % 4)), st.sampled_from(FRACTIONS))
def test_a_pinned_fleet_never_moves_when_a_service_is_added(values, tp, fraction):
    planned = planned_and_pinned(values)
    if planned is None:
        return
    plan, pinned = planned
    pinned["services"].append({"name": "newcomer", "model": "/m", "tensorParallelSize": tp, "memoryFraction": float(fraction)})
    try:
        grown = plan_of(pinned, "gen")
    except FleetError as err:
        assert "newcomer" in str(err)  # only the newcomer can fail to fit
        return
    old = {ps.name: ps.assignment for _, ps in plan.services()}
    new = {ps.name: ps.assignment for _, ps in grown.services()}
    assert all(new[name] == a for name, a in old.items())


def _free_blocks(plan: Plan, host: str, tp: int) -> list[tuple[int, ...]]:
    """The aligned blocks of `tp` cards on `host` that no service of `plan` uses."""
    hp = next(hp for hp in plan.hosts if hp.host.name == host)
    load = hp.card_load()
    blocks = [tuple(range(start, start + tp)) for start in range(0, hp.host.npus - tp + 1, tp)]
    return [b for b in blocks if not any(load[c] for c in b)]


@settings(max_examples=150, deadline=None)
@given(fleets(), st.sampled_from([1, 1, 2, 4, 8]), st.sampled_from(SMALL), st.booleans())
def test_a_newcomer_never_shares_a_card_while_a_host_in_use_has_a_free_aligned_block_for_it(values, tp, fraction, on_host):
    """Sharing a running service's card needs that card switched to device-share mode, which needs the
    running service stopped; so a newcomer to a pinned fleet shares only when it must."""
    planned = planned_and_pinned(values)
    if planned is None:
        return
    plan, pinned = planned
    newcomer = {"name": "newcomer", "model": "/m", "tensorParallelSize": tp, "memoryFraction": float(fraction)}
    in_use = sorted({hp.host.name for hp in plan.hosts if hp.services})
    if on_host and in_use:
        newcomer["host"] = in_use[0]
    pinned["services"].append(newcomer)
    try:
        grown = plan_of(pinned, "gen")
    except FleetError:
        return
    hp, ps = next((hp, ps) for hp, ps in grown.services() if ps.name == "newcomer")
    load = hp.card_load()
    shared = [c for c in ps.assignment.cards if len(load[c]) > 1]
    note(f"newcomer on {hp.host.name} cards {ps.assignment.cards}, shared {shared}")
    if not shared:
        event("the newcomer got cards of its own")
        return
    event("the newcomer shares a card")
    candidates = [newcomer["host"]] if "host" in newcomer else in_use
    for name in candidates:
        host = grown.fleet.host(name)
        if tp <= host.npus and fraction <= grown.fleet.budget(host):
            assert not _free_blocks(plan, name, tp), f"{name} had free cards {_free_blocks(plan, name, tp)}"


def test_planning_twice_gives_the_same_plan():
    rnd = random.Random(7)
    services = [
        {"name": f"s{i}", "model": "/m", "tensorParallelSize": rnd.choice([1, 2, 4]), "memoryFraction": 0.3}
        for i in range(30)
    ]
    values = {"hosts": [{"name": f"h{i}", "address": f"h{i}.example"} for i in range(5)], "services": services}
    assert plan_json_of(values, "t") == plan_json_of(values, "t")
