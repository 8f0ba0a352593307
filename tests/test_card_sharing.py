"""Shared cards: the plan names them, `cardSharing` decides what runs, and the program prepares them.

Real hosts (vllm-ascend issues 632, 248, 2698): a card opened by one non-privileged container
cannot be opened by a second one unless the card is in device-share mode.
"""

from __future__ import annotations

import copy
import json

import pytest

from allocation.config import VISIBLE_DEVICES_ENV
from records.command import START_GATE_NAME
from records.containers import CARDS_ENV, HEALTH_URL_ENV, LOCK_DIR, LOCK_DIR_HOST, START_GATE
from views.diff import diff_plans, render_diff
from allocation.errors import AllocationError
from allocation.planner import plan_fleet
from views.report import render_plan
from views.exports.render import render
from tests.support.stacks import fleet, host, service
from tests.support.pulumi_harness import CONTAINER, LOCAL_COMMAND, REMOTE_COMMAND, run_program
from tests.support.stacks import values_of
from tests.support.pipeline import deployment_of, plan_json_of


def sharing_fleet(card_sharing: str | None = None, **extra):
    """alpha and beta pinned to card 0; gamma on cards of its own."""
    extra_host = {"cardSharing": card_sharing} if card_sharing else {}
    return fleet(
        [host("npu-a", **extra_host)],
        [
            service("alpha", 1, 0.4, devices=[0]),
            service("beta", 2, 0.5, devices=[0, 1]),
            service("gamma", 2, 0.5, devices=[2, 3]),
        ],
        **extra,
    )


def specs(config):
    return {sd.name: sd.spec for sd in deployment_of(config).services()}


# ---- the plan ------------------------------------------------------------------------


def test_the_plan_json_names_the_shared_cards_of_each_host():
    """prod's (card 0, deviceShare) are in its golden (tests/data/goldens/prod.json)."""
    [npu_a] = plan_json_of(sharing_fleet())["hosts"]
    assert (npu_a["sharedCards"], npu_a["cardSharing"]) == ([0], "deviceShare")
    alone = fleet([host("npu-a")], [service("alpha", 1, 0.4, devices=[0]), service("beta", 1, 0.4, devices=[1])])
    assert plan_json_of(alone)["hosts"][0]["sharedCards"] == []


def test_the_table_shows_the_shared_cards_and_the_mode():
    text = render_plan(deployment_of(sharing_fleet()), "table")
    assert "npu-a (npu-a.example): 8 NPUs x 64 GiB (60.96 GiB usable), 3 services, shared cards 0 (deviceShare)" in text
    alone = fleet([host("npu-a")], [service("alpha", 1, 0.4, devices=[0])])
    assert "shared cards" not in render_plan(deployment_of(alone), "table")


def test_refuse_makes_a_pinned_shared_card_an_error_naming_the_card_and_both_services(cli, tmp_path):
    with pytest.raises(AllocationError) as error:
        plan_fleet(sharing_fleet("refuse"))
    message = str(error.value)  # beta (larger) is placed first, so alpha is the one refused
    assert "card 0 is used by beta" in message and "alpha cannot share it" in message
    assert "cardSharing refuse" in message
    values = values_of("prod")
    values["hosts"][0]["cardSharing"] = "refuse"
    path = tmp_path / "Pulumi.refuse.yaml"
    path.write_text(json.dumps({"config": {f"ascend-fleet:{k}": v for k, v in values.items()}}))
    result = cli("plan", "--config", str(path))
    assert result.returncode == 1 and result.stdout == ""
    assert "card 0 is used by qwen-vl" in result.stderr and "bge-m3 cannot share it" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_refuse_keeps_auto_placed_services_on_cards_of_their_own():
    services = [service("alpha", 1, 0.4), service("beta", 1, 0.4)]
    packed = plan_fleet(fleet([host("npu-a")], services))
    assert packed.hosts[0].shared_cards() == (0,), "best fit packs both onto one card by default"
    apart = plan_fleet(fleet([host("npu-a", cardSharing="refuse")], services))
    assert apart.hosts[0].shared_cards() == ()
    assert sorted(ps.assignment.cards for ps in apart.hosts[0].services) == [(0,), (1,)]


