"""Renaming a service with `previousNames`: an update of the same resources, never a new container.

Pulumi creates a resource with a new URN before it deletes the old one, and the new container
needs the old one's cards and ports. The program therefore gives every resource of a renamed
service an alias to its old name; these tests run the real program under the mocks before and
after a rename, resolve each alias to the URN it names (as the engine does: pulumi
pkg/resource/deploy/step_generator.go collapseAliasToUrn), and require every resource to find
its old self with the same inputs, so nothing is created, deleted or replaced.
"""

from __future__ import annotations

import copy
import json
import re

import pytest

from allocation.config import parse_fleet
from views.diff import diff_plans, render_diff
from allocation.errors import ConfigError
from views.report import plan_json
from cli.pin import pin_stack_file, stack_pins
from cli.stackfile import StackFile, stack_values
from views.exports.render import render
from tests.support import doctor
from tests.support.stacks import host, service
from tests.support.pulumi_harness import CONTAINER, MODEL_SERVICE, PROJECT, PROJECT_ROOT, ROUTER, Registration, Run, run_program
from tests.support.pipeline import deployment_of, plan_of

STACK = "urn:pulumi:{stack}::" + PROJECT + "::"


def values_of(stack: str) -> dict:
    return stack_values(StackFile(stack, PROJECT_ROOT / f"Pulumi.{stack}.yaml"))


def pinned(stack: str) -> dict:
    """The stack's values with every service pinned where the planner puts it today."""
    values = values_of(stack)
    pins = stack_pins(plan_of(values, stack))
    for entry in values["services"]:
        entry.update({k: list(v) if isinstance(v, list) else v for k, v in pins[entry["name"]].items()})
    return values


def renamed(values: dict, old: str, new: str) -> dict:
    out = copy.deepcopy(values)
    entry = next(s for s in out["services"] if s["name"] == old)
    entry.update(name=new, previousNames=[old])
    return out


def urn(stack: str, parent: str, typ: str, name: str) -> str:
    """A URN as the engine makes it (pulumi resource.CreateURN): the parent's type chain, not its name,
    and none for a child of the root stack; then the resource's own type and name."""
    chain = parent.split("::")[2] + "$" if parent else ""
    return STACK.format(stack=stack) + chain + typ + "::" + name


def engine_urns(stack: str, run: Run) -> dict[str, str]:
    """Each registration's URN as the engine would make it, by the mock's URN. (The mock monitor
    keeps only the parent's last type in a child's URN, so its URNs cannot show what an alias of a
    grandchild resolves to.) Parents register before their children."""
    out: dict[str, str] = {}
    for reg in run.registrations:
        out[reg.urn] = urn(stack, out.get(reg.parent, ""), reg.type, reg.name)
    return out


def alias_urns(stack: str, reg: Registration, engine: dict[str, str]) -> list[str]:
    """The old URNs a registration's aliases name, as the engine's collapseAliasToUrn resolves them:
    an empty field of a spec is the resource's own (its current parent included)."""
    out = []
    for a in reg.aliases:
        if "urn" in a:
            out.append(a["urn"])
        else:
            parent = "" if a["noParent"] else engine.get(a["parentUrn"] or reg.parent, "")
            out.append(urn(stack, parent, a["type"] or reg.type, a["name"] or reg.name))
    return out


def compare(stack: str, before: Run, after: Run) -> tuple[dict[str, str], list[str]]:
    """New URN -> the old URN it resolves to (its own, else an alias's), engine URNs; and every
    problem found: a resource that finds no old self (a create), one with other inputs (an update or
    a replacement), an old resource nothing resolves to (a delete). All of them, sorted: the mocks
    register concurrently, so which one comes first is not fixed."""
    old_engine, new_engine = engine_urns(stack, before), engine_urns(stack, after)
    old = {old_engine[r.urn]: r for r in before.registrations}
    found, problems = {}, []
    for reg in after.registrations:
        mine = new_engine[reg.urn]
        candidates = [mine] + alias_urns(stack, reg, new_engine)
        hit = next((u for u in candidates if u in old), None)
        if hit is None:
            problems.append(f"{name_of(mine)} would be created")
        else:
            found[mine] = hit
            if old[hit].inputs != reg.inputs:
                problems.append(f"{name_of(mine)} changes its inputs against {name_of(hit)}")
    problems += [f"{name_of(u)} would be deleted" for u in old if u not in found.values()]
    return found, sorted(problems)


