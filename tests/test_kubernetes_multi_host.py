"""A multi-host service on the Kubernetes target: one LeaderWorkerSet (kubernetes-sigs/lws v0.9.0,
`api/leaderworkerset/v1`) of its two members, leader and follower each on its planned host, cards, network
and flags, valid against LWS's own CRD (fetched by scripts/fetch-lws-crd.sh, never committed) and each pod
template against Kubernetes 1.34; the Service of the leader's API; the program's resources under Pulumi's
mocks; `doctor` judging each member's pod. A service over more than two hosts is refused in one paragraph
naming it, before any object is written or applied (views/exports/kubernetes.py `refuse_groups`)."""

from __future__ import annotations

import copy
from pathlib import Path

import kubernetes_validate
import pulumi
import pytest

from allocation.errors import ConfigError
from cli.stackfile import StackFile, stack_values
from ops.doctor.kube_findings import planned
from tests.support.lws import crd_path, validator
from tests.support.pipeline import deployment_of
from tests.support.pulumi_harness import run_program
from views.endpoints import endpoints
from views.exports.kubernetes import claim_name, manifests

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "Pulumi.deepseek-r1.yaml"
KUBERNETES_VERSION = "1.34.0"
LWS = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"
SETTINGS = {"dra-pod": {}, "fallback": {"dra": False, "network": "pod"}}


def example_values(**kubernetes) -> dict:
    return stack_values(StackFile("deepseek-r1", EXAMPLE)) | {"target": "kubernetes", "kubernetes": kubernetes}


def objects(values: dict) -> dict[tuple[str, str], dict]:
    return {(m.kind, m.name): dict(m.obj) for m in manifests(deployment_of(values, "deepseek-r1"))}


def three_hosts(values: dict) -> dict:
    """deepseek-r1 over three hosts (DP 6, 2 per host), a fifth host added for it."""
    wide = copy.deepcopy(values)
    wide["hosts"].append({"name": "npu-e", "address": "10.20.0.15", "nic": {"interface": "enp189s0f0"}})
    service = next(s for s in wide["services"] if s["name"] == "deepseek-r1")
    service |= {"dataParallel": {"size": 6, "perHost": 2, "expertParallel": True}, "hosts": ["npu-a", "npu-b", "npu-e"]}
    return wide


def test_a_two_host_service_is_one_leaderworkerset_whose_leader_and_worker_are_its_planned_members():
    values = example_values()
    deployment = deployment_of(values, "deepseek-r1")
    rendered = objects(values)
    for gd in deployment.groups:
        lws = rendered[("LeaderWorkerSet", f"{gd.name}-lws")]
        spec = lws["spec"]
        assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1" and spec["replicas"] == 1
        assert spec["startupPolicy"] == "LeaderCreated"
        assert spec["rolloutStrategy"]["rollingUpdateConfiguration"] == {"maxUnavailable": 1, "maxSurge": 0}
        lwt = spec["leaderWorkerTemplate"]
        assert lwt["size"] == len(gd.members) == 2 and lwt["restartPolicy"] == "RecreateGroupOnPodRestart"
        for md, template in zip(gd.members, (lwt["leaderTemplate"], lwt["workerTemplate"])):
            host, cards = md.plan.assignment.host_name, sorted(md.plan.assignment.cards)
            pod = template["spec"]
            (c,) = pod["containers"]
            assert template["metadata"]["labels"]["ascend-fleet/instance"] == md.name
            assert pod["nodeSelector"] == {"kubernetes.io/hostname": host}
            assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet" and "securityContext" not in pod
            assert [r["resourceClaimName"] for r in pod["resourceClaims"]] == [claim_name(host, card) for card in cards]
            assert c["args"] == list(md.spec.command) and {e["name"]: e["value"] for e in c["env"]} == dict(md.spec.env)
            assert c["livenessProbe"]["exec"]["command"][2] == md.spec.healthcheck.test[1]
        leader, worker = (t["spec"]["containers"][0] for t in (lwt["leaderTemplate"], lwt["workerTemplate"]))
        assert "--headless" not in leader["args"] and leader["ports"][0]["containerPort"] == gd.plan.leader.assignment.api_port
        start = gd.members[1].plan.member.ranks.start
        assert worker["args"][worker["args"].index("--data-parallel-start-rank") + 1] == str(start) == "2"
        assert "--headless" in worker["args"] and "ports" not in worker
        for c in (leader, worker):
            assert c["args"][c["args"].index("--data-parallel-address") + 1] == gd.plan.address
        env = {e["name"]: e["value"] for e in worker["env"]}
        assert env["HCCL_IF_IP"] == gd.members[1].plan.host.nic_address != gd.plan.address


def test_the_leaders_api_is_the_services_own_service_and_every_members_card_has_its_claim():
    rendered = objects(example_values())
    service = rendered[("Service", "deepseek-r1")]
    assert service["spec"]["selector"] == {"ascend-fleet/instance": "deepseek-r1-node0"}
    assert [p["port"] for p in service["spec"]["ports"]] == [8000]
    claims = {name for kind, name in rendered if kind == "ResourceClaim"}
    assert {claim_name(h, c) for h in ("npu-a", "npu-b") for c in range(8)} <= claims


