"""A multi-host service's LeaderWorkerSet against the real API server: LWS's own CRD (sigs.k8s.io/lws v0.9.0,
fetched by scripts/fetch-lws-crd.sh) installed, then every object of the multi-host example stack
(examples/Pulumi.deepseek-r1.yaml: two two-host groups beside single-host services) applied with a dry run and
then created, each pod template's claims and node checked against what the cluster holds. No LWS controller or
webhook runs: the API server checks each LeaderWorkerSet against the CRD's structural schema (types, enums,
required fields; server-side apply refuses a field the schema does not declare)."""

from __future__ import annotations

import copy

import pytest

from tests.kube.apply import check_stack
from tests.kube.cluster import Refused
from tests.kube.objects import MULTI_HOST, hosts, rendered


def test_the_api_server_serves_leaderworkerset_once_its_crd_is_installed(cluster, lws_crd):
    kinds = {r["kind"] for r in cluster.client.request("GET", "/apis/leaderworkerset.x-k8s.io/v1")["resources"]}
    assert "LeaderWorkerSet" in kinds and lws_crd["spec"]["names"]["kind"] == "LeaderWorkerSet"


def test_every_object_of_the_multi_host_example_is_accepted_and_created(cluster, publish, lws_crd):
    objects = rendered(MULTI_HOST)
    sets = [o for o in objects if o["kind"] == "LeaderWorkerSet"]
    assert [o["metadata"]["name"] for o in sets] == ["deepseek-r1-lws", "qwen3-moe-lws"]
    check_stack(cluster.client, publish, hosts(MULTI_HOST), objects, "lane-multi-host")
    stored = cluster.client.get({**sets[0], "metadata": {**sets[0]["metadata"], "namespace": "lane-multi-host"}})
    lwt = stored["spec"]["leaderWorkerTemplate"]
    assert lwt["size"] == 2 and lwt["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert lwt["workerTemplate"]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "npu-b"}


@pytest.mark.parametrize(
    "break_it, status, said",
    [
        (lambda lwt: lwt.__setitem__("restartPolicy", "RecreateGroup"), 422, "Unsupported value"),
        # Server-side apply builds a typed patch from the schema first; v1.37.2 answers its failure with a 500.
        (lambda lwt: lwt["workerTemplate"]["spec"].__setitem__("nodeSelecter", {"kubernetes.io/hostname": "npu-b"}),
         500, ".spec.leaderWorkerTemplate.workerTemplate.spec.nodeSelecter: field not declared in schema"),
    ],
    ids=["unknown-restart-policy", "misspelt-field"],
)
def test_a_broken_leaderworkerset_is_refused(cluster, lws_crd, break_it, status, said):
    """The lane is no rubber stamp: the CRD's schema is enforced."""
    lws = copy.deepcopy(next(o for o in rendered(MULTI_HOST) if o["kind"] == "LeaderWorkerSet"))
    break_it(lws["spec"]["leaderWorkerTemplate"])
    with pytest.raises(Refused) as err:
        cluster.client.apply(lws, dry_run=True)
    assert err.value.status == status and said in str(err.value), err.value
