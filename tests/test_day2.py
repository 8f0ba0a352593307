"""Day two on a pinned fleet: each routine change re-creates exactly what it must, and
`plan --against` names exactly those containers.

Each scenario runs the real program twice under Pulumi's mocks (before and after the change)
and asks the docker provider's own rule (tests/support/provider_readback.py: ForceNew attributes, and the
program's `replace_on_changes`) which containers the engine would replace; the same two configs
go through `plan --format json` and `diff_plans`, whose "will restart" list must be the same set.
"""

from __future__ import annotations

import copy

import pytest

from views.diff import diff_plans
from tests.support.provider_readback import recreates
from tests.support.pulumi_harness import CONTAINER, REMOTE_COMMAND, run_program
from tests.support.stacks import add_first, pinned_values, values_of
from tests.support.pipeline import plan_json_of


def engine_recreated(stack: str, before: dict, after: dict) -> set[str]:
    """Containers present in both runs that the engine would delete and create again."""
    old, new = (run_program(stack, v).by_name(CONTAINER) for v in (before, after))
    return {
        name.removesuffix("-container")
        for name in old.keys() & new.keys()
        if recreates(old[name].inputs, new[name].inputs, new[name].replace_on_changes)
    }


def diff_recreated(stack: str, before: dict, after: dict) -> set[str]:
    old, new = (plan_json_of(v, stack) for v in (before, after))
    return {s.name for s in diff_plans(old, new).recreated()}


def service_named(values: dict, name: str) -> dict:
    return next(s for s in values["services"] if s["name"] == name)


def remove(name: str):
    def change(values: dict) -> dict:
        values["services"] = [s for s in values["services"] if s["name"] != name]
        return values

    return change


def set_default(key: str, value):
    def change(values: dict) -> dict:
        values["defaults"] = {**values.get("defaults", {}), key: value}
        return values

    return change


def set_on(name: str, key: str, value):
    def change(values: dict) -> dict:
        service_named(values, name)[key] = value
        return values

    return change


def scale_down(name: str):
    """One replica less, and the pin of the replica that goes (pins are per replica, in order)."""

    def change(values: dict) -> dict:
        service = service_named(values, name)
        service["replicas"] -= 1
        service["replicaPins"] = service["replicaPins"][:-1]
        return values

    return change


def pin_router_base_then(name: str, image: str | None):
    """The router's base image pinned to what it is now (a first change, which alone re-creates
    nothing), then the service's image upgraded."""

    def change(values: dict) -> dict:
        service = service_named(values, name)
        service["router"] = {**service.get("router", {}), "baseImage": service.get("image") or values["defaults"]["image"]}
        if image is not None:
            service["image"] = image
        return values

    return change


def set_fleet(key: str, value):
    def change(values: dict) -> dict:
        values[key] = value
        return values

    return change


def fast_probes_were_off(values: dict) -> dict:
    """The stack as it was before the faster probes: every container probing every 30 s."""
    return {**values, "healthStartIntervalSeconds": 0}