def test_refuse_reports_a_full_host_as_in_use_not_as_a_port_16666_problem():
    services = [service(f"s{i}", 1, 0.1) for i in range(3)]
    with pytest.raises(AllocationError, match=r"in use; cardSharing refuse"):
        plan_fleet(fleet([host("npu-a", npus=2, cardSharing="refuse")], services))


# ---- the containers -------------------------------------------------------------------


def test_privileged_makes_only_the_services_on_shared_cards_privileged_with_every_card():
    got = specs(sharing_fleet("privileged"))
    for name in ("alpha", "beta"):
        assert got[name].privileged
        assert got[name].device_files[:8] == tuple(f"/dev/davinci{c}" for c in range(8))
    assert got["alpha"].env[VISIBLE_DEVICES_ENV] == "0" and got["beta"].env[VISIBLE_DEVICES_ENV] == "0,1"
    assert not got["gamma"].privileged and "/dev/davinci0" not in got["gamma"].device_files
    assert got["gamma"].env[VISIBLE_DEVICES_ENV] == "0,1", "isolated: its two cards numbered from 0"
    for mode in ("deviceShare", "refuse"):
        config = sharing_fleet(mode) if mode != "refuse" else fleet([host("npu-a", cardSharing=mode)], [service("a")])
        assert not any(s.privileged for s in specs(config).values())


def test_every_container_runs_behind_the_same_start_gate_that_names_only_its_own_cards_and_port():
    got = specs(sharing_fleet())
    for name, spec in got.items():
        assert spec.command[:4] == ("sh", "-c", START_GATE, START_GATE_NAME)
        assert spec.command[4:6] == ("vllm", "serve")
        assert spec.env[CARDS_ENV] == ",".join(map(str, sorted(spec_cards(spec))))
        assert spec.env[HEALTH_URL_ENV] == f"http://127.0.0.1:{spec.api_port}/health"
        lock = [m for m in spec.mounts if m.target == LOCK_DIR]
        assert [(m.source, m.read_only) for m in lock] == [(LOCK_DIR_HOST, False)]
        others = set(got) - {name}
        text = " ".join([*spec.command[4:], *spec.env.values(), *spec.labels.values()])
        assert not any(other in text.split() or f"={other}" in text for other in others), "no neighbour in its inputs"


def spec_cards(spec) -> list[int]:
    return [int(c) for c in spec.labels["ascend-fleet.devices"].split(",")]


def test_exports_carry_the_gate_and_its_lock_folder_and_docker_run_prepares_the_shared_cards():
    deployment = deployment_of(sharing_fleet())
    script = render(deployment, "docker-run")
    assert f"--volume={LOCK_DIR_HOST}:{LOCK_DIR}" in script and START_GATE_NAME in script
    prepare = script.index("set -t device-share")
    assert prepare < script.index("docker run"), "the cards are shared before any container starts"
    assert "ssh -o StrictHostKeyChecking=yes" in script and "-- root@npu-a.example 'sh -s' <<'" in script
    compose = render(deployment, "compose")
    assert f'"source": "{LOCK_DIR_HOST}"' in compose and '"create_host_path": true' in compose
    assert "device-share mode" in compose.splitlines()[1]
    alone = render(deployment_of(fleet([host("npu-a")], [service("a")])), "docker-run")
    assert "device-share" not in alone and "--add-host" not in alone and START_GATE_NAME in alone


