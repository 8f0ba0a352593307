"""`plan --against REF`: the allocation diff a pull request's reviewer reads.

Unit tests feed `diff_plans` hand-made plan documents (tests/support/plan_documents.py).
`plan_at_revision` runs on two-commit git repositories holding a stand-in program that says what it
was asked to plan; two end-to-end tests hold the real `allocation` package and compare the plan
the code at a revision really makes.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from views.diff import diff_plans, render_diff
from allocation.errors import FleetError
from cli import main as cli_main
from cli.revision import plan_at_revision, resolve_revision
from tests.support.plan_documents import by_name, fleet, plan, service
from tests.support.git_repos import PROJECT, copy_program, git
from tests.support.pipeline import plan_json_of

REPO = Path(__file__).resolve().parents[1]


# --- diff_plans -------------------------------------------------------------


def test_an_identical_plan_reports_every_service_unchanged_and_no_change():
    diff = diff_plans(fleet(), fleet())
    assert not diff.has_changes and not diff.stack_is_new and diff.hosts == ()
    assert diff.changes() == []
    assert [s.status for s in diff.services] == ["unchanged"] * 3
    assert diff.summary() == "0 changed, 0 added, 0 removed, 3 unchanged"


def test_an_unchanged_fleet_renders_no_allocation_changes_in_every_format():
    diff = diff_plans(fleet(), fleet(), against="origin/main")
    markdown = render_diff(diff, "markdown")
    assert "**0 changed, 0 added, 0 removed, 3 unchanged**" in markdown.splitlines()
    assert markdown.rstrip().endswith("No allocation changes.")
    assert "No allocation changes." in render_diff(diff, "table")
    doc = json.loads(render_diff(diff, "json"))
    assert doc["hasChanges"] is False
    assert doc["summary"] == {"changed": 0, "added": 0, "removed": 0, "unchanged": 3}


def test_a_warning_become_a_note_is_no_change_and_no_note_reaches_the_diff():
    """A plan before notes said where a figure comes from as a warning (and had no `notes`): against it,
    today's plan of the same stack has no change, and neither side's notes or warnings are in the diff."""
    from cli.stackfile import load_fleet

    new = plan_json_of(load_fleet("prod")[0])
    assert new["notes"] and not new["warnings"]
    old = {k: v for k, v in new.items() if k != "notes"} | {"warnings": new["notes"]}
    diff = diff_plans(old, new, against="HEAD")
    assert not diff.has_changes
    for fmt in ("table", "markdown", "json"):
        assert "unverified" not in render_diff(diff, fmt) and "estimated" not in render_diff(diff, fmt), fmt


def test_the_order_of_hosts_and_services_in_the_input_does_not_change_the_diff():
    new = fleet()
    new["hosts"][0]["services"].append(service("z-embed", devices=[1], api_port=7008, slot=3))
    shuffled = copy.deepcopy(new)
    shuffled["hosts"][0]["services"].reverse()
    assert render_diff(diff_plans(fleet(), new), "json") == render_diff(diff_plans(fleet(), shuffled), "json")


def test_a_new_service_is_reported_added_with_its_placement():
    new = fleet()
    new["hosts"][0]["services"].append(service("rerank", devices=[1], api_port=7008, slot=3))
    diff = diff_plans(fleet(), new)
    rerank = by_name(diff)["rerank"]
    assert rerank.added and rerank.status == "added"
    assert rerank.lines() == [("added", "on npu-a cards 1")]
    assert diff.summary() == "0 changed, 1 added, 0 removed, 3 unchanged"


def test_a_service_gone_from_the_new_plan_is_reported_removed_with_where_it_was():
    new = fleet()
    new["hosts"][0]["services"] = [s for s in new["hosts"][0]["services"] if s["name"] != "qwen-long"]
    diff = diff_plans(fleet(), new)
    gone = by_name(diff)["qwen-long"]
    assert gone.removed and gone.host == "npu-a"
    assert gone.lines() == [("removed", "was on npu-a cards 4-7")]
    assert diff.summary() == "0 changed, 0 added, 1 removed, 2 unchanged"


def with_shared_cards(doc: dict[str, Any], sharing: str = "deviceShare") -> dict[str, Any]:
    """The plan with each host's `sharedCards` and `cardSharing`, as `plan --format json` prints them."""
    for h in doc["hosts"]:
        cards = [c for s in h["services"] for c in s["devices"]]
        h["sharedCards"] = sorted({c for c in cards if cards.count(c) > 1})
        h["cardSharing"] = sharing
    return doc


