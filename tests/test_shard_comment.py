"""The one pull-request comment of a fleet deployed as shards (cli/shard_comment.py), from
`pulumi preview --json` digests shaped as pulumi/pulumi `pkg/display/json.go` writes them."""

from __future__ import annotations

import json

from cli.shard_changes import ShardChanges
from cli.shard_comment import MAX_COMMENT, MAX_STEPS, comment

DIFF = "### Allocation changes for stack prod against origin/main\n\n**Will restart** (1)\n- qwen on npu-003\n"
URN = "urn:pulumi:prod-shard-{k}::ascend-fleet::ascend-fleet:index:ModelService$docker:index/container:Container::{name}"


def digest(k: int, *ops: tuple[str, str], diagnostics: list[dict] | None = None) -> str:
    steps = [{"op": op, "urn": URN.format(k=k, name=name)} for op, name in ops]
    summary: dict[str, int] = {}
    for op, _ in ops:
        summary[op] = summary.get(op, 0) + 1
    return json.dumps({"steps": steps, "changeSummary": summary, "diagnostics": diagnostics or []})


def test_the_restart_list_comes_first_then_each_changed_shard_then_the_unchanged_ones():
    changes = ShardChanges("origin/main", changed=(1, 3), unchanged=(0, 2))
    previews = {
        "prod-shard-1": (digest(1, ("replace", "qwen-container"), ("same", "bge-container")), None),
        "prod-shard-3": (digest(3, ("create", "new-container")), None),
    }
    text = comment("prod", changes, DIFF, previews)
    order = ["**Will restart**", "### Shard previews of fleet prod against origin/main", "shards 1, 3",
             "shards 0, 2", "#### prod-shard-1: 1 to replace, 1 unchanged", "replace docker:index/container:Container qwen-container",
             "#### prod-shard-3: 1 to create, 0 unchanged", "create docker:index/container:Container new-container"]  # fmt: skip
    assert [text.index(s) for s in order] == sorted(text.index(s) for s in order)
    assert "bge-container" not in text, "an unchanged resource is counted, not listed"


def test_a_shard_whose_preview_is_missing_or_not_json_says_so_with_its_error_output():
    changes = ShardChanges("origin/main", changed=(0, 1), unchanged=())
    previews = {"prod-shard-1": ("error: preview failed", "error: ssh: connect to host 10.0.0.7 port 22: timed out\n")}
    text = comment("prod", changes, DIFF, previews)
    assert "#### prod-shard-0: no preview\n\nno preview was uploaded" in text
    assert "#### prod-shard-1: no preview\n\nthe preview printed no JSON digest" in text
    assert "ssh: connect to host 10.0.0.7 port 22: timed out" in text


def test_errors_and_warnings_of_the_preview_are_shown_with_its_steps():
    diagnostics = [{"severity": "error", "message": "host npu-004: card 3 is held"}, {"severity": "info", "message": "chatter"}]
    text = comment("prod", ShardChanges("main", (0,), ()), DIFF, {"prod-shard-0": (digest(0, diagnostics=diagnostics), None)})
    assert "error: host npu-004: card 3 is held" in text and "chatter" not in text
    assert "#### prod-shard-0: no changes, 0 unchanged" in text


def test_backticks_in_a_preview_cannot_close_its_code_block():
    diagnostics = [{"severity": "error", "message": "```\n</details>\n# forged heading"}]
    text = comment("prod", ShardChanges("main", (0,), ()), DIFF, {"prod-shard-0": (digest(0, diagnostics=diagnostics), None)})
    assert "\n````text\n" in text and "\n````\n" in text


def test_every_shard_changed_says_why_and_emptied_shards_are_named_for_destroying():
    changes = ShardChanges("main", (0, 1), (), emptied=(2,), every="the program changed since main (allocation, ...)")
    text = comment("prod", changes, DIFF, {})
    assert "shards 0, 1: the program changed since main" in text
    assert "**Holding no host now**: shards 2; destroy their stacks (`pulumi destroy --stack prod-shard-2`" in text


def test_no_changed_shard_says_that_nothing_was_previewed():
    text = comment("prod", ShardChanges("main", (), (0, 1)), DIFF, {})
    assert "no shard's slice differs" in text and "####" not in text


def test_a_huge_preview_is_cut_so_the_comment_stays_under_githubs_limit():
    ops = [("create", f"c{i:05d}-" + "x" * 200) for i in range(3 * MAX_STEPS)]
    previews = {f"prod-shard-{k}": (digest(k, *ops), None) for k in range(3)}
    text = comment("prod", ShardChanges("main", (0, 1, 2), ()), DIFF, previews)
    assert len(text) < 65_536 and len(text) < MAX_COMMENT + 3_000
    assert "more characters)" in text and f"{3 * MAX_STEPS} to create" in text
