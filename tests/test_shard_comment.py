"""The one pull-request comment of a fleet deployed as shards (cli/shard_comment.py), from
`pulumi preview --json` digests shaped as pulumi/pulumi `pkg/display/json.go` writes them."""

from __future__ import annotations

import json
import re
from functools import cache

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from cli.shard_changes import ShardChanges, compare, slices
from cli.shard_comment import ARTIFACT, LIMIT_NOTE, MAX_COMMENT, MAX_STEPS, comment
from records.pipeline import deployment_of
from tests.support.stacks import host, service
from views.diff import diff_plans, render_diff
from views import markdown
from views.report import plan_json

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
    order = ["**Will restart**", "### Shard previews of fleet prod against `origin/main`", "shards 1, 3",
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
    assert "more characters are cut" in text and f"{3 * MAX_STEPS} to create" in text


# --- the whole comment fits: a new fleet of 1,000 hosts, every shard changed ---


@cache
def new_fleet(size: int) -> tuple[str, ShardChanges]:
    """`plan --against` of a fleet of 1,000 hosts, two services each, that did not exist at the base
    (every shard changed, as `shards --changed-since` finds it), and its changes."""
    names = [f"npu-{i:04d}" for i in range(1000)]
    services = [service(f"{n}-{k}", 1, 0.4, host=n) for n in names for k in ("chat", "embed")]
    plan = plan_json(deployment_of("prod", {"hosts": [host(n) for n in names], "services": services, "shards": {"size": size}}))
    diff = render_diff(diff_plans(None, plan, against="origin/main"), "markdown")
    return diff, compare("origin/main", {}, slices(plan, {"config": {}}))


def previews_of(changes: ShardChanges) -> dict[str, tuple[str | None, str | None]]:
    """Each changed shard's digest creating what a shard of its hosts deploys; one in five failed, with
    a long error output, and one uploaded nothing."""
    previews = {}
    for k in changes.changed[1:]:
        ops = [("create", f"npu-{k:03d}{i}-{kind}-container") for i in range(60) for kind in ("chat", "embed", "host-check")]
        log = "".join(f"error: ssh: connect to host npu-{k:03d}{i} port 22: timed out\n" for i in range(400))
        previews[f"prod-shard-{k}"] = (digest(k, *ops), None) if k % 5 else ("", log)
    return previews


def shown_shards(text: str) -> set[int]:
    return {int(k) for k in re.findall(r"^#### prod-shard-(\d+):", text, flags=re.M)}


@pytest.mark.parametrize("size", [50, 10])
def test_the_whole_comment_of_a_new_fleet_of_1000_hosts_stays_under_githubs_limit_saying_what_it_cut_and_where(size: int):
    diff, changes = new_fleet(size)
    assert len(changes.changed) == 1000 // size and len(diff) > MAX_COMMENT
    previews = previews_of(changes)
    text = comment("prod", changes, diff, previews)
    assert len(text) <= MAX_COMMENT
    assert text.startswith(diff[:2_000]), "the diff leads, cut at a line's end"
    assert "more lines of the allocation diff are cut" in text
    where = rf"the whole comment is `?prod\.md`? in the artifact `?{ARTIFACT}`? of this workflow run"
    assert len(re.findall(where, text)) >= 2, "each cut says what it cut and where the whole text is"
    cut = re.search(r"^\*\*The sections of (\d+) more changed shards are cut\*\*", text, flags=re.M)
    assert len(shown_shards(text)) + (int(cut.group(1)) if cut else 0) == len(changes.changed), "every shard is shown or counted"
    whole = comment("prod", changes, diff, previews, limit=None)
    assert whole.startswith(diff.rstrip()) and shown_shards(whole) == set(changes.changed) and LIMIT_NOTE not in whole


@settings(max_examples=40, deadline=None)
@given(
    shards=st.integers(1, 120),
    steps=st.integers(0, 3 * MAX_STEPS),
    name=st.integers(1, 400),
    diff_lines=st.integers(0, 3_000),
    failed=st.sampled_from([0, 2, 3, 7]),
)
def test_any_number_of_shards_resources_and_diff_lines_fits_under_the_limit(shards, steps, name, diff_lines, failed):
    changes = ShardChanges("main", tuple(range(shards)), ())
    previews = {
        f"prod-shard-{k}": (None, "e" * name * steps) if failed and k % failed == 0 else (digest(k, *[("update", f"{i}-" + "n" * name) for i in range(steps)]), None)
        for k in range(shards)
    }
    diff = DIFF + "".join(f"| `npu-{i}` | `svc-{i}` | new | `cards 0-7` |\n" for i in range(diff_lines))
    text = comment("prod", changes, diff, previews)
    note(text[-3_000:])
    assert len(text) <= MAX_COMMENT
    assert text.startswith(DIFF.rstrip())


# --- a digest of any shape ---------------------------------------------------


def section_of(text: str, stack: str) -> str:
    """The markdown of one shard's section: from its heading to the next."""
    return text.split(f"#### {stack}:", 1)[1].split("\n#### ", 1)[0]


@pytest.mark.parametrize(
    ("document", "why"),
    [
        ("[]", "its digest is a JSON list, not a JSON object"),
        ("null", "its digest is a JSON null, not a JSON object"),
        ('"steps"', "its digest is a JSON string, not a JSON object"),
        ("[" * 100_000 + "]" * 100_000, "the preview printed no JSON digest"),
        ('{"steps": [' + "1" * 5_000 + "]}", "the preview printed no JSON digest"),
        ('{"steps": {"op": "create"}}', "its steps is a JSON object, not a JSON list"),
        ('{"steps": [{"op": "create"}]}', "its step 0 is not an object with a text op and urn"),
        ('{"steps": [{"op": "same", "urn": "u"}, null]}', "its step 1 is not an object with a text op and urn"),
        ('{"steps": [{"op": 3, "urn": "u"}]}', "its step 0 is not an object with a text op and urn"),
        ('{"diagnostics": "error: it failed"}', "its diagnostics is a JSON string, not a JSON list"),
        ('{"diagnostics": [{"severity": "error", "message": ["x"]}]}', "its diagnostic 0 is not an object with a text message and severity"),
        ('{"changeSummary": [["create", 1]]}', "its changeSummary is a JSON list, not a JSON object"),
        ('{"changeSummary": {"create": "1"}}', "its changeSummary counts `create` as a JSON string"),
        ('{"changeSummary": {"create": true}}', "its changeSummary counts `create` as a JSON boolean"),
        ('{"changeSummary": {"create": -1}}', "its changeSummary counts `create` as -1"),
        ('{"changeSummary": {"create": 1e400}}', "its changeSummary counts `create` as a JSON number"),
        ('{"changeSummary": {"same": 99999999999999999999999}}', "its changeSummary counts `same` as 99999999999999999999999"),
    ],
)
def test_a_digest_of_the_wrong_shape_names_its_shard_and_why_and_the_others_are_shown(document: str, why: str):
    previews = {"prod-shard-0": (digest(0, ("create", "ok-container")), None), "prod-shard-1": (document, "error: it failed\n")}
    text = comment("prod", ShardChanges("main", (0, 1), ()), DIFF, previews)
    assert "#### prod-shard-0: 1 to create, 0 unchanged" in text
    assert section_of(text, "prod-shard-1").startswith(f" no preview\n\n{why}")
    assert "error: it failed" in section_of(text, "prod-shard-1")


def test_a_digest_that_leaves_out_every_key_pulumi_may_omit_is_a_preview_of_no_changes():
    previews = {"prod-shard-0": ("{}", None), "prod-shard-1": ('{"steps": null, "changeSummary": null, "diagnostics": null}', None)}
    text = comment("prod", ShardChanges("main", (0, 1), ()), DIFF, previews)
    assert "#### prod-shard-0: no changes, 0 unchanged" in text and "#### prod-shard-1: no changes, 0 unchanged" in text


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["op", "urn", "message", "severity", "same", "create", "x"]), inner, max_size=4),
    max_leaves=20,
)
DIGESTS = JSON | st.fixed_dictionaries({}, optional={"steps": JSON, "diagnostics": JSON, "changeSummary": JSON})