def test_a_card_that_becomes_shared_names_the_container_that_must_stop_for_device_share_mode():
    new = fleet()
    new["hosts"][0]["services"].append(service("tiny", devices=[4], api_port=7008, slot=3))
    diff = diff_plans(with_shared_cards(fleet()), with_shared_cards(new))
    stop = (
        "card 4 becomes shared: qwen-long holds it and must stop while the card switches to device-share mode; "
        "heldCards refuse: pulumi up stops at the host check until they are stopped by hand "
        "(or the host's heldCards is stopHolders)"
    )
    assert [h.detail() for h in diff.hosts] == [f"sharedCards [0] -> [0,4]; {stop}"]
    assert f"| `npu-a` |  | host | `sharedCards [0] -> [0,4]; {stop}` |" in render_diff(diff, "markdown")
    assert json.loads(render_diff(diff, "json"))["hosts"][0]["stops"] == [stop]


def test_a_held_card_says_what_pulumi_up_does_by_the_hosts_held_cards():
    new = fleet()
    new["hosts"][0]["services"].append(service("tiny", devices=[4], api_port=7008, slot=3))
    old, new = with_shared_cards(fleet()), with_shared_cards(new)
    for doc in (old, new):
        doc["hosts"][0]["heldCards"] = "stopHolders"
    (host,) = diff_plans(old, new).hosts
    assert host.stops == (
        "card 4 becomes shared: qwen-long holds it and must stop while the card switches to device-share mode; "
        "heldCards stopHolders: pulumi up stops them, switches the card and starts them again",
    )
    new["hosts"][0]["heldCards"] = "refuse"
    (host,) = diff_plans(old, new).hosts
    assert host.stops[0].endswith("heldCards refuse: pulumi up stops at the host check until they are stopped by hand "
                                  "(or the host's heldCards is stopHolders)")
    assert "heldCards stopHolders -> refuse" in host.detail()


def test_no_one_must_stop_for_a_card_nobody_held_or_on_a_host_that_shares_by_privilege():
    new = fleet()
    new["hosts"][0]["services"] += [
        service("tiny", devices=[5], api_port=7008, slot=3),
        service("tinier", devices=[5], api_port=7009, slot=4),
    ]
    old = fleet()
    old["hosts"][0]["services"] = [s for s in old["hosts"][0]["services"] if s["name"] != "qwen-long"]
    diff = diff_plans(with_shared_cards(old), with_shared_cards(new))
    assert [(h.detail(), h.stops) for h in diff.hosts] == [("sharedCards [0] -> [0,5]", ())]
    new["hosts"][0]["services"][-1]["devices"] = [4]
    privileged = diff_plans(with_shared_cards(fleet(), "privileged"), with_shared_cards(new, "privileged"))
    assert [h.stops for h in privileged.hosts] == [()]


def test_a_service_on_other_cards_is_reported_moved_from_and_to():
    old = fleet()
    new = plan(
        service("bge-m3", devices=[0], api_port=7007, slot=0),
        service("qwen-long", devices=[0, 1, 2, 3], api_port=6006, slot=1, max_model_len=100000),
        service("qwen-vl", devices=[4, 5, 6, 7], api_port=9009, slot=2, max_model_len=25000),
    )
    diff = diff_plans(old, new)
    moved = by_name(diff)["qwen-vl"]
    assert moved.moved and not moved.ports and not moved.restart_reasons
    assert moved.lines() == [("moved", "npu-a cards 0-3 -> npu-a cards 4-7")]
    assert by_name(diff)["bge-m3"].unchanged
    assert diff.summary() == "2 changed, 0 added, 0 removed, 1 unchanged"


def test_a_service_on_another_host_is_reported_moved_and_its_host_is_the_new_one():
    new = fleet()
    vl = next(s for s in new["hosts"][0]["services"] if s["name"] == "qwen-vl")
    new["hosts"][0]["services"].remove(vl)
    new = plan(*new["hosts"][0]["services"], {**vl, "host": "npu-b"})
    diff = diff_plans(fleet(), new)
    moved = by_name(diff)["qwen-vl"]
    assert moved.host == "npu-b"
    assert moved.moved_from.host == "npu-a" and moved.moved_to.host == "npu-b"
    assert [h.name for h in diff.hosts] == ["npu-b"] and diff.hosts[0].added


def test_a_changed_tensor_parallel_size_is_a_move_and_not_also_a_restart_for_the_tp_flag():
    new = plan(
        service("bge-m3", devices=[0], api_port=7007, slot=0),
        service("qwen-long", devices=[4, 5, 6, 7], api_port=6006, slot=1, max_model_len=100000),
        service("qwen-vl", devices=[0, 1], api_port=9009, slot=2, max_model_len=25000),
    )
    vl = by_name(diff_plans(fleet(), new))["qwen-vl"]
    assert vl.moved and vl.restart_reasons == ()
    assert vl.lines() == [("moved", "npu-a cards 0-3 -> npu-a cards 0-1")]


