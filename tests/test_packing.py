"""The order services are placed in: pins first, then the largest memory fraction, then TP, then name."""

from __future__ import annotations

import ast
from pathlib import Path

from allocation.planner import plan_fleet
from tests.support.stacks import fleet, host, service


def placed(plan) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {ps.name: (hp.host.name, ps.assignment.cards) for hp in plan.hosts for ps in hp.services}


def test_the_largest_memory_fraction_is_placed_before_the_largest_tensor_parallel_group():
    # First-fit decreasing by the size of each card's slot: the 0.9 takes card 0 of the first host,
    # and the TP=8 group of 0.1 no longer fits there (card 0 has 0.05 left), so it takes the next
    # host. Placed TP first, the TP=8 group would take npu-a and push the 0.9 to npu-b.
    plan = plan_fleet(fleet([host("npu-a"), host("npu-b")], [service("wide", 8, 0.1), service("deep", 1, 0.9)]))
    assert placed(plan) == {"deep": ("npu-a", (0,)), "wide": ("npu-b", tuple(range(8)))}


def test_among_equal_fractions_the_larger_tensor_parallel_group_goes_first_then_the_name():
    services = [service("a-single", 1, 0.5), service("b-quad", 4, 0.5), service("c-pair", 2, 0.5), service("d-pair", 2, 0.5)]
    plan = plan_fleet(fleet([host("npu-a"), host("npu-b")], services))
    assert placed(plan) == {
        "b-quad": ("npu-a", (0, 1, 2, 3)),
        "c-pair": ("npu-a", (4, 5)),
        "d-pair": ("npu-a", (6, 7)),
        "a-single": ("npu-b", (0,)),  # by name first, it would have taken card 0 of npu-a
    }


def test_a_service_pinned_to_a_host_is_placed_before_a_larger_one_the_allocator_may_put_anywhere():
    # `free` (0.6) sorts before `fixed` (0.5) by fraction; placed first it would take npu-a, the
    # first host by name, and `fixed`, which may only go there, would find no room.
    services = [service("fixed", 8, 0.5, host="npu-a"), service("free", 8, 0.6)]
    plan = plan_fleet(fleet([host("npu-a"), host("npu-b")], services))
    assert placed(plan) == {"fixed": ("npu-a", tuple(range(8))), "free": ("npu-b", tuple(range(8)))}


def test_a_service_pinned_to_its_cards_is_placed_before_one_pinned_to_a_host_only():
    services = [service("host-only", 4, 0.6, host="npu-a"), service("cards", 4, 0.5, host="npu-a", devices=[0, 1, 2, 3])]
    plan = plan_fleet(fleet([host("npu-a")], services))
    assert placed(plan) == {"cards": ("npu-a", (0, 1, 2, 3)), "host-only": ("npu-a", (4, 5, 6, 7))}


def test_the_solver_behind_the_benchmarks_bound_is_never_imported_outside_the_benchmarks():
    root = Path(__file__).resolve().parent.parent
    files = [p for pkg in ("allocation", "records", "views", "cli", "components", "ops", "sim", "tests") for p in (root / pkg).rglob("*.py")]
    for path in [*files, root / "__main__.py"]:
        tree = ast.parse(path.read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not {m.split(".")[0] for m in imported} & {"highspy", "benchmarks"}, path


def test_a_card_stays_a_running_services_card_after_a_newcomer_had_to_join_it():
    # n1 finds no free pair anywhere and shares the running p and q's cards; n2 must still keep
    # off them (switching a card to device-share mode stops what runs there) while npu-b has a
    # free card, although n1 on them is not running yet.
    pinned = [service("p", 1, 0.5, host="npu-a", devices=[0]), service("q", 1, 0.5, host="npu-a", devices=[1]),
              service("r", 1, 0.5, host="npu-b", devices=[0])]  # fmt: skip
    plan = plan_fleet(fleet([host("npu-a", npus=2), host("npu-b", npus=2)], [*pinned, service("n1", 2, 0.1), service("n2", 1, 0.05)]))
    assert placed(plan)["n1"] == ("npu-a", (0, 1))
    assert placed(plan)["n2"] == ("npu-b", (1,))
