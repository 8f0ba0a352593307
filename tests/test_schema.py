"""One schema, three uses: the stack file's JSON Schema, docs/configuration.md and the plan JSON's schema
are what `python -m allocation schema` writes from the model, every committed stack passes a real
validator (check-jsonschema, as editors and CI run it), a misspelt key and an out-of-bound value do
not, and every golden plan fits the plan's schema."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from allocation.config import NAMESPACE, FleetConfig, parse_fleet
from allocation.errors import ConfigError
from allocation.schema import stack_schema
from cli import schema as command
from tests.support.stacks import fleet, host, service
from tests.goldens import GOLDENS, _synthetic, fleets
from views.plan_schema import plan_schema
from tests.support.pipeline import plan_json_of

ROOT = Path(__file__).resolve().parent.parent
STACKS = sorted(ROOT.glob("Pulumi.*.yaml"))
STACK = Draft202012Validator(stack_schema())
PLAN = Draft202012Validator(plan_schema())


def check_jsonschema(*files: Path) -> subprocess.CompletedProcess:
    schema = ROOT / command.STACK_SCHEMA
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--schemafile", str(schema), *map(str, files)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def refusals(config: dict) -> list[str]:
    return [e.message for e in STACK.iter_errors({"config": config})]


def test_the_committed_schemas_and_reference_are_what_the_model_writes():
    assert command.stale(ROOT) == [], "run `python -m allocation schema` and commit the result"


def test_check_names_a_stale_file_and_writing_makes_it_current(tmp_path):
    with pytest.raises(ConfigError, match="docs/configuration.md, schema/plan.schema.json|differ"):
        command.run(check=True, root=tmp_path)
    command.run(check=False, root=tmp_path)
    (tmp_path / command.REFERENCE).write_text("edited by hand\n")
    with pytest.raises(ConfigError) as refused:
        command.run(check=True, root=tmp_path)
    assert str(command.REFERENCE) in str(refused.value) and str(command.STACK_SCHEMA) not in str(refused.value)
    command.run(check=False, root=tmp_path)
    assert "up to date" in command.run(check=True, root=tmp_path)


def test_the_command_line_runs_schema_check(capsys):
    """Through `python -m allocation`, which checks options of the stack commands first."""
    from cli.main import main

    assert main(["schema", "--check"]) == 0, capsys.readouterr().err
    assert "up to date" in capsys.readouterr().out


@pytest.mark.parametrize("stack", STACKS, ids=[p.name for p in STACKS])
def test_every_committed_stack_names_the_schema_on_its_first_line(stack):
    assert stack.read_text(encoding="utf-8").splitlines()[0] == command.SCHEMA_LINE


def test_every_committed_stack_passes_check_jsonschema():
    done = check_jsonschema(*STACKS)
    assert done.returncode == 0, done.stdout + done.stderr


def test_check_jsonschema_refuses_a_misspelt_key_and_an_out_of_bound_value(tmp_path):
    text = (ROOT / "Pulumi.prod.yaml").read_text(encoding="utf-8")
    misspelt = tmp_path / "Pulumi.misspelt.yaml"
    misspelt.write_text(text.replace("ascend-fleet:services:", "ascend-fleet:service:"))
    out_of_bound = tmp_path / "Pulumi.bound.yaml"
    out_of_bound.write_text(text.replace("memoryFraction: 0.85", "memoryFraction: 1.85"))
    long_prefix = tmp_path / "Pulumi.prefix.yaml"  # a label key's prefix of 254 characters: the pattern's lookahead
    long_prefix.write_text(text.replace("\nconfig:\n", "\nconfig:\n  ascend-fleet:kubernetes: {taintKey: " + "p" * 254 + "/x}\n"))
    for path, said in (
        (misspelt, "'ascend-fleet:service' does not match"),
        (out_of_bound, "1.85 is greater than"),
        (long_prefix, "/x' does not match '^((?=[^/]{1,253}/)"),
    ):
        done = check_jsonschema(path)
        assert done.returncode == 1 and said in done.stdout, done.stdout + done.stderr


def test_keys_of_other_namespaces_and_a_secret_pass_and_a_key_without_namespace_does_not():
    assert refusals({"aws:region": "x", f"{NAMESPACE}:sshPrivateKey": {"secure": "v1:abc"}}) == []
    assert refusals({"region": "x"}) != []


@pytest.mark.parametrize(
    "key, value",
    [
        ("hosts", [{"name": "npu-a", "address": "192.0.2.1", "npus": 3}]),
        ("hosts", [{"name": "npu-a", "address": "192.0.2.1", "cardSharing": "shared"}]),
        ("hosts", [{"name": "npu-a", "address": "192.0.2.1", "reservedPorts": [[1, 70000]]}]),
        ("hosts", [{"name": "NPU_A", "address": "192.0.2.1"}]),
        ("services", [{"name": "a", "model": "/m", "memoryFraction": "half"}]),
        ("services", [{"name": "a", "model": "/m", "tensorParalelSize": 2}]),
        ("ports", {"apiBase": 80}),
        ("metrics", {"scrapeIntervalSeconds": 90}),
        ("dockerEngine", 20.1),
        ("hosts", [{"name": "npu-a", "address": "192.0.2.1", "sshPort": True}]),
        ("hosts", [{"name": "npu-a", "address": "192.0.2.1", "dockerEngine": "twenty"}]),
        ("services", [{"name": "a", "model": "/m", "maxNumSeqs": True}]),
        ("services", [{"name": "a", "model": "/m", "maxModelLen": "8192"}]),
        ("services", [{"name": "a", "model": "/m", "hcclPortRanges": 1}]),
    ],
)
def test_the_schema_refuses_what_the_model_refuses(key, value):
    hosts = {"hosts": [{"name": "npu-a", "address": "192.0.2.1"}]}
    with pytest.raises(ConfigError):
        parse_fleet("s", hosts | {key: value})
    assert refusals({f"{NAMESPACE}:{key}": value}) != []


@pytest.mark.parametrize("name", sorted(_synthetic()))
def test_the_schema_accepts_every_fleet_the_goldens_plan(name):
    values = _synthetic()[name]
    parse_fleet("s", values)
    assert refusals({f"{NAMESPACE}:{k}": v for k, v in values.items()}) == []


def test_every_key_of_the_model_has_a_description_and_its_entry_in_the_reference():
    reference = (ROOT / command.REFERENCE).read_text(encoding="utf-8")
    config = stack_schema()["properties"]["config"]["properties"]
    nodes = {"config": config} | {n: d.get("properties", {}) for n, d in stack_schema()["$defs"].items()}
    undescribed = [f"{n}.{k}" for n, props in nodes.items() for k, v in props.items() if not v.get("description")]
    assert undescribed == []
    assert all(f"- **`{k}`**" in reference for props in nodes.values() for k in props)
    assert set(config) >= {f"{NAMESPACE}:{f.alias or n}" for n, f in FleetConfig.model_fields.items() if n != "stack"}


@pytest.mark.parametrize("golden", sorted(p.stem for p in GOLDENS.glob("*.json") if p.stem != "host_checks"))
def test_every_golden_plan_and_the_plan_of_its_fleet_today_fit_the_plan_schema(golden):
    stored = json.loads(json.loads((GOLDENS / f"{golden}.json").read_text())["json"])
    today = plan_json_of(fleets()[golden])
    assert [e.message for e in PLAN.iter_errors(stored)] == []
    assert [e.message for e in PLAN.iter_errors(json.loads(json.dumps(today)))] == []


def test_the_plan_schema_refuses_a_plan_with_a_key_missing_or_of_another_type_and_allows_a_new_key():
    plan = plan_json_of(fleets()["prod"])
    service = plan["hosts"][0]["services"][0]
    assert PLAN.is_valid(plan | {"someNewKey": 1}) and PLAN.is_valid({**plan, "hosts": [plan["hosts"][0] | {"x": 1}]})
    service["apiPort"] = "7007"
    assert not PLAN.is_valid(plan)
    del plan["hosts"]
    assert not PLAN.is_valid(plan)


def test_the_plan_schema_states_the_notes_beside_the_warnings_and_a_plan_before_them_still_fits():
    plan = json.loads(json.dumps(plan_json_of(fleets()["prod"])))
    assert plan["notes"] and PLAN.schema["properties"]["notes"]["items"] == {"type": "string"}
    assert PLAN.is_valid({k: v for k, v in plan.items() if k != "notes"})
    assert not PLAN.is_valid(plan | {"notes": [1]}) and not PLAN.is_valid(plan | {"notes": "a note"})


def test_pin_keeps_the_schema_line(tmp_path):
    stack = tmp_path / "Pulumi.prod.yaml"
    shutil.copy(ROOT / "Pulumi.prod.yaml", stack)
    pinned = stack.read_text()
    stack.write_text(pinned.replace("      apiPort: 7007\n", ""))
    done = subprocess.run(
        [sys.executable, "-m", "allocation", "pin", "--config", str(stack)], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0 and "bge-m3" in done.stdout, done.stderr
    assert stack.read_text().splitlines()[0] == command.SCHEMA_LINE
    assert stack.read_text().count("apiPort:") == pinned.count("apiPort:")


def test_the_plan_schema_states_kind_must_stop_and_shard_and_refuses_them_of_another_shape():
    """A replicated service's replicas and router, a card a pinned service holds alone, and shards:
    the keys only such plans write are in the schema with their shapes."""
    pins = [{"host": "npu-a", "devices": [0]}, {"host": "npu-b", "devices": [0]}]
    services = [service("r", 1, 0.6, replicas=2, replicaPins=pins), service("c", 1, 0.3), service("s", 1, 0.3)]
    hosts = [host("npu-a", npus=1), host("npu-b", npus=1), host("npu-c", npus=1)]
    plan = json.loads(json.dumps(plan_json_of(fleet(hosts, services, shards={"size": 2}))))
    first = plan["hosts"][0]
    assert {e["kind"] for h in plan["hosts"] for e in h["services"]} | {r["kind"] for r in plan["routers"]} == {
        "service", "replica", "router"
    }  # fmt: skip
    assert first["mustStop"] and [h["shard"] for h in plan["hosts"]] == [0, 0, 1]
    assert [e.message for e in PLAN.iter_errors(plan)] == []
    broken = [
        ("services", lambda h: h["services"][0].update(kind="container")),
        ("routers", lambda p: p["routers"][0].update(kind="replica")),
        ("services", lambda h: h["services"][0].pop("kind")),
        ("mustStop", lambda h: h["mustStop"][0].update(card="4")),
        ("mustStop", lambda h: h["mustStop"][0].update(joinedBy="c")),
        ("mustStop", lambda h: h["mustStop"][0].pop("reason")),
        ("shard", lambda h: h.update(shard=-1)),
        ("shard", lambda h: h.update(shard="0")),
    ]
    for key, edit in broken:
        copy = json.loads(json.dumps(plan))
        edit(copy if key == "routers" else copy["hosts"][0])
        assert not PLAN.is_valid(copy), (key, copy["hosts"][0] if key != "routers" else copy["routers"])