def test_a_new_api_port_is_reported_as_a_port_change_with_old_and_new():
    new = plan(
        service("bge-m3", devices=[0], api_port=7008, slot=0),
        service("qwen-long", devices=[4, 5, 6, 7], api_port=6006, slot=1, max_model_len=100000),
        service("qwen-vl", devices=[0, 1, 2, 3], api_port=9009, slot=2, max_model_len=25000),
    )
    bge = by_name(diff_plans(fleet(), new))["bge-m3"]
    assert not bge.moved
    assert [str(p) for p in bge.ports] == ["apiPort 7007 -> 7008"]
    # The `--port` argument follows the port: it is not a second, separate reason.
    assert bge.restart_reasons == ()
    assert bge.kinds() == ["ports changed"]


def test_every_changed_hccl_window_is_reported_by_name_as_a_range():
    old = fleet()
    new = plan(
        service("bge-m3", devices=[0], api_port=7007, slot=5),
        service("qwen-long", devices=[4, 5, 6, 7], api_port=6006, slot=1, max_model_len=100000),
        service("qwen-vl", devices=[0, 1, 2, 3], api_port=9009, slot=2, max_model_len=25000),
    )
    bge = by_name(diff_plans(old, new))["bge-m3"]
    assert [str(p) for p in bge.ports] == [
        "hcclNpuSocketPortRange 16666-16681 -> 16746-16761",
        "hcclHostSocketPortRange 60032-60047 -> 60112-60127",
        "hcclIfBasePort 61000 -> 61160",
        "vllmPort 62000 -> 62080",
    ]
    assert bge.restart_reasons == ()


def test_a_service_that_opts_out_of_hccl_ranges_shows_the_range_as_unset():
    new = fleet()
    bge = new["hosts"][0]["services"][0]
    bge["hcclNpuSocketPortRange"] = None
    bge["hcclHostSocketPortRange"] = None
    del bge["container"]["env"]["HCCL_NPU_SOCKET_PORT_RANGE"]
    del bge["container"]["env"]["HCCL_HOST_SOCKET_PORT_RANGE"]
    change = by_name(diff_plans(fleet(), new))["bge-m3"]
    assert [str(p) for p in change.ports] == [
        "hcclNpuSocketPortRange 16666-16681 -> unset",
        "hcclHostSocketPortRange 60032-60047 -> unset",
    ]
    assert change.restart_reasons == ()


def test_a_new_max_model_len_restarts_the_service_and_says_old_and_new_value():
    new = plan(
        service("bge-m3", devices=[0], api_port=7007, slot=0),
        service("qwen-long", devices=[4, 5, 6, 7], api_port=6006, slot=1, max_model_len=100000),
        service("qwen-vl", devices=[0, 1, 2, 3], api_port=9009, slot=2, max_model_len=30000),
    )
    vl = by_name(diff_plans(fleet(), new))["qwen-vl"]
    assert vl.status == "changed" and vl.kinds() == ["restarted"]
    assert vl.restart_reasons == ("--max-model-len 25000 -> 30000",)


def test_a_changed_env_variable_and_image_restart_the_service():
    new = plan(
        service("bge-m3", devices=[0], api_port=7007, slot=0, env={"HCCL_BUFFSIZE": "1024", "OMP_NUM_THREADS": "1"},
                image="quay.io/ascend/vllm-ascend:v0.21.0"),
        service("qwen-long", devices=[4, 5, 6, 7], api_port=6006, slot=1, max_model_len=100000),
        service("qwen-vl", devices=[0, 1, 2, 3], api_port=9009, slot=2, max_model_len=25000),
    )  # fmt: skip
    bge = by_name(diff_plans(fleet(), new))["bge-m3"]
    assert bge.restart_reasons == (
        "image quay.io/ascend/vllm-ascend:v0.20.2rc1 -> quay.io/ascend/vllm-ascend:v0.21.0",
        "env HCCL_BUFFSIZE 512 -> 1024",
        "env OMP_NUM_THREADS=1 added",
    )


def test_added_and_removed_flags_are_named():
    new = fleet()
    cmd = new["hosts"][0]["services"][0]["container"]["command"]
    cmd.remove("--trust-remote-code")
    cmd += ["--no-enable-prefix-caching", "--max-num-seqs", "10"]
    bge = by_name(diff_plans(fleet(), new))["bge-m3"]
    assert bge.restart_reasons == (
        "--max-num-seqs 10 added",
        "--no-enable-prefix-caching added",
        "--trust-remote-code removed",
    )