def test_the_diff_shows_a_new_start_gate_as_such_not_as_a_script():
    old = plan_json_of(sharing_fleet("privileged"))
    new = plan_json_of(sharing_fleet())
    text = render_diff(diff_plans(old, new), "table")
    assert "cardSharing privileged -> deviceShare" in text
    assert "trap" not in text
    before = copy.deepcopy(new)
    for h in before["hosts"]:
        for s in h["services"]:
            cmd = s["container"]["command"]
            s["container"]["command"] = cmd[4:] if cmd[:2] == ["sh", "-c"] else cmd
    assert "start gate added" in render_diff(diff_plans(before, new), "table")


# ---- the program under Pulumi's mocks ---------------------------------------------------


def test_prod_registers_one_device_share_command_for_card_0_and_only_its_services_wait_for_it():
    run = run_program("prod", values_of("prod"))
    commands = run.by_name(REMOTE_COMMAND)
    assert sorted(commands) == ["npu-a-check", "npu-a-device-share", "npu-a-start-order", "npu-a-takeover"]
    share = commands["npu-a-device-share"]
    assert commands["npu-a-check"].urn in share.dependencies
    script = share.inputs["create"]
    assert "for card in 0; do" in script and "set -t device-share" in script
    containers = run.by_name(CONTAINER)
    for name in ("bge-m3", "qwen-vl"):
        assert share.urn in containers[f"{name}-container"].dependencies
    assert share.urn not in containers["qwen-long-container"].dependencies
    assert containers["bge-m3-container"].urn in containers["qwen-vl-container"].dependencies


@pytest.mark.parametrize("mode", ["privileged", "refuse-free", "no-sharing"])
def test_a_fleet_without_device_share_registers_no_device_share_command(mode):
    values = values_of("prod")
    if mode == "privileged":
        values["hosts"][0]["cardSharing"] = "privileged"
    else:
        values["services"] = [s for s in values["services"] if s["name"] != "bge-m3"]
        if mode == "refuse-free":
            values["hosts"][0]["cardSharing"] = "refuse"
    run = run_program("prod", values)
    names = sorted([*run.by_name(REMOTE_COMMAND), *run.by_name(LOCAL_COMMAND)])  # registered in no fixed order
    # Privileged containers share card 0 too: its start order is written all the same. Prod takes
    # over from the compose deployment.
    assert names == ["npu-a-check", *(["npu-a-start-order"] if mode == "privileged" else []), "npu-a-takeover"]
    privileged = {r.inputs["name"]: r.inputs["privileged"] for r in run.of_type(CONTAINER)}
    if mode == "privileged":
        assert privileged == {"bge-m3": True, "qwen-vl": True, "qwen-long": False}


def test_prod_writes_card_0s_order_before_the_services_on_it_and_removes_it_when_the_command_goes():
    run = run_program("prod", values_of("prod"))
    commands = run.by_name(REMOTE_COMMAND)
    order = commands["npu-a-start-order"]
    assert commands["npu-a-check"].urn in order.dependencies
    assert "printf '%s\\n' bge-m3 qwen-vl > /var/lib/ascend-fleet/locks/order-card-0.tmp" in order.inputs["create"]
    assert "update" not in order.inputs and "triggers" not in order.inputs, "a new order is an update running create"
    assert "/var/lib/ascend-fleet/locks/order-card-*" in order.inputs["delete"]
    containers = run.by_name(CONTAINER)
    for name in ("bge-m3", "qwen-vl"):
        assert order.urn in containers[f"{name}-container"].dependencies
    assert order.urn not in containers["qwen-long-container"].dependencies


def test_the_device_share_command_updates_in_place_and_removes_the_boot_unit_when_it_goes():
    run = run_program("prod", values_of("prod"))
    share = run.by_name(REMOTE_COMMAND)["npu-a-device-share"]
    assert "update" not in share.inputs and "triggers" not in share.inputs, "a changed card list is an update"
    assert "rm -f /etc/systemd/system/ascend-fleet-device-share.service" in share.inputs["delete"]
