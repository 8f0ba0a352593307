"""A planned service on a card a pinned (so running) service holds alone: `plan` and `pin` name the
holder that must stop while the card switches to device-share mode, as `plan --against` does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from allocation.planner import plan_fleet
from records.held_cards import held_cards
from tests.support.stacks import fleet, host, service

ROOT = Path(__file__).resolve().parent.parent
STACKS = sorted(p.name.split(".")[1] for p in ROOT.glob("Pulumi.*.yaml"))
NEWCOMER = """\
    - name: e5-small
      model: /disk2/e5-small
      tensorParallelSize: 1
      memoryFraction: 0.05
"""


def prod_with_a_newcomer(tmp_path: Path) -> Path:
    """A copy of the prod stack with an unpinned TP1 service appended to its services."""
    text = (ROOT / "Pulumi.prod.yaml").read_text(encoding="utf-8")
    assert text.endswith("      vllmPort: 62016\n")  # the last service's last key: services end the file
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(text + NEWCOMER, encoding="utf-8")
    return path


def held(values_hosts, services):
    return [h for hp in plan_fleet(fleet(values_hosts, services)).hosts for h in held_cards(hp)]


def test_prod_plus_an_unpinned_tp1_service_names_qwen_long_in_the_table(cli, tmp_path):
    result = cli("plan", "--config", str(prod_with_a_newcomer(tmp_path)))
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stdout.split())
    assert (
        "must stop: card 4 becomes shared with e5-small: qwen-long, pinned there and so running, holds it alone "
        "and must stop while the card switches to device-share mode; heldCards refuse:"
    ) in said, result.stdout


def test_prod_plus_an_unpinned_tp1_service_names_qwen_long_in_the_markdown(cli, tmp_path):
    result = cli("plan", "--config", str(prod_with_a_newcomer(tmp_path)), "--format", "markdown")
    assert result.returncode == 0, result.stderr
    assert "- must stop: card 4 becomes shared with e5-small: qwen-long, pinned there" in result.stdout


def test_prod_plus_an_unpinned_tp1_service_names_qwen_long_in_the_json(cli, tmp_path):
    result = cli("plan", "--config", str(prod_with_a_newcomer(tmp_path)), "--format", "json")
    assert result.returncode == 0, result.stderr
    [npu_a] = json.loads(result.stdout)["hosts"]
    [stop] = npu_a["mustStop"]
    assert {k: stop[k] for k in ("card", "holder", "joinedBy")} == {"card": 4, "holder": "qwen-long", "joinedBy": ["e5-small"]}
    assert stop["reason"].startswith("card 4 becomes shared with e5-small: qwen-long")


def test_pin_says_which_running_service_must_stop_before_it_writes(cli, tmp_path):
    path = prod_with_a_newcomer(tmp_path)
    result = cli("pin", "--config", str(path))
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stdout.split())
    assert said.startswith("host npu-a: must stop: card 4 becomes shared with e5-small: qwen-long, pinned there"), said
    assert said.index("pinned /") > said.index("heldCards refuse"), said


def test_pin_of_a_stack_with_no_such_card_prints_only_what_it_pinned(cli, tmp_path):
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_bytes((ROOT / "Pulumi.prod.yaml").read_bytes())
    result = cli("pin", "--config", str(path))
    assert result.stdout.startswith("pinned ") and "must stop" not in result.stdout, result.stdout


@pytest.mark.parametrize("stack", STACKS)
def test_no_committed_stack_puts_a_newcomer_on_a_running_services_card(cli, stack):
    result = cli("plan", "--stack", stack, "--format", "json")
    assert all("mustStop" not in h for h in json.loads(result.stdout)["hosts"])
    assert "must stop" not in cli("plan", "--stack", stack).stdout


def test_a_card_pinned_services_already_share_needs_no_stop():
    services = [service("a", 1, 0.4, host="npu-a", devices=[0]), service("b", 1, 0.4, host="npu-a", devices=[0])]
    assert held([host("npu-a", npus=1)], [*services, service("c", 1, 0.1)]) == []


def test_a_newcomer_on_an_empty_card_or_next_to_another_newcomer_needs_no_stop():
    assert held([host("npu-a", npus=2)], [service("a", 1, 0.5, host="npu-a", devices=[0]), service("c", 1, 0.5)]) == []
    assert held([host("npu-a", npus=1)], [service("c", 1, 0.4), service("d", 1, 0.4)]) == []


def test_a_privileged_host_switches_no_card_so_no_holder_must_stop_for_it():
    services = [service("a", 1, 0.5, host="npu-a", devices=[0]), service("c", 1, 0.4)]
    assert held([host("npu-a", npus=1, cardSharing="privileged")], services) == []


def test_a_pinned_replica_is_a_holder_and_stop_holders_says_pulumi_up_restarts_it():
    pins = [{"host": "npu-a", "devices": [0]}, {"host": "npu-b", "devices": [0]}]
    services = [
        service("r", 1, 0.6, replicas=2, replicaPins=pins),
        service("x", 1, 0.35, host="npu-b", devices=[0]),  # npu-b's card: shared by pinned services, full
        service("c", 1, 0.3),
    ]
    [stop] = held([host("npu-a", npus=1, heldCards="stopHolders"), host("npu-b", npus=1)], services)
    assert (stop.card, stop.holder, stop.newcomers) == (0, "r-1", ("c",))
    assert "heldCards stopHolders: pulumi up stops them, switches the card and starts them again" in stop.text()


def test_on_a3_the_other_chip_of_the_npu_names_its_holder_too():
    services = [
        service("a", 1, 0.5, host="npu-c", devices=[0]),
        service("b", 1, 0.9, host="npu-c", devices=[1]),
        service("f2", 2, 0.9, host="npu-c", devices=[2, 3]),
        service("f4", 4, 0.9, host="npu-c", devices=[4, 5, 6, 7]),
        service("f8", 8, 0.9, host="npu-c", devices=[8, 9, 10, 11, 12, 13, 14, 15]),
        service("c", 1, 0.4),  # fits only on card 0
    ]
    stops = held([host("npu-c", board="a3", npus=16)], services)
    assert [(s.card, s.holder, s.newcomers) for s in stops] == [(0, "a", ("c",)), (1, "b", ("c",))]
    assert stops[1].text().startswith("card 1 shares its NPU with card 0, which becomes shared with c: b, pinned there")


def test_on_a3_a_card_whose_npu_pinned_services_already_share_is_in_the_mode_and_needs_no_stop():
    services = [
        service("a", 1, 0.4, host="npu-c", devices=[0]),
        service("b", 1, 0.4, host="npu-c", devices=[0]),  # NPU 0 (cards 0 and 1) is in the mode today
        service("h", 1, 0.5, host="npu-c", devices=[1]),
        service("f2", 2, 0.9, host="npu-c", devices=[2, 3]),
        service("f4", 4, 0.9, host="npu-c", devices=[4, 5, 6, 7]),
        service("f8", 8, 0.9, host="npu-c", devices=[8, 9, 10, 11, 12, 13, 14, 15]),
        service("d", 1, 0.4),  # fits only on card 1
    ]
    plan = plan_fleet(fleet([host("npu-c", board="a3", npus=16)], services))
    assert [ps.assignment.cards for ps in plan.hosts[0].services if ps.name == "d"] == [(1,)]
    assert held_cards(plan.hosts[0]) == ()