def matches(stack: str, before: Run, after: Run) -> dict[str, str]:
    """The resolution of `compare`; fails unless nothing is created, changed or deleted."""
    found, problems = compare(stack, before, after)
    assert not problems, "; ".join(problems)
    return found


def name_of(found_urn: str) -> str:
    return found_urn.rsplit("::", 1)[1]


SPEC = {"type": "", "parentUrn": "", "noParent": False}


def test_renaming_a_pinned_service_aliases_its_component_and_container_and_changes_nothing_else():
    before_values = pinned("prod")
    before = run_program("prod", before_values)
    after = run_program("prod", renamed(before_values, "qwen-vl", "qwen-vision"))
    found = matches("prod", before, after)

    component = after.by_name(MODEL_SERVICE)["qwen-vision"]
    container = after.by_name(CONTAINER)["qwen-vision-container"]
    assert component.aliases == ({"name": "qwen-vl", **SPEC},)
    assert container.aliases == ({"name": "qwen-vl-container", **SPEC},)
    prefix = "urn:pulumi:prod::ascend-fleet::ascend-fleet:index:ModelService"
    assert {u: old for u, old in found.items() if u != old} == {
        f"{prefix}::qwen-vision": f"{prefix}::qwen-vl",
        f"{prefix}$docker:index/container:Container::qwen-vision-container":
            f"{prefix}$docker:index/container:Container::qwen-vl-container",
    }, "the component and its container resolve to their old URNs, and nothing else is renamed"  # fmt: skip
    assert container.inputs["name"] == "qwen-vl", "the docker name stays: the provider replaces on a new name"
    assert all(not r.aliases for r in after.registrations if r not in (component, container))
    assert set(after.stack_outputs["services"]) == {"bge-m3", "qwen-long", "qwen-vision"}


def test_without_previous_names_a_rename_creates_a_new_container():
    values = pinned("prod")
    without = renamed(values, "qwen-vl", "qwen-vision")
    del next(s for s in without["services"] if s["name"] == "qwen-vision")["previousNames"]
    _, problems = compare("prod", run_program("prod", values), run_program("prod", without))
    assert problems == [
        "npu-a-check changes its inputs against npu-a-check",  # it names the containers on its cards
        # It names the plan's own containers, the only ones heldCards: stopHolders may stop: it runs
        # again (an update of a script that sets nothing new), restarting nothing.
        "npu-a-device-share changes its inputs against npu-a-device-share",
        "npu-a-start-order changes its inputs against npu-a-start-order",  # card 0's order names them too
        "qwen-vision would be created",
        "qwen-vision-container would be created",
        "qwen-vl would be deleted",
        "qwen-vl-container would be deleted",
    ]


def test_renaming_a_replicated_service_aliases_its_replicas_router_and_their_children():
    before_values = pinned("staging")
    before = run_program("staging", before_values)
    after = run_program("staging", renamed(before_values, "bge-m3", "bge-embed"))
    found = matches("staging", before, after)
    moved = {name_of(u): name_of(old) for u, old in found.items() if u != old}
    assert moved == {
        **{f"bge-embed-{i}": f"bge-m3-{i}" for i in (1, 2, 3)},
        **{f"bge-embed-{i}-container": f"bge-m3-{i}-container" for i in (1, 2, 3)},
        "bge-embed-router": "bge-m3-router",
        "bge-embed-router-image": "bge-m3-router-image",
        "bge-embed-router-workers": "bge-m3-router-workers",
        "bge-embed-router-container": "bge-m3-router-container",
        **{f"bge-embed-{i}-serves": f"bge-m3-{i}-serves" for i in (1, 2, 3)},
    }
    assert after.by_name(ROUTER)["bge-embed-router"].aliases == ({"name": "bge-m3-router", **SPEC},)
    assert after.by_name(CONTAINER)["bge-embed-router-container"].inputs["name"] == "bge-m3-router"


