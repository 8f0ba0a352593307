"""Properties of the planner over generated fleets with disaggregated services beside single-host ones, up to
1,000 hosts of 8 or 16 NPUs (hypothesis): no prefill or decode instance's kvPort block overlaps any window
on its host (of any service, member, instance or proxy), none runs past 65535, none lies in
AscendDirectTransport's random ports for the host's NPU count nor in the ephemeral ports, every
instance holds its cards alone and has its own engine id, and a disaggregated service is planned whole or
the plan is refused."""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from allocation import names
from allocation.errors import AllocationError
from allocation.plan import Plan
from allocation.windows import EPHEMERAL, KV_PORT, MAX_PORT, PROXY, transport_range, window_text
from tests.support.pipeline import plan_of

FRACTIONS = ["0.1", "0.3", "0.45", "0.9"]


@st.composite
def fleets(draw: st.DrawFn) -> dict:
    """Hosts of 8 NPUs (A2) and 16 (A3), single-host services (some with an API port pinned in
    AscendDirectTransport's range, which a host with a prefill or decode instance refuses) and disaggregated services of one to three instances per role."""
    count = draw(st.integers(1, 1000))
    hosts = [{"name": f"h{i:04d}", "address": f"10.{i // 250}.{i % 250}.1"} for i in range(count)]
    for h in hosts:
        if draw(st.integers(0, 3)) == 0:
            h |= {"board": "a3", "npus": 16}
    services = []
    for i in range(draw(st.integers(0, min(30, 2 * count)))):
        s = {"name": f"s{i:03d}", "model": f"/m/{i}", "tensorParallelSize": draw(st.sampled_from([1, 2, 4])),
             "memoryFraction": float(draw(st.sampled_from(FRACTIONS)))}  # fmt: skip
        if draw(st.integers(0, 3)) == 0:
            s["host"] = f"h{draw(st.integers(0, count - 1)):04d}"
        if draw(st.integers(0, 19)) == 0:
            s["apiPort"] = draw(st.integers(20000, 35999))
        services.append(s)
    for i in range(draw(st.integers(1, 5))):
        roles = {
            role: {"tensorParallelSize": draw(st.sampled_from([1, 2, 4, 8])), "memoryFraction": float(draw(st.sampled_from(["0.3", "0.45", "0.9"]))),
                   "replicas": draw(st.integers(1, 3))}
            for role in ("prefill", "decode")
        }  # fmt: skip
        pd = {"name": f"pd{i}", "model": f"/m/pd{i}", "disaggregated": roles}
        if draw(st.booleans()):
            pd["disaggregated"]["kvPool"] = {}
        services.append(pd)
    return {"hosts": hosts, "services": services, "defaults": {"image": "quay.io/ascend/vllm-ascend:v0.20.2rc1"}}


def check(plan: Plan, values: dict) -> None:
    wanted = {s["name"]: s["disaggregated"] for s in values["services"] if "disaggregated" in s}
    assert sorted(d.name for d in plan.disaggregated) == sorted(wanted)
    engine_ids = [rp.role_instance.engine_id for d in plan.disaggregated for rp in d.instances]
    assert len(set(engine_ids)) == len(engine_ids)
    for hp in plan.hosts:
        owned = [(w, f"{k} of {p.name}") for p in (*hp.services, *hp.members, *hp.roles) for k, w in p.assignment.windows.items()]
        owned += [(w, f"{PROXY.key} of {names.proxy_name(s)}") for s, ws in hp.proxies.items() for w in ws.values()]
        ordered = sorted(owned)
        for (w, who), (v, other) in zip(ordered, ordered[1:]):
            assert w[1] < v[0], f"host {hp.host.name}: {who} {window_text(w)} overlaps {other} {window_text(v)}"
        assert all(1024 <= w[0] <= w[1] <= MAX_PORT for w, _ in owned)
        random = transport_range(hp.host.npus)
        for rp in hp.roles:  # it holds its cards alone: HCCL and the KV transfer run on them
            mine = set(rp.assignment.cards)
            others = [p.name for p in (*hp.services, *hp.members, *hp.roles) if p is not rp and mine & set(p.assignment.cards)]
            assert not others, f"host {hp.host.name}: {rp.name} shares cards {rp.assignment.cards} with {others}"
            first, last = rp.kv_ports
            assert last - first + 1 == rp.service.tensor_parallel_size == len(rp.assignment.cards)
            assert last < random[0] or first > random[1], f"{rp.name} {window_text(rp.kv_ports)} in {window_text(random)}"
            assert all(w[1] < EPHEMERAL[0] or w[0] > EPHEMERAL[1] for w in rp.assignment.windows.values())
        if hp.roles:  # no window of any service there either: the transport may take it first
            assert all(w[1] < random[0] or w[0] > random[1] for w, _ in owned), hp.host.name
    for d in plan.disaggregated:
        pd = wanted[d.name]
        assert (len(d.prefill), len(d.decode)) == (pd["prefill"]["replicas"], pd["decode"]["replicas"])
        assert all(KV_PORT.key in rp.assignment.windows for rp in d.instances)


@given(fleets())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_kv_port_blocks_overlap_no_window_and_stay_out_of_the_transports_random_ports_on_every_host(values):
    try:
        plan = plan_of(values)
    except AllocationError as err:
        note(str(err))
        event("refused")
        assert "\n" not in str(err)
        return
    event(f"planned, {sum(len(d.instances) for d in plan.disaggregated)} instance(s)")
    check(plan, values)