@settings(max_examples=300, deadline=None)
@given(document=DIGESTS)
def test_a_digest_of_any_shape_gives_a_comment_naming_its_shard(document):
    text = comment("prod", ShardChanges("main", (0,), ()), DIFF, {"prod-shard-0": (json.dumps(document), "log")})
    note(text)
    assert re.search(r"^#### prod-shard-0: (no preview\n\n|.* unchanged$)", text, flags=re.M)
    assert len(text) <= MAX_COMMENT


# --- nothing read from a digest reaches the markdown unescaped ----------------


def prose(text: str) -> str:
    """The comment's text outside fenced code blocks and code spans (CommonMark 4.5, 6.1): where
    GitHub reads markdown, HTML and @mentions."""
    kept, fence = [], None
    for line in text.split("\n"):
        opening = re.match(r" {0,3}(`{3,})", line)
        if fence is None and opening:
            fence = opening.group(1)
        elif fence is None:
            kept.append(line)
        elif re.fullmatch(rf" {{0,3}}{fence}`*[ \t]*", line):
            fence = None
    return re.sub(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)", "", "\n".join(kept), flags=re.S)


HOSTILE = "x`` <!-- @octocat ](https://evil.example) <img src=x onerror=alert(1)>\n# forged heading\n```\n</details>\x1b[2K\u202e"