@pytest.mark.parametrize(
    ("previous", "expected"),
    [
        (["qwen-long"], "previousNames gives qwen-long, the name of a current service, replica or router"),
        (["qwen-vision"], "previousNames gives qwen-vision, the name of a current service"),
        (["Qwen"], "previousNames[0]: String should match pattern"),
        ([], "previousNames: List should have at least 1 item"),
    ],
)
def test_bad_previous_names_are_refused_with_a_message_naming_them(previous, expected):
    values = renamed(values_of("prod"), "qwen-vl", "qwen-vision")
    next(s for s in values["services"] if s["name"] == "qwen-vision")["previousNames"] = previous
    with pytest.raises(ConfigError, match=re.escape(expected)):
        parse_fleet("prod", values)


def test_a_previous_name_listed_by_two_services_or_naming_a_current_replica_is_refused():
    values = {
        "hosts": [host()],
        "services": [service("a", previousNames=["old"]), service("b", previousNames=["old"])],
    }
    with pytest.raises(ConfigError, match="service b: previousNames lists old, which service a lists too"):
        parse_fleet("t", values)
    values["services"] = [service("r", 1, 0.1, replicas=2), service("s", 1, 0.1, previousNames=["r-2"])]
    with pytest.raises(ConfigError, match="previousNames gives r-2, the name of a current service, replica or router"):
        parse_fleet("t", values)
    values["services"] = [service("x-1", 1, 0.1), service("y", 1, 0.1, replicas=2, previousNames=["x"])]
    with pytest.raises(ConfigError, match="service y: previousNames gives x-1"):
        parse_fleet("t", values)


def test_pin_writes_a_renamed_services_pins_under_its_new_name_and_keeps_its_previous_names(tmp_path):
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(
        "config:\n  ascend-fleet:hosts:\n    - name: npu-a\n      address: 192.0.2.10\n"
        "  ascend-fleet:services:\n    - name: qwen-vision\n      previousNames: [qwen-vl]\n"
        "      model: /m/qwen\n      tensorParallelSize: 4\n      memoryFraction: 0.85\n"
    )
    plan = plan_of(stack_values(StackFile("t", path)), "t")
    assert pin_stack_file(path, plan) == ["qwen-vision"]
    entry = stack_values(StackFile("t", path))["services"][0]
    assert entry["name"] == "qwen-vision" and entry["previousNames"] == ["qwen-vl"]
    assert entry["devices"] == [0, 1, 2, 3] and entry["host"] == "npu-a"
    assert "previousNames: [qwen-vl]" in path.read_text()


def plan_deployment(stack: str, values: dict):
    return deployment_of(values, stack)


def plan_doc(stack: str, values: dict) -> dict:
    return plan_json(plan_deployment(stack, values))


def test_plan_against_reports_a_rename_as_renamed_not_as_removed_and_added():
    before = pinned("prod")
    diff = diff_plans(plan_doc("prod", before), plan_doc("prod", renamed(before, "qwen-vl", "qwen-vision")))
    assert [(s.name, s.lines()) for s in diff.changes()] == [("qwen-vision", [("renamed", "qwen-vl -> qwen-vision")])]
    assert diff.summary() == "1 changed, 0 added, 0 removed, 2 unchanged"
    assert "| `npu-a` | `qwen-vision` | renamed | `qwen-vl -> qwen-vision` |" in render_diff(diff, "markdown")
    doc = json.loads(render_diff(diff, "json"))
    assert next(s for s in doc["services"] if s["name"] == "qwen-vision")["renamedFrom"] == "qwen-vl"
    assert doc["recreatedCount"] == 0, "the diff lists no container to re-create, as the program re-creates none"


