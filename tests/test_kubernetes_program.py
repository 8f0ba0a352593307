"""The Kubernetes target under Pulumi's mocks: the real `__main__.py` with `target: kubernetes`.

Every pod lands on its planned node, every claim selects exactly its planned card, pods on a
shared card name one claim, no two pods on a node share a port window, replicas and card
neighbours wait for each other, and a day-2 change rolls exactly the Deployments `plan --against`
says restart (a changed pod template of a `Recreate` Deployment stops its pod and starts a new one;
nothing else changes)."""

from __future__ import annotations

import copy
import re

import pytest

from allocation.config import parse_fleet
from allocation.planner import plan_fleet
from allocation.windows import KINDS
from records.deployment import deploy
from tests.support.pulumi_harness import CONTAINER, run_program
from tests.support.stacks import add_first, pinned_values, values_of
from views.diff import diff_plans
from views.report import plan_json

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
CLAIM = "kubernetes:resource.k8s.io/v1:ResourceClaim"
SERVICE = "kubernetes:core/v1:Service"
STACKS = ("dev", "prod", "staging")


def k8s_values(stack: str, **settings) -> dict:
    return values_of(stack) | {"target": "kubernetes", "kubernetes": settings}


def pod(reg) -> dict:
    return reg.inputs["spec"]["template"]["spec"]


def env(reg) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod(reg)["containers"][0]["env"]}


def selected_card(claim) -> int:
    (request,) = claim.inputs["spec"]["devices"]["requests"]
    (selector,) = request["exactly"]["selectors"]
    assert request["exactly"]["count"] == 1 and request["exactly"]["deviceClassName"] == "npu.huawei.com"
    match = re.fullmatch(r"device\.attributes\['npu\.huawei\.com'\]\.physicId == (\d+)", selector["cel"]["expression"])
    assert match, selector
    return int(match.group(1))


@pytest.fixture(scope="module", params=STACKS)
def stack_run(request):
    stack = request.param
    values = k8s_values(stack)
    return stack, deploy(plan_fleet(parse_fleet(stack, values))), run_program(stack, values)


def test_the_kubernetes_target_creates_no_docker_container(stack_run):
    _, deployment, run = stack_run
    assert not run.of_type(CONTAINER)
    assert {r.name for r in run.of_type(DEPLOYMENT)} == {f"deployment-{n}" for n in
        [sd.name for sd in deployment.services()] + [rd.name for rd in deployment.routers]}  # fmt: skip


def test_every_pod_is_on_its_planned_node_and_its_claims_select_exactly_its_planned_cards(stack_run):
    _, deployment, run = stack_run
    deployments, claims = run.by_name(DEPLOYMENT), {r.inputs["metadata"]["name"]: r for r in run.of_type(CLAIM)}
    for sd in deployment.services():
        spec = pod(deployments[f"deployment-{sd.name}"])
        assert spec["nodeSelector"] == {"kubernetes.io/hostname": sd.plan.assignment.host_name}
        named = [claims[r["resourceClaimName"]] for r in spec["resourceClaims"]]
        assert sorted(selected_card(c) for c in named) == sorted(sd.plan.assignment.cards)
        assert {c.inputs["metadata"]["labels"]["ascend-fleet/host"] for c in named} == {sd.plan.assignment.host_name}


def test_pods_on_a_shared_card_name_one_claim_and_wait_for_the_one_before_them(stack_run):
    _, deployment, run = stack_run
    deployments = run.by_name(DEPLOYMENT)
    urns = {r.urn: r.name for r in run.registrations}
    for hd in deployment.hosts:
        for card in hd.shared_cards:
            on_card = [sd for sd in hd.services if card in sd.plan.assignment.cards]
            claim_names = {
                r["resourceClaimName"] for sd in on_card for r in pod(deployments[f"deployment-{sd.name}"])["resourceClaims"]
                if r["name"] == f"npu-{card}"
            }  # fmt: skip
            assert len(on_card) > 1 and claim_names == {f"{hd.name}-npu-{card}"}
        for sd in hd.services:
            waits = {urns[u] for u in deployments[f"deployment-{sd.name}"].dependencies}
            assert {f"deployment-{a.name}" for a in sd.after} <= waits