PROD = ["bge-m3", "qwen-long", "qwen-vl"]
SCENARIOS = {
    # name: (stack, change, the containers re-created)
    "prod: a newcomer named before every service": ("prod", add_first, set()),
    "prod: the first service on card 0 removed": ("prod", remove("bge-m3"), set()),
    "prod: the last service on card 0 removed": ("prod", remove("qwen-vl"), set()),
    "prod: one service's image": ("prod", set_on("qwen-long", "image", "quay.io/ascend/vllm-ascend:v0.20.3"), {"qwen-long"}),
    "prod: one service's start timeout": ("prod", set_on("bge-m3", "startTimeoutSeconds", 2400), {"bge-m3"}),
    "prod: defaults.stopGraceSeconds": ("prod", set_default("stopGraceSeconds", 90), set(PROD)),
    "prod: defaults.logOpts": ("prod", set_default("logOpts", {"max-size": "50m", "max-file": "3"}), set(PROD)),
    "prod: defaults.restart, updated in place": ("prod", set_default("restart", "always"), set()),
    "prod: the faster health probes turned off": ("prod", set_fleet("healthStartIntervalSeconds", 0), set(PROD)),
    "prod: the fleet's dockerEngine declared 28.5": ("prod", set_fleet("dockerEngine", "28.5"), set(PROD)),
    "prod: dockerEngine 24.0, the same probes as 20.10": ("prod", set_fleet("dockerEngine", "24.0"), set()),
    "staging: a newcomer named before every service": ("staging", add_first, set()),
    "staging: the first service removed": ("staging", remove("bge-m3"), set()),
    "staging: one replica more": ("staging", set_on("bge-m3", "replicas", 4), set()),
    "staging: one replica less (and its pin)": ("staging", scale_down("bge-m3"), set()),
    "staging: a replicated service's image": (
        "staging",
        set_on("bge-m3", "image", "quay.io/ascend/vllm-ascend:v0.20.3"),
        {"bge-m3-1", "bge-m3-2", "bge-m3-3", "bge-m3-router"},
    ),
    "staging: the router's base image pinned to the current one": (
        "staging",
        pin_router_base_then("bge-m3", None),
        set(),
    ),
    "staging: a replicated service's image, its router's base pinned": (
        "staging",
        pin_router_base_then("bge-m3", "quay.io/ascend/vllm-ascend:v0.20.3"),
        {"bge-m3-1", "bge-m3-2", "bge-m3-3"},
    ),
    "staging: defaults.stopGraceSeconds": (
        "staging",
        set_default("stopGraceSeconds", 90),
        {"bge-m3-1", "bge-m3-2", "bge-m3-3", "qwen-vl", "qwen-long", "qwen-72b"},
    ),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_a_change_to_a_pinned_fleet_recreates_exactly_the_expected_containers_and_the_diff_says_so(scenario):
    stack, change, expected = SCENARIOS[scenario]
    before = pinned_values(values_of(stack), stack)
    after = change(copy.deepcopy(before))
    assert engine_recreated(stack, before, after) == expected
    assert diff_recreated(stack, before, after) == expected


@pytest.mark.parametrize("stack", ["prod", "staging"])
def test_turning_the_faster_probes_on_recreates_every_container_and_the_diff_names_each(stack):
    """The rollout of this very change: from the stack with today's 30 s probes to the default."""
    after = pinned_values(values_of(stack), stack)
    before = fast_probes_were_off(copy.deepcopy(after))
    every = {c.name.removesuffix("-container") for c in run_program(stack, after).of_type(CONTAINER)}
    assert engine_recreated(stack, before, after) == every
    assert diff_recreated(stack, before, after) == every
    old, new = (plan_json_of(v, stack) for v in (before, after))
    for s in diff_plans(old, new).recreated():
        assert "healthcheck" in s.recreate_keys, s


def three_on_one_card() -> dict:
    return {
        "hosts": [{"name": "npu-a", "address": "192.0.2.10"}],
        "services": [
            {"name": n, "model": f"/models/{n}", "memoryFraction": 0.3, "devices": [0], "host": "npu-a", "apiPort": p}
            for n, p in (("alpha", 8001), ("beta", 8002), ("gamma", 8003))
        ],
    }


@pytest.mark.parametrize("gone", ["alpha", "beta", "gamma"])
def test_removing_any_of_three_services_on_one_card_recreates_no_other(gone):
    before = pinned_values(three_on_one_card(), "three")
    after = remove(gone)(copy.deepcopy(before))
    assert engine_recreated("three", before, after) == set()
    assert diff_recreated("three", before, after) == set()


def test_three_services_on_one_card_are_created_one_after_the_other():
    """During `pulumi up` each waits for the one before it on the card (a dependency, not an input)."""
    run = run_program("three", pinned_values(three_on_one_card(), "three"))
    containers = run.by_name(CONTAINER)
    urn = {name.removesuffix("-container"): r.urn for name, r in containers.items()}
    assert urn["alpha"] not in containers["alpha-container"].dependencies
    assert urn["alpha"] in containers["beta-container"].dependencies
    assert urn["beta"] in containers["gamma-container"].dependencies
    assert urn["alpha"] not in containers["gamma-container"].dependencies, "a chain, not a star"


def test_a_restart_policy_change_is_reported_in_place_and_not_as_a_restart():
    before = pinned_values(values_of("prod"), "prod")
    after = set_default("restart", "always")(copy.deepcopy(before))
    old, new = (plan_json_of(v, "prod") for v in (before, after))
    diff = diff_plans(old, new)
    assert diff.recreated() == []
    for s in diff.changes():
        assert s.kinds() == ["updated in place"] and s.in_place == ("restart unless-stopped -> always",)


def test_a_newcomer_on_a_shared_card_runs_the_start_order_step_again_and_recreates_no_neighbour():
    """The card's order lives on the host (records.card_order), written by a command the containers
    depend on: a newcomer ranked first changes that command's script, which runs again as an update,
    and no container's inputs."""
    before = pinned_values(three_on_one_card(), "three")
    after = copy.deepcopy(before)
    after["services"].append(
        {"name": "aaa", "model": "/models/aaa", "memoryFraction": 0.05, "devices": [0], "host": "npu-a", "apiPort": 8004}
    )
    old, new = (run_program("three", v).by_name(REMOTE_COMMAND)["npu-a-start-order"] for v in (before, after))
    assert "printf '%s\\n' alpha beta gamma >" in old.inputs["create"]
    assert "printf '%s\\n' aaa alpha beta gamma >" in new.inputs["create"]
    # pulumi-command replaces a command only when its `triggers` change; a new `create` with no
    # `update` runs as the update (tests/engine/test_engine.py shows it under the real engine).
    assert "update" not in new.inputs and old.inputs.get("triggers") == new.inputs.get("triggers")
    assert engine_recreated("three", before, after) == set()
    assert diff_recreated("three", before, after) == set()