def test_the_groups_endpoint_is_its_services_in_cluster_name_as_the_program_exports_it():
    values = example_values(namespace="ascend")
    (group,) = [e for e in endpoints(deployment_of(values, "deepseek-r1")) if e.name == "deepseek-r1"]
    assert group.endpoint == "http://deepseek-r1.ascend.svc:8000/v1" and group.host == "npu-a"


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_each_leaderworkerset_validates_against_lws_crd_and_its_pod_templates_against_kubernetes(setting):
    check = validator(crd_path())
    rendered = objects(example_values(**SETTINGS[setting]))
    sets = [o for (kind, _), o in rendered.items() if kind == "LeaderWorkerSet"]
    assert len(sets) == 2
    for lws in sets:
        errors = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in check.iter_errors(lws)]
        assert not errors, errors
        lwt = lws["spec"]["leaderWorkerTemplate"]
        for role in ("leaderTemplate", "workerTemplate"):
            template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": role.lower()}, "template": lwt[role]}
            kubernetes_validate.validate(template, KUBERNETES_VERSION, strict=True)


def test_the_crd_validator_refuses_a_misspelt_field_and_a_restart_policy_lws_does_not_know():
    check = validator(crd_path())
    lws = objects(example_values())[("LeaderWorkerSet", "deepseek-r1-lws")]
    assert not list(check.iter_errors(lws))
    misspelt = copy.deepcopy(lws)
    misspelt["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["nodeSelecter"] = {"kubernetes.io/hostname": "npu-b"}
    unknown = copy.deepcopy(lws)
    unknown["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "RecreateGroup"
    assert list(check.iter_errors(misspelt)) and list(check.iter_errors(unknown))


def test_the_program_creates_each_group_as_one_leaderworkerset_after_its_members_nodes():
    run = run_program("deepseek-r1", example_values())
    urns = {r.urn: r.name for r in run.registrations}
    sets = run.by_name(LWS)
    assert set(sets) == {"leaderworkerset-deepseek-r1-lws", "leaderworkerset-qwen3-moe-lws"}
    lws = sets["leaderworkerset-deepseek-r1-lws"]
    assert lws.inputs["spec"]["leaderWorkerTemplate"]["size"] == 2 and lws.delete_before_replace
    waits = {urns[u] for u in lws.dependencies}
    assert {f"resourceclaim-{claim_name(h, c)}" for h in ("npu-a", "npu-b") for c in range(8)} <= waits
    assert not [r for r in run.registrations if r.name.startswith("deployment-deepseek-r1")]
    services = run.stack_outputs["services"]
    assert services["deepseek-r1"] == {"endpoint": "http://deepseek-r1.default.svc:8000/v1", "members": ["deepseek-r1-node0", "deepseek-r1-node1"]}
    assert services["deepseek-r1-node1"]["role"] == "follower" and services["deepseek-r1-node1"]["host"] == "npu-b"


def test_doctor_plans_one_pod_per_member_with_its_host_and_claims():
    pods, _ = planned(deployment_of(example_values(), "deepseek-r1"))
    members = {p.name: p for p in pods if p.name.startswith("deepseek-r1-node")}
    assert sorted(members) == ["deepseek-r1-node0", "deepseek-r1-node1"]
    assert members["deepseek-r1-node1"].host == "npu-b" and members["deepseek-r1-node1"].owner == "leaderworkerset deepseek-r1-lws"
    assert members["deepseek-r1-node1"].claims == tuple(claim_name("npu-b", c) for c in range(8))


def test_a_service_whose_leaderworkerset_name_is_too_long_for_its_statefulsets_labels_is_refused():
    values = example_values()
    long = "d" * 47
    next(s for s in values["services"] if s["name"] == "deepseek-r1")["name"] = long
    with pytest.raises(ConfigError) as err:
        manifests(deployment_of(values, "deepseek-r1"))
    assert str(err.value) == (
        f"service {long} is 47 characters long; on Kubernetes it is the LeaderWorkerSet {long}-lws, whose StatefulSets' "
        "revision labels allow at most 50: shorten the service's name"
    )


SAID = (
    "stack deepseek-r1: the Kubernetes target deploys a service over at most 2 hosts: deepseek-r1 over npu-a, npu-b, "
    "npu-e (dataParallel). Such a service is one LeaderWorkerSet (kubernetes-sigs/lws, api/leaderworkerset/v1), whose "
    "one worker template cannot pin each follower to its own host, cards and windows"
)


def test_a_service_over_three_hosts_is_refused_in_one_paragraph_naming_it():
    with pytest.raises(ConfigError) as err:
        manifests(deployment_of(three_hosts(example_values()), "deepseek-r1"))
    assert str(err.value).startswith(SAID) and "\n" not in str(err.value)
    assert "nothing was written or applied" in str(err.value) and "docs/kubernetes.md" in str(err.value)


@pytest.mark.parametrize("output", [False, True])
def test_render_format_kubernetes_refuses_it_and_writes_nothing(cli, tmp_path, output):
    import yaml

    stack = tmp_path / "Pulumi.deepseek-r1.yaml"
    config = {f"ascend-fleet:{k}": v for k, v in three_hosts(example_values()).items()}
    stack.write_text(yaml.safe_dump({"config": config}), encoding="utf-8")
    folder = tmp_path / "out"
    result = cli("render", "--config", str(stack), "--format", "kubernetes", *(["--output", str(folder)] if output else []))
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(f"error: {SAID}") and result.stderr.count("\n") == 1
    assert not folder.exists()


def test_the_kubernetes_target_refuses_it_as_one_run_error_before_any_resource():
    with pytest.raises(pulumi.RunError) as err:
        run_program("deepseek-r1", three_hosts(example_values()))
    assert str(err.value).startswith(SAID) and "\n" not in str(err.value) and err.value.__cause__ is None