def test_no_two_pods_on_a_node_share_a_port_window(stack_run):
    """Each pod's env carries its planned windows, and on one node no two windows meet."""
    _, deployment, run = stack_run
    deployments = run.by_name(DEPLOYMENT)
    by_node: dict[str, list[tuple[str, str, range]]] = {}
    for sd in deployment.services():
        reg = deployments[f"deployment-{sd.name}"]
        node = pod(reg)["nodeSelector"]["kubernetes.io/hostname"]
        for kind in (k for k in KINDS if k.env and k.key in sd.plan.assignment.windows):
            first, last = sd.plan.assignment.windows[kind.key]
            assert env(reg)[kind.env] == kind.text((first, last))
            by_node.setdefault(node, []).append((sd.name, kind.key, range(first, last + 1)))
    for node, windows in by_node.items():
        for i, (a, ka, pa) in enumerate(windows):
            for b, kb, pb in windows[i + 1 :]:
                assert not set(pa) & set(pb), f"node {node}: {a} {ka} and {b} {kb} overlap"
    assert by_node


def test_replicas_roll_one_at_a_time_and_the_router_waits_for_the_first():
    run = run_program("staging", k8s_values("staging"))
    urns = {r.urn: r.name for r in run.registrations}
    deployments = run.by_name(DEPLOYMENT)
    waits = {name: {urns[u] for u in reg.dependencies} for name, reg in deployments.items()}
    assert "deployment-bge-m3-1" in waits["deployment-bge-m3-2"] and "deployment-bge-m3-2" in waits["deployment-bge-m3-3"]
    assert "deployment-bge-m3-1" in waits["deployment-bge-m3-router"]
    assert all(reg.delete_before_replace for reg in deployments.values())
    assert all(r.delete_before_replace and r.replace_on_changes == ("spec",) for r in run.of_type(CLAIM))


def rolled(stack: str, before: dict, after: dict) -> tuple[set[str], set[str]]:
    """(objects of both runs whose inputs differ, objects only in one run)."""
    old, new = ({r.name: r.inputs for r in run_program(stack, v).registrations if r.custom} for v in (before, after))
    return {n for n in old.keys() & new.keys() if old[n] != new[n]}, old.keys() ^ new.keys()


def diff_restarts(stack: str, before: dict, after: dict) -> set[str]:
    old, new = (plan_json(deploy(plan_fleet(parse_fleet(stack, v)))) for v in (before, after))
    return {s.name for s in diff_plans(old, new).recreated()}


def with_image(values: dict, service: str, image: str) -> dict:
    changed = copy.deepcopy(values)
    next(s for s in changed["services"] if s["name"] == service)["image"] = image
    return changed


def test_a_new_image_rolls_exactly_the_deployment_the_plan_diff_names():
    before = pinned_values(k8s_values("prod"), "prod")
    after = with_image(before, "qwen-long", "quay.io/ascend/vllm-ascend:v0.20.2rc2")
    changed, added_or_removed = rolled("prod", before, after)
    assert diff_restarts("prod", before, after) == {"qwen-long"}
    assert changed == {"deployment-qwen-long"} and not added_or_removed


def test_a_newcomer_on_a_shared_card_restarts_no_running_pod():
    before = pinned_values(k8s_values("prod"), "prod")
    after = add_first(copy.deepcopy(before))
    changed, added = rolled("prod", before, after)
    # The host's device-share ConfigMap names the newcomer among the card's users: no pod reads it.
    assert diff_restarts("prod", before, after) == set() and changed <= {"configmap-npu-a-device-share"}
    assert {"deployment-a-embed", "service-a-embed"} <= added