def test_plan_against_reports_each_replica_and_the_router_of_a_renamed_service_as_renamed():
    before = pinned("staging")
    diff = diff_plans(plan_doc("staging", before), plan_doc("staging", renamed(before, "bge-m3", "bge-embed")))
    assert {s.name: s.lines() for s in diff.changes()} == {
        n: [("renamed", f"{n.replace('bge-embed', 'bge-m3')} -> {n}")]
        for n in ("bge-embed-1", "bge-embed-2", "bge-embed-3", "bge-embed-router")
    }
    assert json.loads(render_diff(diff, "json"))["recreatedCount"] == 0


def test_doctor_finds_the_containers_a_renamed_service_kept_and_reports_nothing():
    original = deployment_of(doctor.make_fleet())
    values = {"hosts": [host("npu-a")], "services": [
        service("alpha", 1, 0.4, devices=[0]),
        service("beta", 1, 0.4, devices=[0]),
        # Renamed only: the model stays the one gamma served (a new model would be command drift).
        service("delta", 2, 0.5, devices=[2, 3], previousNames=["gamma"], model="/models/gamma"),
    ]}  # fmt: skip
    after = deployment_of(values)
    live = doctor.clean_facts(original)  # the host as it runs since before the rename
    assert doctor.findings(original, live) == []
    assert doctor.findings(after, live) == []


def test_a_renamed_replicated_service_renders_the_same_compose_file():
    before = pinned("staging")
    old = render(plan_deployment("staging", before), "compose")
    assert render(plan_deployment("staging", renamed(before, "bge-m3", "bge-embed")), "compose") == old


@pytest.mark.parametrize("listed", ["old-1", "old-2", "old-router"])
@pytest.mark.parametrize("order", ["implier first", "lister first"])
@pytest.mark.parametrize("replicas", [1, 2])
def test_a_previous_name_that_another_services_previous_name_implies_is_refused_naming_both(listed, order, replicas):
    """`a` was `old` with two replicas: containers `old-1`, `old-2` and router `old-router` still run.
    A second service claiming one of them under previousNames would alias two resources to one old one."""
    a = service("a", 1, 0.1, replicas=2, previousNames=["old"])
    b = service("b", 1, 0.1, replicas=replicas, previousNames=[listed])
    values = {"hosts": [host()], "services": [a, b] if order == "implier first" else [b, a]}
    with pytest.raises(ConfigError) as caught:
        parse_fleet("t", values)
    message = str(caught.value)
    assert f"previousNames old of service a implies {listed}" in message, message
    assert "service b" in message and "\n" not in message, message


def test_previous_names_of_two_services_that_imply_no_common_name_pass():
    a = service("a", 1, 0.1, replicas=2, previousNames=["old"])
    b = service("b", 1, 0.1, replicas=2, previousNames=["old-one", "older"])
    assert parse_fleet("t", {"hosts": [host()], "services": [a, b]}).services[1].previous_names == ["old-one", "older"]


# --- a rename back: a -> b -> a ----------------------------------------------


def renamed_back(values: dict, now: str, back: str, previous: list[str] | None) -> dict:
    """`now` (renamed from `back` earlier) takes its first name again, with `previous` (None: none)."""
    out = copy.deepcopy(values)
    entry = next(s for s in out["services"] if s["name"] == now)
    entry["name"] = back
    entry.pop("previousNames", None)
    if previous is not None:
        entry["previousNames"] = previous
    return out


def served_model_name(reg: Registration) -> str:
    command = list(reg.inputs["command"])
    return command[command.index("--served-model-name") + 1]


