"""Placement respects pinned ports as it respects pinned cards: a service whose pinned windows (or, with
`hcclPortRanges: false`, HCCL's default NPU port) would clash on a host goes to a host where they do
not, instead of the plan refusing a fleet that fits."""

from __future__ import annotations

import pytest

from allocation.errors import AllocationError
from allocation.planner import plan_fleet
from tests.support.stacks import fleet, host, service


def where(plan) -> dict[str, str]:
    return {ps.name: hp.host.name for hp in plan.hosts for ps in hp.services}


def api_ports(plan) -> dict[str, int]:
    return {ps.name: ps.assignment.windows["apiPort"][0] for hp in plan.hosts for ps in hp.services}


def test_two_services_pinned_to_one_api_port_go_to_two_hosts():
    plan = plan_fleet(fleet([host("npu-a"), host("npu-b")], [
        service("a", 1, 0.4, apiPort=8000), service("b", 1, 0.4, apiPort=8000),
    ]))  # fmt: skip
    assert where(plan) == {"a": "npu-a", "b": "npu-b"} and api_ports(plan) == {"a": 8000, "b": 8000}


def test_a_pinned_api_port_a_host_reserves_goes_to_a_host_that_does_not():
    plan = plan_fleet(fleet([host("npu-a", reservedPorts=[8000]), host("npu-b")], [service("a", 1, 0.4, apiPort=8000)]))
    assert where(plan) == {"a": "npu-b"}


def test_a_service_keeping_hccls_default_npu_port_avoids_a_host_where_a_pin_covers_it():
    plan = plan_fleet(fleet([host("npu-a"), host("npu-b")], [
        service("mc2", 1, 0.4, hcclPortRanges=False),
        service("pinned", 1, 0.4, hcclNpuSocketPortRange=[16666, 16681]),
    ]))  # fmt: skip
    assert where(plan)["mc2"] != where(plan)["pinned"]


def test_replicas_with_pinned_ports_spread_to_hosts_where_their_ports_are_free():
    plan = plan_fleet(fleet([host("npu-a"), host("npu-b")], [
        service("a", 1, 0.2, apiPort=8000),
        service("r", 1, 0.2, replicas=2, replicaPins=[{"apiPort": 8000}, {"apiPort": 8001}], hosts=["npu-a", "npu-b"]),
    ]))  # fmt: skip
    assert where(plan)["r-1"] == "npu-b" and api_ports(plan)["r-1"] == 8000


def test_a_service_pinned_to_a_host_goes_first_and_a_free_one_with_its_port_goes_elsewhere():
    plan = plan_fleet(fleet([host("npu-a"), host("npu-b")], [
        service("a", 1, 0.4, apiPort=8000), service("b", 1, 0.4, apiPort=8000, host="npu-a"),
    ]))  # fmt: skip
    assert where(plan) == {"a": "npu-b", "b": "npu-a"}


def test_a_fleet_whose_pinned_ports_fit_on_no_host_is_refused_naming_the_clash():
    with pytest.raises(AllocationError) as caught:
        plan_fleet(fleet([host("npu-a")], [service("a", 1, 0.4, apiPort=8000), service("b", 1, 0.4, apiPort=8000)]))
    assert "apiPort of b 8000 overlaps apiPort of a 8000" in str(caught.value), str(caught.value)


def test_a_service_pinned_to_a_host_where_its_port_is_taken_is_told_the_clash():
    with pytest.raises(AllocationError) as caught:
        plan_fleet(fleet([host("npu-a"), host("npu-b")], [
            service("a", 1, 0.4, apiPort=8000, host="npu-a"), service("b", 1, 0.4, apiPort=8000, host="npu-a"),
        ]))  # fmt: skip
    assert "host npu-a: apiPort of b 8000 overlaps apiPort of a 8000" in str(caught.value), str(caught.value)


def test_the_order_of_the_services_does_not_change_where_pinned_ports_send_them():
    services = [service("a", 1, 0.4, apiPort=8000), service("b", 1, 0.4, apiPort=8000), service("c", 2, 0.3)]
    hosts = [host("npu-a"), host("npu-b")]
    assert where(plan_fleet(fleet(hosts, services))) == where(plan_fleet(fleet(hosts[::-1], services[::-1])))