def test_the_same_arguments_in_another_order_are_named_a_reordering_that_still_restarts():
    new = fleet()
    cmd = new["hosts"][0]["services"][0]["container"]["command"]
    cmd.insert(3, cmd.pop(cmd.index("--trust-remote-code")))
    bge = by_name(diff_plans(fleet(), new))["bge-m3"]
    assert bge.restart_reasons == ("command arguments reordered",) and bge.recreated


def test_an_old_routers_worker_list_is_one_option_whose_urls_are_compared_together():
    old, new = fleet(), fleet()
    urls = ["http://192.0.2.21:8000", "http://192.0.2.22:8000"]
    for doc, workers in ((old, urls), (new, [urls[0], "http://192.0.2.23:8000"])):
        doc["hosts"][0]["services"][0]["container"]["command"] = ["vllm-router", "--worker-urls", *workers]
    bge = by_name(diff_plans(old, new))["bge-m3"]
    assert bge.restart_reasons == (f"--worker-urls {', '.join(urls)} -> {urls[0]}, http://192.0.2.23:8000",)


def test_a_moved_service_with_a_new_port_and_a_new_argument_reports_all_three():
    new = plan(
        service("bge-m3", devices=[0], api_port=7007, slot=0),
        service("qwen-long", devices=[4, 5, 6, 7], api_port=6006, slot=1, max_model_len=100000),
        service("qwen-vl", host="npu-b", devices=[0, 1, 2, 3], api_port=9010, slot=2, max_model_len=30000),
    )
    vl = by_name(diff_plans(fleet(), new))["qwen-vl"]
    assert vl.kinds() == ["moved", "ports changed", "restarted"]
    assert vl.lines() == [
        ("moved", "npu-a cards 0-3 -> npu-b cards 0-3"),
        ("ports changed", "apiPort 9009 -> 9010"),
        ("restarted", "--max-model-len 25000 -> 30000"),
    ]


def test_a_stack_absent_at_the_old_revision_reports_every_service_added():
    diff = diff_plans(None, fleet(), against="origin/main")
    assert diff.stack_is_new
    assert [s.status for s in diff.services] == ["added"] * 3
    assert diff.summary() == "0 changed, 3 added, 0 removed, 0 unchanged"
    assert "did not exist at origin/main" in render_diff(diff, "markdown")


def test_changes_are_ordered_by_host_then_service_name():
    old = plan(service("b", host="npu-b", slot=0), service("z", slot=1), service("a", host="npu-b", slot=2))
    new = plan(service("y", host="npu-b", slot=3), service("c", slot=4))
    assert [(s.host, s.name) for s in diff_plans(old, new).services] == [
        ("npu-a", "c"), ("npu-a", "z"), ("npu-b", "a"), ("npu-b", "b"), ("npu-b", "y"),
    ]  # fmt: skip


# --- rendering --------------------------------------------------------------


def sample_diff():
    new = plan(
        service("bge-m3", devices=[0], api_port=7007, slot=0),
        service("qwen-vl", host="npu-b", devices=[0, 1, 2, 3], api_port=9010, slot=2, max_model_len=30000),
        service("rerank", devices=[1], api_port=7008, slot=3),
    )
    return diff_plans(fleet(), new, against="origin/main")


def test_the_markdown_comment_has_a_heading_with_the_stack_a_summary_and_a_table_of_changes():
    text = render_diff(sample_diff(), "markdown")
    lines = text.splitlines()
    assert lines[0].startswith("### ") and "`prod`" in lines[0] and "origin/main" in lines[0]
    assert "**1 changed, 1 added, 1 removed, 1 unchanged**" in lines
    assert "| Host | Service | Change | Details |" in lines
    assert "| `npu-b` | `qwen-vl` | moved | `npu-a cards 0-3 -> npu-b cards 0-3` |" in lines
    assert "|  |  | restarted | `--max-model-len 25000 -> 30000` |" in lines
    assert "| `npu-a` | `qwen-long` | removed | `was on npu-a cards 4-7` |" in lines
    assert "No allocation changes." not in text
    # Unchanged services are counted, not listed.
    assert "bge-m3" not in text


def test_markdown_cells_escape_pipes_so_the_table_keeps_its_columns():
    new = fleet()
    new["hosts"][0]["services"][0]["container"]["env"]["LOG_FILTER"] = "a|b"
    text = render_diff(diff_plans(fleet(), new), "markdown")
    row = next(line for line in text.splitlines() if "LOG_FILTER" in line)
    assert "a\\|b" in row


