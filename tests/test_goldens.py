"""The plan's every output (JSON, table, markdown, pins, compose, docker run, Prometheus, dashboard)
for the committed stacks and two fleets using every replica, router and defaults feature is byte
for byte what the code before the replica model wrote (`tests/goldens.py` says how they were made),
but for the documented changes below.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import re
import textwrap
import uuid
from decimal import Decimal

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests.goldens import GOLDENS, fleets, outputs
from views.report import _md_table, _orjson_text, json_text, text_table
from tests.support.pipeline import plan_json_of

FLEETS = fleets()


def documented_changes(plan_text: str, fleet) -> str:
    """The golden plan JSON with the values changed since the refactor, each in docs/plan-json.md:
    `replicaOf` names the service a container serves, so a service of its own names itself
    where the plan before wrote `null`, as Prometheus's `replica_of` label always did; each host
    carries its `heldCards`, its `board` (`a2` for all of these) and its `deviceShareCards` (on an
    A2 board the shared cards of a `deviceShare` host, else none)."""
    plan = json.loads(plan_text)
    hosts = {h.name: h for h in fleet.hosts}
    for host in plan["hosts"]:
        for service in host["services"]:
            service["replicaOf"] = service["replicaOf"] or service["name"]
        configured = hosts[host["name"]]
        mode = host["sharedCards"] if configured.card_sharing == "deviceShare" else []
        added = {"board": configured.board, "deviceShareCards": mode, "heldCards": configured.held_cards}
        after = {"npus": "board", "sharedCards": "deviceShareCards", "cardSharing": "heldCards"}
        items = []
        for key, value in host.items():  # each added key in its place in the text
            items += [(key, value)] + ([(after[key], added[after[key]])] if key in after else [])
        host.clear()
        host.update(items)
    return json.dumps(plan, indent=2)


TAKEOVER = (
    "model-emb-vl, model-text stop once every image of the host is present; their services are down from then",
    "until the new containers answer /health: at most 3600 s (startTimeoutSeconds of bge-m3, then qwen-vl)",
)
"""Prod's host takes over from the compose deployment: the table and markdown say, after the host's
tables, when its containers stop and how long their services are down (docs/moving-from-compose.md)."""


def documented_takeover(golden: dict, name: str) -> None:
    """The takeover line of prod's host, added after its tables (the only golden host with `replaces`)."""
    if name != "prod":
        return
    table = f"  takes over: {TAKEOVER[0]}\n    {TAKEOVER[1]}"
    golden["table"] = golden["table"].replace("\n\nwarnings\n", f"\n\n{table}\n\nwarnings\n", 1)
    markdown = f"- takes over: {' '.join(TAKEOVER)}"
    golden["markdown"] = golden["markdown"].replace("\n\n### Warnings\n", f"\n\n{markdown}\n\n### Warnings\n", 1)


# Issue 42, a warning is a problem: where a figure comes from (an unverified profile, a service not sized for
# want of a profile, an estimate) is a note, in a section of its own before the warnings (views.report), the
# plan JSON's `notes` beside `warnings`, and on every host where the plan counts a figure a table of where
# each comes from (it was only on a host with a measured service). docs/commands.md, docs/plan-json.md.
NOTE = re.compile(r"^host [^:]+: profile: [^:]+ (sized with an unverified profile|not sized \(no profile\)): ")
"""The golden warnings that are notes now, word for word."""
NEW_NOTES = {
    "prod": [
        "host npu-a card 0: graphMemoryGiB: its services start in both orders with 3.00 GiB to spare, counting "
        "estimated NPU graph pools (bge-m3 0.17 GiB, qwen-vl 0.05 GiB); python -m allocation calibrate writes the "
        "measured ones"
    ],
}
"""Notes no golden warning said: prod's card 0 holds, counting estimated graph pools (tests/test_graph_memory.py)."""
ESTIMATED = ["4.00 GiB runtimeOverheadGiB", "0.17 GiB estimate", "-"]
UNSIZED = ["-", "-", "not counted (no profile)", "-"]
FIGURES = {
    "prod": {"npu-a": [
        ["bge-m3", "1.06 GiB profile", *ESTIMATED],
        ["qwen-long", "12.94 GiB unverified profile", "4.00 GiB runtimeOverheadGiB", "0.03 GiB estimate", "-"],
        ["qwen-vl", "12.94 GiB unverified profile", "4.00 GiB runtimeOverheadGiB", "0.05 GiB estimate", "-"],
    ]},
    "shared": {
        "npu-a": [["a", "2.00 GiB profile", *ESTIMATED], ["b", *UNSIZED], ["c", *UNSIZED],
                  ["d", "2.00 GiB profile", "4.00 GiB runtimeOverheadGiB", "0.01 GiB estimate", "-"],
                  ["e-1", "2.00 GiB profile", *ESTIMATED]],
        "npu-b": [["e-2", "2.00 GiB profile", *ESTIMATED]],
    },
}  # fmt: skip
"""The figures table of each golden host where the plan counts a figure, after its capacity table."""


