"""Properties of the planner over generated fleets that mix single-host and multi-host services, up to
1,000 hosts (hypothesis): no window overlaps another on any host, none runs past 65535, no member's
window lies in the ephemeral ports, each group's start ranks partition 0..DP-1 over hosts of its own
of one kind, and a group is placed whole or the plan is refused."""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from allocation.errors import AllocationError
from allocation.plan import Plan
from allocation.windows import EPHEMERAL, MAX_PORT, window_text
from tests.support.pipeline import plan_of

FRACTIONS = ["0.1", "0.2", "0.3", "0.45", "0.9"]


@st.composite
def fleets(draw: st.DrawFn) -> dict:
    """Hosts of two HBM sizes, some named by a host name only (no IP for HCCL_IF_IP), single-host services
    and multi-host ones, some pinned to hosts."""
    count = draw(st.integers(2, 1000))
    hosts = []
    for i in range(count):
        h: dict = {"name": f"h{i:04d}", "address": f"10.{i // 250}.{i % 250}.1" if draw(st.integers(0, 9)) else f"h{i}.example"}
        if draw(st.integers(0, 4)) == 0:
            h |= {"hbmGiB": 32, "hbmBytes": 31662800896}
        hosts.append(h)
    services = []
    for i in range(draw(st.integers(0, min(40, 2 * count)))):
        s = {"name": f"s{i:03d}", "model": f"/m/{i}", "tensorParallelSize": draw(st.sampled_from([1, 2, 4])),
             "memoryFraction": float(draw(st.sampled_from(FRACTIONS)))}  # fmt: skip
        if draw(st.integers(0, 3)) == 0:
            s["host"] = f"h{draw(st.integers(0, count - 1)):04d}"
        services.append(s)
    for i in range(draw(st.integers(1, 6))):
        tp, per_host = draw(st.sampled_from([(1, 2), (2, 2), (4, 2), (2, 4), (8, 1)]))
        nodes = draw(st.integers(2 if per_host == 1 else 1, 4))
        g = {"name": f"g{i}", "model": f"/m/g{i}", "tensorParallelSize": tp,
             "memoryFraction": float(draw(st.sampled_from(["0.5", "0.9"]))),
             "dataParallel": {"size": per_host * nodes, "perHost": per_host, "expertParallel": draw(st.booleans())}}  # fmt: skip
        if count >= nodes and draw(st.integers(0, 3)) == 0:
            g["hosts"] = [f"h{j:04d}" for j in sorted(draw(st.sets(st.integers(0, count - 1), min_size=nodes, max_size=min(nodes + 2, count))))]
        services.append(g)
    return {"hosts": hosts, "services": services}


def check(plan: Plan, values: dict) -> None:
    groups = {s["name"]: s for s in values["services"] if "dataParallel" in s}
    assert sorted(g.name for g in plan.groups) == sorted(groups)
    for hp in plan.hosts:
        owned = [(w, f"{k} of {ps.name}") for ps in hp.services for k, w in ps.assignment.windows.items()]
        owned += [(w, f"{k} of {mp.name}") for mp in hp.members for k, w in mp.assignment.windows.items()]
        ordered = sorted(owned)
        for (w, who), (v, other) in zip(ordered, ordered[1:]):
            assert w[1] < v[0], f"host {hp.host.name}: {who} {window_text(w)} overlaps {other} {window_text(v)}"
        assert all(1024 <= w[0] <= w[1] <= MAX_PORT for w, _ in owned)
        for mp in hp.members:
            assert all(w[1] < EPHEMERAL[0] or w[0] > EPHEMERAL[1] for w in mp.assignment.windows.values())
            assert hp.host.nic_address is not None
        cards = [c for p in (*hp.services, *hp.members) for c in p.assignment.cards]
        member_cards = [c for mp in hp.members for c in mp.assignment.cards]
        assert len(set(member_cards)) == len(member_cards) and not set(member_cards) & set(cards[: len(cards) - len(member_cards)])
    for g in plan.groups:
        dp = groups[g.name]["dataParallel"]
        assert len(g.members) == dp["size"] // dp["perHost"]  # whole, never part
        ranks = [r for mp in g.members for r in mp.member.ranks]
        assert ranks == list(range(dp["size"])) and g.leader.member.leader and g.members[0].role == "leader"
        assert len({mp.host.name for mp in g.members}) == len(g.members)
        assert len({(mp.host.board, mp.host.hbm_gi_b) for mp in g.members}) == 1
        assert all(len(mp.assignment.cards) == dp["perHost"] * g.service.tensor_parallel_size for mp in g.members)
        assert (g.rpc_port is not None) == (len(g.members) > 1)


@given(fleets())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_mixed_fleets_plan_disjoint_windows_outside_the_ephemeral_ports_and_whole_groups_or_refuse(values):
    try:
        plan = plan_of(values)
    except AllocationError as err:
        note(str(err))
        event("refused")
        assert "\n" not in str(err)
        return
    event(f"planned, {len(plan.groups)} group(s) on {len({mp.host.name for g in plan.groups for mp in g.members})} host(s)")
    check(plan, values)