def test_the_table_format_lists_what_will_restart_first_then_one_line_per_fact_under_a_header():
    text = render_diff(sample_diff(), "table")
    lines = text.splitlines()
    assert lines[0] == "Allocation changes for stack prod against origin/main: 1 changed, 1 added, 1 removed, 1 unchanged"
    assert lines[1] == "Will restart: 1 container(s), each down for its model load:"
    assert lines[2].split() == ["HOST", "CONTAINER", "RE-CREATED", "BY", "COST"]
    assert lines[3].split()[:2] == ["npu-b", "qwen-vl"] and lines[3].endswith("down for the model load")
    assert lines[5].split() == ["HOST", "SERVICE", "CHANGE", "DETAILS"]
    assert any(line.split()[:3] == ["npu-b", "qwen-vl", "moved"] for line in lines)
    assert any("apiPort 9009 -> 9010" in line for line in lines)


def test_the_json_format_is_the_whole_diff_machine_readable():
    doc = json.loads(render_diff(sample_diff(), "json"))
    assert doc["stack"] == "prod" and doc["against"] == "origin/main" and doc["hasChanges"]
    vl = next(s for s in doc["services"] if s["name"] == "qwen-vl")
    assert vl["status"] == "changed"
    assert vl["changes"] == ["moved", "ports changed", "restarted"]
    assert vl["moved"] == {"from": {"host": "npu-a", "devices": [0, 1, 2, 3]}, "to": {"host": "npu-b", "devices": [0, 1, 2, 3]}}
    assert vl["ports"] == [{"key": "apiPort", "old": 9009, "new": 9010}]


def test_an_unknown_format_is_refused():
    with pytest.raises(ValueError, match="table, json, markdown"):
        render_diff(sample_diff(), "yaml")


def test_capacity_keys_an_older_plan_did_not_print_are_not_changes_but_new_values_of_known_ones_are():
    old, new = fleet(), fleet()
    for doc, extra in ((old, {}), (new, {"blockSizeTokens": 128, "kvCacheBlocks": 10})):
        for h in doc["hosts"]:
            for s in h["services"]:
                s["capacity"] = {"fits": True, "kvCacheTokens": 1280, **extra}
    assert not diff_plans(old, new).has_changes
    new["hosts"][0]["services"][0]["capacity"]["kvCacheTokens"] = 2560
    bge = by_name(diff_plans(old, new))["bge-m3"]
    assert [(c.key, c.old, c.new) for c in bge.capacity] == [("kvCacheTokens", 1280, 2560)]
    assert not bge.recreated, "a capacity verdict re-creates nothing"


# --- plan_at_revision, on real git repositories -----------------------------

STACK_BEFORE = """\
config:
  ascend-fleet:hosts:
    - name: npu-a
      address: 192.0.2.10
  ascend-fleet:services:
    - name: bge-m3
      model: /models/bge-m3
      memoryFraction: 0.1
      apiPort: 7007
      devices: [0]
    - name: qwen
      model: /models/qwen
      tensorParallelSize: 4
      memoryFraction: 0.85
      devices: [0, 1, 2, 3]
    - name: qwen-long
      model: /models/qwen
      tensorParallelSize: 4
      memoryFraction: 0.85
      maxModelLen: 25000
    - name: old-embed
      model: /models/old-embed
      memoryFraction: 0.05
"""

# qwen shrinks to a pair of cards (moved), qwen-long gets a longer context (restarted),
# old-embed is gone, rerank is new, bge-m3 (pinned) is untouched.
STACK_AFTER = """\
config:
  ascend-fleet:hosts:
    - name: npu-a
      address: 192.0.2.10
  ascend-fleet:services:
    - name: bge-m3
      model: /models/bge-m3
      memoryFraction: 0.1
      apiPort: 7007
      devices: [0]
    - name: qwen
      model: /models/qwen
      tensorParallelSize: 2
      memoryFraction: 0.85
      devices: [0, 1]
    - name: qwen-long
      model: /models/qwen
      tensorParallelSize: 4
      memoryFraction: 0.85
      maxModelLen: 30000
    - name: rerank
      model: /models/rerank
      memoryFraction: 0.05
      apiPort: 7010
"""


# A stand-in for the program in the old tree: `python -m allocation plan (--stack S | --config F) --format
# json` prints the stack it was asked for and that stack file's text, as found in the extracted tree. It
# shows where `plan_at_revision` looks and what it runs, in milliseconds: the real program at a
# revision runs in the two end-to-end tests.
STAND_IN_PLAN = """\
import json, sys
from pathlib import Path
args = sys.argv[1:]
if "--stack" in args:
    stack = args[args.index("--stack") + 1]
    path = Path(f"Pulumi.{stack}.yaml")
else:
    path = Path(args[args.index("--config") + 1])
    stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
print(json.dumps({"stack": stack, "stackFile": path.read_text()}))
"""


def stand_in_program(dest: Path) -> None:
    (dest / "allocation").mkdir(parents=True)
    (dest / "allocation" / "__init__.py").write_text("")
    (dest / "allocation" / "__main__.py").write_text(STAND_IN_PLAN)