def _wrapped(kind: str, line: str) -> str:
    """A warning's or a note's lines in the table, wrapped as the golden's warnings are."""
    return textwrap.fill(line, 120, initial_indent=f"  {kind}: ", subsequent_indent="    ", break_long_words=False,
                         break_on_hyphens=False)  # fmt: skip


def _section(text: str, heading: str, marker: str) -> tuple[str, list[str]]:
    """The text before the golden's last section (`heading`), and that section's items, each its lines as written."""
    head, _, tail = text.partition(f"\n\n{heading}\n\n")
    return head, [item if i == 0 else marker + item for i, item in enumerate(tail.split("\n" + marker))]


def _with_figures(text: str, title: str, capacity: str, table: str) -> str:
    """`text` with `table` after the host's capacity table: the first block after its `title` whose first line
    matches `capacity`."""
    at = re.compile(capacity, re.M).search(text, text.index(title)).start()
    end = text.find("\n\n", at)
    end = len(text) if end < 0 else end
    return text[:end] + "\n\n" + table + text[end:]


def documented_notes(golden: dict, name: str) -> None:
    """The golden warnings that say where a figure comes from as notes, before the warnings left, with
    the notes no golden warning said (NEW_NOTES), and the figures tables (FIGURES)."""
    moved = [bool(NOTE.match(w)) for w in golden["warnings"]]
    notes = [w for w, m in zip(golden["warnings"], moved) if m] + NEW_NOTES.get(name, [])
    kept = [w for w, m in zip(golden["warnings"], moved) if not m]
    plan = json.loads(golden["json"])
    plan["warnings"], plan["notes"] = kept, notes
    golden["json"], golden["warnings"], golden["notes"] = json.dumps(plan, indent=2), kept, notes
    head, items = _section(golden["table"], "warnings", "  warning: ")
    sections = [("notes", [_wrapped("note", n) for n in notes]), ("warnings", [i for i, m in zip(items, moved) if not m])]
    golden["table"] = "\n\n".join([head, *(f"{h}\n\n" + "\n".join(ls) for h, ls in sections if ls)])
    head, items = _section(golden["markdown"], "### Warnings", "- ")
    assert not any(re.search(r"[\\`*_\[\]<>#|~]", n) for n in NEW_NOTES.get(name, [])), "written as markdown.text writes it"
    said = [i for i, m in zip(items, moved) if m] + [f"- {n}" for n in NEW_NOTES.get(name, [])]
    sections = [("### Notes", said), ("### Warnings", [i for i, m in zip(items, moved) if not m])]
    golden["markdown"] = "\n\n".join([head, *(f"{h}\n\n" + "\n".join(ls) for h, ls in sections if ls)])
    for host, rows in FIGURES.get(name, {}).items():
        table = (["figures", "weights/card", "runtime overhead", "NPU graphs", "measured"], rows)
        golden["table"] = _with_figures(golden["table"], f"\n{host} (", r"^  service +weights/card", text_table(*table))
        golden["markdown"] = _with_figures(golden["markdown"], f"\n### {host} (", r"^\| service \| weights/card", _md_table(*table))


def documented_boot_step(golden: dict) -> None:
    """The device-share boot step the docker-run export writes on a host: it waits up to 10 minutes for
    the driver (300 polls of 2 s, was 60) and runs before a Kubernetes node's containerd and kubelet
    as well as Docker (records/device_share.py, docs/shared-cards.md)."""
    golden["docker-run"] = (
        golden["docker-run"]
        .replace('[ "$tries" -lt 60 ] || break; sleep 2', '[ "$tries" -lt 300 ] || break; sleep 2')
        .replace("\nBefore=docker.service\n", "\nBefore=docker.service containerd.service kubelet.service\n")
    )


