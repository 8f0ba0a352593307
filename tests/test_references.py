"""Records hold references, not names: a router's plan holds its replicas' plans, a service's
deployment the deployments it starts after, a router's deployment its replicas' deployments, and
each is the very object the host holds, so no layer looks one up again by name."""

from __future__ import annotations

from allocation.planner import plan_fleet
from records.deployment import deploy
from tests.support.stacks import fleet, host, service


def _replicated():
    """Three replicas of `bge` on two hosts (so two share one), and two services sharing card 0 of npu-a."""
    return fleet(
        [host("npu-a"), host("npu-b")],
        [
            service("bge", 1, 0.4, replicas=3),
            *(service(name, 1, 0.4, host="npu-a", devices=[0]) for name in ("alpha", "beta")),
        ],
    )


def test_a_router_plan_holds_the_host_plans_of_its_replicas_in_replica_order():
    plan = plan_fleet(_replicated())
    (router,) = plan.routers
    on_hosts = [ps for _, ps in plan.services()]
    assert [ps.name for ps in router.replicas] == ["bge-1", "bge-2", "bge-3"]
    assert all(any(ps is held for held in on_hosts) for ps in router.replicas)
    assert plan.routers[0].to_json()["replicas"] == ["bge-1", "bge-2", "bge-3"]


def test_a_router_deployment_holds_the_deployments_of_its_replicas():
    deployment = deploy(plan_fleet(_replicated()))
    (rd,) = deployment.routers
    services = list(deployment.services())
    assert [sd.name for sd in rd.replicas] == ["bge-1", "bge-2", "bge-3"]
    assert all(any(sd is held for held in services) for sd in rd.replicas)
    assert [sd.plan for sd in rd.replicas] == list(rd.plan.replicas)
    assert rd.workers == tuple(sd.url for sd in rd.replicas)


def test_a_service_deployment_holds_the_deployments_it_starts_after_on_its_host():
    deployment = deploy(plan_fleet(_replicated()))
    (hd,) = [hd for hd in deployment.hosts if any(sd.name == "alpha" for sd in hd.services)]
    by_name = {sd.name: sd for sd in hd.services}
    later = [sd for sd in hd.services if sd.after]
    assert later, "a card of npu-a is shared, so one service starts after another"
    for sd in later:
        assert all(before is by_name[before.name] for before in sd.after)
        assert all(before.name < sd.name for before in sd.after), "after its predecessors in name order"