def test_a_rename_back_that_lists_the_whole_history_keeps_the_container_and_its_served_model_name():
    first = pinned("prod")
    away = renamed(first, "qwen-vl", "qwen-vision")
    back = renamed_back(away, "qwen-vision", "qwen-vl", ["qwen-vl", "qwen-vision"])
    before, after = run_program("prod", away), run_program("prod", back)
    found = matches("prod", before, after)  # nothing created, changed or deleted
    assert {name_of(u): name_of(old) for u, old in found.items() if u != old} == {
        "qwen-vl": "qwen-vision",
        "qwen-vl-container": "qwen-vision-container",
    }
    assert after.by_name(MODEL_SERVICE)["qwen-vl"].aliases == ({"name": "qwen-vision", **SPEC},), "no alias to itself"
    container = after.by_name(CONTAINER)["qwen-vl-container"]
    assert container.inputs["name"] == "qwen-vl"
    first_container = run_program("prod", first).by_name(CONTAINER)["qwen-vl-container"]
    assert served_model_name(container) == served_model_name(first_container) == "qwen-vl"
    diff = diff_plans(plan_doc("prod", away), plan_doc("prod", back))
    assert [(s.name, s.lines()) for s in diff.changes()] == [("qwen-vl", [("renamed", "qwen-vision -> qwen-vl")])]
    assert json.loads(render_diff(diff, "json"))["recreatedCount"] == 0


def test_a_replicated_service_renamed_back_keeps_its_replicas_and_router():
    away = renamed(pinned("staging"), "bge-m3", "bge-embed")
    back = renamed_back(away, "bge-embed", "bge-m3", ["bge-m3", "bge-embed"])
    found = matches("staging", run_program("staging", away), run_program("staging", back))
    moved = {name_of(u): name_of(old) for u, old in found.items() if u != old}
    assert moved["bge-m3-router-container"] == "bge-embed-router-container"
    assert moved["bge-m3-2-serves"] == "bge-embed-2-serves"
    diff = diff_plans(plan_doc("staging", away), plan_doc("staging", back))
    assert {s.name for s in diff.changes()} == {"bge-m3-1", "bge-m3-2", "bge-m3-3", "bge-m3-router"}
    assert diff.recreated() == []


def test_a_rename_back_spelt_with_the_last_name_only_re_creates_the_container_and_the_diff_says_by_what():
    away = renamed(pinned("prod"), "qwen-vl", "qwen-vision")
    back = renamed_back(away, "qwen-vision", "qwen-vl", ["qwen-vision"])
    _, problems = compare("prod", run_program("prod", away), run_program("prod", back))
    assert "qwen-vl-container changes its inputs against qwen-vision-container" in problems
    [restart] = diff_plans(plan_doc("prod", away), plan_doc("prod", back)).recreated()
    assert (restart.name, restart.recreate_keys) == ("qwen-vl", ("name", "command", "env", "mounts", "labels"))


def test_a_rename_back_without_previous_names_re_creates_the_container_and_the_diff_says_so():
    """The old resource (qwen-vision) holds the docker name qwen-vl: a new resource of that name is no
    update of it. The diff must not say that nothing restarts."""
    away = renamed(pinned("prod"), "qwen-vl", "qwen-vision")
    back = renamed_back(away, "qwen-vision", "qwen-vl", None)
    _, problems = compare("prod", run_program("prod", away), run_program("prod", back))
    assert {"qwen-vl-container would be created", "qwen-vision-container would be deleted"} <= set(problems)
    diff = diff_plans(plan_doc("prod", away), plan_doc("prod", back))
    [restart] = diff.recreated()
    assert restart.name == "qwen-vl" and restart.renamed_from == "qwen-vision"
    assert [s.name for s in diff.services if s.added or s.removed] == []
    table = render_diff(diff, "table")
    assert "Will restart: 1 container(s)" in table
    assert re.search(r"npu-a +qwen-vl +previousNames +down for the model load", table), table
    assert "previousNames [qwen-vl, qwen-vision]" in table, "the diff says how to keep the container"


@pytest.mark.parametrize("previous", [["qwen-vl"], ["qwen-vision", "qwen-vl"]])
def test_a_services_own_name_is_a_previous_name_only_first_and_followed_by_the_names_it_had_since(previous):
    values = renamed_back(renamed(values_of("prod"), "qwen-vl", "qwen-vision"), "qwen-vision", "qwen-vl", previous)
    with pytest.raises(ConfigError, match="previousNames gives qwen-vl, the name of a current service"):
        parse_fleet("prod", values)