def current_plan(repo: Path, *selector: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "allocation", "plan", *selector, "--format", "json"],
        cwd=repo, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(repo)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def two_commits(repo: Path, project: Path, program) -> Path:
    """`project` (inside the git repository `repo`) with `program`, and Pulumi.test.yaml committed
    twice: STACK_BEFORE, then STACK_AFTER."""
    program(project)
    (project / "Pulumi.yaml").write_text(PROJECT)
    (project / "Pulumi.test.yaml").write_text(STACK_BEFORE)
    git(repo.parent, "init", "--quiet", "--initial-branch=main", str(repo))
    git(repo, "add", ".")
    git(repo, "commit", "--quiet", "-m", "before")
    (project / "Pulumi.test.yaml").write_text(STACK_AFTER)
    git(repo, "commit", "--quiet", "-am", "after")
    return project


@pytest.fixture
def history(tmp_path: Path) -> Path:
    """A git repository with the stand-in program and two commits of Pulumi.test.yaml."""
    return two_commits(tmp_path / "repo", tmp_path / "repo", stand_in_program)


@pytest.fixture
def history_with_the_program(tmp_path: Path) -> Path:
    """The same, with the real program: the old plan is really computed by the code at the revision."""
    return two_commits(tmp_path / "repo", tmp_path / "repo", copy_program)


def test_plan_against_the_previous_commit_reports_added_removed_moved_restarted_and_unchanged(
    history_with_the_program: Path,
):
    new = current_plan(history_with_the_program, "--stack", "test")
    old = plan_at_revision(history_with_the_program, "HEAD~1", "test", None)
    assert old is not None and old["stack"] == "test"
    diff = diff_plans(old, new, against="HEAD~1")
    status = {s.name: s for s in diff.services}
    assert status["rerank"].added
    assert status["old-embed"].removed
    assert status["qwen"].moved
    assert (status["qwen"].moved_from.devices, status["qwen"].moved_to.devices) == ((0, 1, 2, 3), (0, 1))
    assert "--max-model-len 25000 -> 30000" in status["qwen-long"].restart_reasons
    assert not status["qwen-long"].moved
    assert status["bge-m3"].unchanged
    assert diff.counts()["added"] == 1 and diff.counts()["removed"] == 1
    assert "### " in render_diff(diff, "markdown")