def test_hostile_text_in_a_digest_stays_inside_code_never_markdown_html_or_a_mention():
    urn = f"urn:pulumi:{HOSTILE}::ascend-fleet::ascend-fleet:index:{HOSTILE}$docker:index/container:{HOSTILE}::{HOSTILE}"
    document = {
        "steps": [{"op": HOSTILE, "urn": urn}, {"op": "create", "urn": HOSTILE}],
        "diagnostics": [{"severity": "error", "message": HOSTILE, "urn": urn, "prefix": HOSTILE}],
        "changeSummary": {HOSTILE: 1, "create": 1, "same": 2},
    }
    previews = {"prod-shard-0": (json.dumps(document), None), "prod-shard-1": (json.dumps({"changeSummary": {HOSTILE: "x"}}), HOSTILE)}
    text = comment("prod", ShardChanges("main", (0, 1), ()), DIFF, previews)
    outside = prose(text)

    assert "@octocat" not in outside and "](" not in outside and not re.search(r"(?<!\\)<", outside.replace("<details>", "").replace("</details>", "").replace("<summary>", "").replace("</summary>", ""))
    assert not re.search(r"^#+ forged", outside, flags=re.M) and outside.count("</details>") == outside.count("<details>") == 1
    assert "\x1b" not in text and "\u202e" not in text, "control and format characters are escaped, inside code too"
    listing = re.split(r"`{3,}text\n", section_of(text, "prod-shard-0"))[1].split("\nerror: ")[0]
    assert len(listing.splitlines()) == 2, "one line per resource, whatever its name holds"
    assert f"#### prod-shard-0: 1 to create, 1 to {markdown.code(HOSTILE)}, 2 unchanged" in text


def test_a_digest_counting_hundreds_of_operations_names_what_fits_in_the_heading_and_counts_the_rest():
    summary = {f"op-{i:03d}": 1 for i in range(500)}
    text = comment("prod", ShardChanges("main", (0,), ()), DIFF, {"prod-shard-0": (json.dumps({"changeSummary": summary}), None)})
    [heading] = [line for line in text.splitlines() if line.startswith("#### prod-shard-0: ")]
    assert heading.startswith("#### prod-shard-0: 1 to `op-000`, 1 to `op-001`") and len(heading) < 300
    assert heading.endswith(" other operations, 0 unchanged")


def test_shards_whose_headings_no_longer_fit_are_counted_in_one_line_however_few_they_are():
    """Shard by shard, past the count whose headings fit: the first shard left out, then the next."""
    diff = DIFF + "".join(f"| `npu-{i}` | `svc-{i}` | new | `cards 0-7` |\n" for i in range(1_000))
    body = digest(0, *[("update", f"c{i}-" + "n" * 100) for i in range(100)])
    counted = set()
    for shards in range(128, 138):
        previews = {f"prod-shard-{k}": (body, None) for k in range(shards)}
        text = comment("prod", ShardChanges("main", tuple(range(shards)), ()), diff, previews)
        assert len(text) <= MAX_COMMENT, shards
        cut = re.search(r"^\*\*The sections of (\d+) more changed shards are cut\*\*", text, flags=re.M)
        counted.add(int(cut.group(1)) if cut else 0)
        assert len(shown_shards(text)) + (int(cut.group(1)) if cut else 0) == shards
    assert {0, 2, 3} <= counted, counted