# Issue 43, names are names: every command that acts on a container by name acts on the ID of the
# container of that exact name (records.runtime `named`), since Docker reads a name no container has
# as an ID prefix. The docker-run script carries the host scripts (their digests are in
# tests/data/runtime_seam.json) and deletes each container before it creates it; these lines changed.
DOCKER_RUN_CHANGES = (
    # The takeover: the ID of the container of that name, or nothing to take over.
    (
        r"""  if ! before=\$\("\$docker" inspect (--format '[^']*') -- "\$name" 2>/dev/null </dev/null\); then
    echo "ascend-fleet: host ([a-z0-9-]+): \$name is not here \(removed already\): nothing to take over"
""",
        r"""  if ! id=$("$docker" ps -aq --no-trunc --filter "name=^/\\Q""$name""\\E\\$" 2>/dev/null </dev/null); then
    problems="$problems
  - $name: could not list the containers: $("$docker" ps -aq --no-trunc --filter "name=^/\\Q""$name""\\E\\$" 2>&1 >/dev/null </dev/null)"; continue
  fi
  if [ -z "$id" ] || ! before=$("$docker" inspect \1 -- "$id" 2>/dev/null </dev/null); then
    echo "ascend-fleet: host \2: no container is named $name (removed already): nothing to take over"
""",
    ),
    (r'(update --restart=no|stop) -- "\$name" 2>&1', r'\1 -- "$id" 2>&1'),
    # Device-share's stopHolders: the holders stopped and started by their IDs.
    (
        r'    "\$\{docker:-docker\}" stop \$who </dev/null',
        r'    ids=$(for n in $who; do "${docker:-docker}" ps -aq --no-trunc --filter "name=^/\\Q""$n""\\E\\$" </dev/null 2>/dev/null; done)'
        '\n' r'    "${docker:-docker}" stop $ids </dev/null',
    ),
    (r'    "\$\{docker:-docker\}" start \$who </dev/null', r'    "${docker:-docker}" start $ids </dev/null'),
    # The start order's boot step: waits only for a container of that exact name.
    (
        r"""  until \[ "\$\("\$\{docker:-docker\}" inspect -f '\{\{\.State\.Running\}\}' "\$name" """,
        r"""  id=$("${docker:-docker}" ps -aq --no-trunc --filter "name=^/\\Q""$name""\\E\\$" 2>/dev/null </dev/null) && [ -n "$id" ] || continue
  until [ "$("${docker:-docker}" inspect -f '{{.State.Running}}' "$id" """,
    ),
    # Delete before create: only the container of that exact name.
    (
        r"docker stop --time (\d+) -- (\S+) >/dev/null 2>&1 \|\| true\ndocker rm -f -- \2 >/dev/null 2>&1 \|\| true\n",
        r"""id=$(docker ps -aq --no-trunc --filter "name=^/\\Q"\2"\\E\\$")
if [ -n "$id" ]; then
  docker stop --time \1 -- "$id" >/dev/null 2>&1 || true
  docker rm -f -- "$id" >/dev/null 2>&1 || true
fi
""",
    ),
)


def documented_docker_run_changes(script: str) -> str:
    """The golden docker-run script with the lines changed since, each in DOCKER_RUN_CHANGES."""
    for before, after in DOCKER_RUN_CHANGES:
        script = re.sub(before, after, script)
    return script


def test_the_golden_plan_json_is_written_as_the_plan_writes_it_so_the_comparison_is_byte_for_byte():
    for name in FLEETS:
        text = json.loads((GOLDENS / f"{name}.json").read_text())["json"]
        assert json.dumps(json.loads(text), indent=2) == text


@pytest.mark.parametrize("name", sorted(FLEETS))
def test_every_output_of_the_plan_is_byte_identical_to_the_golden_written_before_the_refactor(name):
    golden = json.loads((GOLDENS / f"{name}.json").read_text())
    golden["json"] = documented_changes(golden["json"], FLEETS[name])
    documented_takeover(golden, name)
    documented_notes(golden, name)
    documented_boot_step(golden)
    golden["docker-run"] = documented_docker_run_changes(golden["docker-run"])
    now = json.loads(json.dumps(outputs(FLEETS[name]), sort_keys=True))
    for what in golden:
        assert now[what] == golden[what], f"{name}: {what} differs from the golden"
    assert sorted(now) == sorted(golden)


JSON_SAMPLES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats() | st.floats(min_value=-1e-3, max_value=1e-3) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6) | st.integers(), inner, max_size=4),
    max_leaves=20,
)  # fmt: skip


@given(JSON_SAMPLES)
@example({"a": [1e-05, 9.9e-05, 1e-07, 1e16, 1e22, float("nan"), float("inf"), -0.0, 0.0001]})
@example({"a": 2**64, "b": -(2**63) - 1, "c": "\u00e9", "d": True, "e": None})
@example({1: 2})
def test_the_plan_json_text_is_the_standard_librarys_indented_text_byte_for_byte(doc):
    assert json_text(doc) == json.dumps(doc, indent=2)


@pytest.mark.parametrize("code", range(128))
def test_every_ascii_character_in_a_value_prints_as_the_standard_library_prints_it(code):
    doc = {"env": {"A": f"x{chr(code)}y"}, f"k{chr(code)}": [chr(code)]}
    assert json_text(doc) == json.dumps(doc, indent=2)


class _Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class _Point:
    x: int


class _Text(str):
    pass


class _Count(int):
    pass


@pytest.mark.parametrize("value", [uuid.UUID(int=1), _Colour.RED, _Point(1), datetime.date(2026, 1, 1), Decimal("0.5")])
def test_a_value_the_standard_library_cannot_print_is_refused_as_it_refuses_it_though_orjson_prints_it(value):
    for doc in ({"a": [1, {"b": value}]}, [value], value):
        with pytest.raises(TypeError):
            json.dumps(doc, indent=2)
        with pytest.raises(TypeError):
            json_text(doc)


@pytest.mark.parametrize("value", [_Text("x"), _Count(3), (1, "a"), {_Text("k"): 1}, {"a": 2**64 - 1}])
def test_subclasses_tuples_and_the_largest_integers_print_as_the_standard_library_prints_them(value):
    doc = {"a": [value, {"b": value}]}
    assert json_text(doc) == json.dumps(doc, indent=2)


@pytest.mark.parametrize("name", sorted(FLEETS))
def test_every_golden_plan_takes_orjsons_path(name):
    doc = plan_json_of(FLEETS[name])
    assert _orjson_text(doc) == json.dumps(doc, indent=2)