def test_the_plan_command_against_the_same_revision_of_a_linked_stack_file_reports_every_service_unchanged(
    history_with_the_program: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    """`plan --against HEAD` end to end through the command line, the old plan really compared. The
    stack file is a link, `Pulumi.prod.yaml -> stacks/fleet.yaml`: both sides plan stack prod, so
    nothing is re-created."""
    history = history_with_the_program
    (history / "stacks").mkdir()
    git(history, "mv", "Pulumi.test.yaml", "stacks/fleet.yaml")
    (history / "Pulumi.prod.yaml").symlink_to("stacks/fleet.yaml")
    git(history, "add", "Pulumi.prod.yaml")
    git(history, "commit", "--quiet", "-m", "the stack file lives under stacks/")
    monkeypatch.setattr(cli_main, "PROJECT_ROOT", history)
    monkeypatch.chdir(history)
    code = cli_main.main(["plan", "--config", "Pulumi.prod.yaml", "--against", "HEAD", "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    # The diff has no warnings section: stderr says each of the new plan's warnings, once (it has none), and no
    # note ("not sized (no profile)" here: tests/test_cli.py).
    assert err == ""
    doc = json.loads(out)
    assert (doc["stack"], doc["against"], doc["stackIsNew"], doc["hasChanges"]) == ("prod", "HEAD", False, False), doc
    assert doc["summary"] == {"changed": 0, "added": 0, "removed": 0, "unchanged": 4}
    assert [(s["name"], s["status"]) for s in doc["services"]] == [
        ("bge-m3", "unchanged"), ("qwen", "unchanged"), ("qwen-long", "unchanged"), ("rerank", "unchanged"),
    ]  # fmt: skip


def test_a_stack_is_planned_from_its_file_at_the_revision(history: Path):
    assert plan_at_revision(history, "HEAD~1", "test", None) == {"stack": "test", "stackFile": STACK_BEFORE}
    assert plan_at_revision(history, "HEAD", "test", None) == {"stack": "test", "stackFile": STACK_AFTER}


def test_a_config_path_is_looked_up_at_the_same_place_in_the_old_tree(history: Path):
    old = plan_at_revision(history, "HEAD~1", None, history / "Pulumi.test.yaml")
    assert old == {"stack": "test", "stackFile": STACK_BEFORE}


def test_a_linked_stack_file_is_planned_at_the_revision_under_the_links_name(history: Path, monkeypatch):
    (history / "stacks").mkdir()
    git(history, "mv", "Pulumi.test.yaml", "stacks/fleet.yaml")
    (history / "Pulumi.prod.yaml").symlink_to("stacks/fleet.yaml")
    git(history, "add", "Pulumi.prod.yaml")
    git(history, "commit", "--quiet", "-m", "the stack file lives under stacks/")
    monkeypatch.chdir(history)
    assert plan_at_revision(history, "HEAD", None, Path("Pulumi.prod.yaml")) == {"stack": "prod", "stackFile": STACK_AFTER}
    as_named = plan_at_revision(history, "HEAD", None, Path("Pulumi.prod.yaml"), as_named="Pulumi.other.yaml")
    assert as_named == {"stack": "other", "stackFile": STACK_AFTER}


def test_a_project_in_a_subdirectory_of_the_git_repository_is_planned_there(tmp_path: Path):
    repo = tmp_path / "monorepo"
    project = two_commits(repo, repo / "infra" / "ascend", stand_in_program)
    assert plan_at_revision(project, "HEAD~1", "test", None) == {"stack": "test", "stackFile": STACK_BEFORE}


def test_a_directory_outside_any_git_repository_is_a_fleet_error(tmp_path: Path):
    with pytest.raises(FleetError, match="not inside a git work tree"):
        plan_at_revision(tmp_path, "HEAD", "test", None)


def test_a_stack_file_that_did_not_exist_at_the_revision_gives_none(history: Path):
    (history / "Pulumi.fresh.yaml").write_text(STACK_AFTER)
    git(history, "add", "Pulumi.fresh.yaml")
    git(history, "commit", "--quiet", "-m", "new stack")
    assert plan_at_revision(history, "HEAD~1", "fresh", None) is None


def test_an_unknown_revision_is_a_fleet_error_naming_it(history: Path):
    with pytest.raises(FleetError, match="unknown git revision 'origin/nope'"):
        plan_at_revision(history, "origin/nope", "test", None)


def test_a_revision_that_looks_like_an_option_is_refused(history: Path):
    with pytest.raises(FleetError, match="not a git revision"):
        plan_at_revision(history, "--output=/tmp/x", "test", None)


def test_an_old_plan_that_fails_is_a_fleet_error_carrying_its_error_output(history: Path):
    error = "error: stack test: invalid configuration: unknown key 'memoryFractoin' (did you mean 'memoryFraction'?)"
    main = history / "allocation" / "__main__.py"
    main.write_text(f"import sys\nsys.exit({error!r})\n")
    git(history, "commit", "--quiet", "-am", "a plan that fails")
    main.write_text(STAND_IN_PLAN)
    git(history, "commit", "--quiet", "-am", "fix")
    with pytest.raises(FleetError, match="the plan at HEAD~1 failed") as info:
        plan_at_revision(history, "HEAD~1", "test", None)
    # The old plan's own error output is passed on after the explanation, word for word.
    _, _, passed_on = str(info.value).partition("so there is nothing to compare with: ")
    assert passed_on == error


def test_a_config_file_outside_the_repository_is_a_fleet_error(history: Path, tmp_path: Path):
    outside = tmp_path / "elsewhere.yaml"
    outside.write_text(STACK_AFTER)
    with pytest.raises(FleetError, match="outside the git repository"):
        plan_at_revision(history, "HEAD", None, outside)


def test_a_revision_with_an_absolute_symlink_is_refused_in_one_paragraph(history: Path):
    (history / "evil").symlink_to("/etc/passwd")
    git(history, "add", "evil")
    git(history, "commit", "--quiet", "-m", "a link out of the tree")
    with pytest.raises(FleetError, match="cannot be unpacked safely"):
        plan_at_revision(history, "HEAD", "test", None)


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        ("^HEAD", "excludes"),
        ("HEAD~1..HEAD", "range"),
        ("HEAD~1...HEAD", "range"),
        ("HEAD^!", "range"),
        ("HEAD^@", "range"),
        ("HEAD^-", "range"),
        ("HEAD HEAD~1", "one commit"),
        ("HEAD\n", "one commit"),
        ("-HEAD", "option"),
    ],
)
def test_a_revision_that_is_not_one_commit_is_refused_saying_why(history: Path, ref: str, why: str):
    with pytest.raises(FleetError) as info:
        plan_at_revision(history, ref, "test", None)
    message = str(info.value)
    assert repr(ref) in message and why in message and "\n" not in message, message


def test_one_commit_spelt_with_parent_and_ancestor_suffixes_is_accepted(history: Path):
    assert resolve_revision(history, "HEAD^") == resolve_revision(history, "HEAD~1") != resolve_revision(history, "HEAD")
    assert plan_at_revision(history, "HEAD^", "test", None) == {"stack": "test", "stackFile": STACK_BEFORE}


HOSTILE_VALUE = "ok\x1b[2K\r\x1b[1Aforged | row\nnpu-a  bge-m3  restart  nothing\u202e\x07"


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_escape_sequences_and_newlines_in_a_value_are_shown_escaped_and_forge_no_line(fmt):
    """A value with ESC, CR, a newline, a bidi override and BEL in `plan --against` output: it stays on
    its own line, visibly escaped (as allocation.errors.printable escapes), and drives no terminal."""
    plain, hostile = fleet(), fleet()
    plain["hosts"][0]["services"][0]["container"]["env"]["LOG_FILTER"] = "ok"
    hostile["hosts"][0]["services"][0]["container"]["env"]["LOG_FILTER"] = HOSTILE_VALUE
    text = render_diff(diff_plans(fleet(), hostile), fmt)
    assert len(text.splitlines()) == len(render_diff(diff_plans(fleet(), plain), fmt).splitlines()), text
    assert not any(c in text for c in "\x1b\r\x07\u202e"), repr(text)
    [row] = [line for line in text.splitlines() if "LOG_FILTER" in line]
    # the table shows the carriage return escaped; markdown, which joins line breaks with a space, a space
    assert "ok\\x1b[2K" in row and "\\x1b[1Aforged" in row and "\\u202e\\x07" in row, row


# --- the NPU exporter (metrics.npuExporter) ------------------------------------------------------


def prod_plan(metrics: dict[str, Any] | None) -> dict[str, Any]:
    """Prod's plan JSON as `plan --format json` prints it, with these `metrics` settings."""
    from tests.support.stacks import values

    return json.loads(json.dumps(plan_json_of(values("prod", metrics), "prod")))


EXPORTER = "ascend-fleet-npu-exporter"
EXPORTER_ON = {"npuExporter": {"image": "registry.example/npu-exporter:v6.0.0"}}


def test_a_new_exporter_image_restarts_the_exporter_and_nothing_else():
    new = prod_plan({"npuExporter": {"image": "registry.example/npu-exporter:v6.0.1"}})
    diff = diff_plans(prod_plan(EXPORTER_ON), new)
    assert [(s.host, s.name) for s in diff.recreated()] == [("npu-a", EXPORTER)]
    (exporter,) = diff.changes()
    assert exporter.exporter and exporter.restart_reasons == (
        "image registry.example/npu-exporter:v6.0.0 -> registry.example/npu-exporter:v6.0.1",
    )


def test_a_new_exporter_port_is_the_exporters_port_change_and_restarts_only_it():
    diff = diff_plans(prod_plan(EXPORTER_ON), prod_plan({**EXPORTER_ON, "npuExporterPort": 9100}))
    assert [(s.host, s.name) for s in diff.recreated()] == [("npu-a", EXPORTER)]
    (exporter,) = diff.changes()
    assert [str(p) for p in exporter.ports] == ["npuExporterPort 8082 -> 9100"]
    assert exporter.restart_reasons == ()  # its command and health check follow from the port


def test_turning_the_exporter_on_adds_one_per_host_and_off_removes_it_restarting_no_model():
    on = diff_plans(prod_plan(None), prod_plan(EXPORTER_ON))
    assert [(s.host, s.name, s.status) for s in on.changes()] == [("npu-a", EXPORTER, "added")]
    assert on.recreated() == []
    assert on.changes()[0].lines() == [("added", "the host's NPU exporter (metrics.npuExporter)")]
    off = diff_plans(prod_plan(EXPORTER_ON), prod_plan(None))
    assert [(s.host, s.name, s.status) for s in off.changes()] == [("npu-a", EXPORTER, "removed")]


def test_an_unchanged_exporter_is_no_change():
    assert not diff_plans(prod_plan(EXPORTER_ON), prod_plan(EXPORTER_ON)).has_changes


def test_the_exporters_restart_costs_the_hosts_npu_metrics_not_a_model_load_in_every_format():
    diff = diff_plans(prod_plan(EXPORTER_ON), prod_plan({**EXPORTER_ON, "npuExporterPort": 9100}))
    table = render_diff(diff, "table")
    assert "down for" not in table and "model load" not in table.split("\n", 2)[1]
    assert "no NPU metrics from npu-a until it is back; no model restarts" in table
    assert "no NPU metrics from npu-a until it is back; no model restarts" in render_diff(diff, "markdown")
    (doc,) = [s for s in json.loads(render_diff(diff, "json"))["services"] if s["status"] != "unchanged"]
    assert (doc["name"], doc["npuExporter"], doc["recreated"]) == (EXPORTER, True, True)
