"""The real API server accepts what the Kubernetes target renders, next to what MindCluster's DRA
driver publishes (docs/testing.md, "Kubernetes lane").

Each stack's objects are applied twice by server-side apply: first with `dryRun=All` (every object's
refusal is collected and shown together), then for real; then the references the API server does not
check itself are checked against what it holds: each pod's claims, each claim's DeviceClass, each
pinned node.
"""

from __future__ import annotations

import pytest

from tests.kube import mindcluster
from tests.kube.apply import check_stack
from tests.kube.cluster import Refused
from tests.kube.objects import FIXTURE_HOSTS, STACKS, fixture, hosts, rendered, renderer_present

def test_the_api_server_serves_the_dra_api(cluster):
    kinds = {r["kind"] for r in cluster.client.request("GET", "/apis/resource.k8s.io/v1")["resources"]}
    assert {"DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice"} <= kinds


def test_an_8_card_node_carries_the_slice_mindcluster_would_publish(cluster, publish):
    publish({"lane-node": 8})
    stored = cluster.client.get(mindcluster.resource_slice("lane-node"))
    devices = [(d["name"], d["attributes"]["physicId"]["int"]) for d in stored["spec"]["devices"]]
    assert devices == [(f"npu-{i}", i) for i in range(8)]
    assert stored["spec"]["pool"]["name"] == "lane-node"


def test_the_device_names_of_the_driver_snapshot_read_here_are_refused(cluster):
    """`Ascend910-0` (generation_910.go at 2026-08-21) is no RFC 1123 label: mindcluster.py's note."""
    obj = mindcluster.resource_slice("lane-node-b", name_of=lambda i: f"Ascend910-{i}")
    with pytest.raises(Refused) as err:
        cluster.client.apply(obj, dry_run=True)
    assert err.value.status == 422 and "Ascend910-0" in str(err.value)


def test_a_claim_whose_selector_does_not_compile_is_refused(cluster):
    """The lane is no rubber stamp: the API server compiles each claim's CEL."""
    claim = next(o for o in fixture() if o["kind"] == "ResourceClaim")
    claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]["expression"] = (
        "device.attributes['npu.huawei.com'].physicId in [1, 2"
    )
    with pytest.raises(Refused) as err:
        cluster.client.apply(claim, dry_run=True)
    assert err.value.status == 422 and "compilation failed" in str(err.value)


def test_the_stand_in_objects_are_accepted(cluster, publish):
    check_stack(cluster.client, publish, FIXTURE_HOSTS, fixture(), "lane-fixture")


@pytest.mark.parametrize("stack", STACKS)
def test_every_rendered_object_of_a_committed_stack_is_accepted(cluster, publish, stack):
    if not renderer_present():
        pytest.skip("no views/exports/kubernetes.py on this branch: the stand-in fixture.yaml is applied instead")
    check_stack(cluster.client, publish, hosts(stack), rendered(stack), f"lane-{stack}")
