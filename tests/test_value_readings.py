"""The program and the stack's JSON Schema read every value alike: for every key of the config models
(and every entry of a list or map the stack below holds), integers, booleans, quoted numbers, floats,
text and null, put in an otherwise valid stack (one that holds every config model, and the committed
dev stack), are accepted by both or refused by both.

The program's side is `parse_fleet` of what `plan` reads, which is what `pulumi up` hands the program
(a top-level value through the text Pulumi passes, cli.stackfile `top_level_reading`). The one kind of
refusal the schema need not share is a rule it states in words (`plan` also checks ...): a validator's
`value_error`, at a key or a model whose description says so. A refusal of any other kind (a type, a
bound, a pattern) the schema must make too, and the schema refuses nothing the program accepts.
"""

from __future__ import annotations

import copy
from typing import Any, Iterator

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from pydantic import BaseModel, ValidationError

from allocation.config import NAMESPACE, FleetConfig, parse_fleet
from allocation.errors import ConfigError
from allocation.names import shard_stack
from allocation.schema import PLAN_CHECKS, _models, config_schema, stack_schema
from cli.stackfile import top_level_reading
from tests.support.stacks import values_of

STACK = Draft202012Validator(stack_schema())
CONFIG = config_schema()
BASE: dict[str, Any] = {
    "hosts": [
        {"name": "npu-a", "address": "192.0.2.1", "reservedPorts": [{"first": 22, "last": 22}, "2222"]},
        {"name": "npu-b", "address": "192.0.2.2", "nic": {"address": "10.0.0.2", "interface": "eth1"}},
    ],
    "defaults": {"mounts": [{"source": "/data", "target": "/data"}], "logOpts": {"max-size": "10m"}},
    "services": [
        {
            "name": "chat", "model": "/m/chat", "hosts": ["npu-a"], "env": {"A": "1"}, "args": ["--seed", "0"],
            "previousNames": ["talk"],
            "profile": {"weightBytes": 10**9, "numHiddenLayers": 32, "numKeyValueHeads": 8, "headDim": 128},
            "measured": {"container": "chat", "host": "npu-a", "date": "2026-12-05T10:11:12Z", "line": "0.31 GiB for NPU graph memory",
                         "tensorParallelSize": 1, "memoryFraction": 0.9, "weightsGiB": 1.5, "overheadGiB": 0.75,
                         "graphMemoryGiB": 0.31, "kvCacheGiB": 40, "kvCacheTokens": 1000},
        },
        {"name": "pool", "model": "/m/pool", "replicas": 2, "replicaPins": [{"host": "npu-a", "devices": [0]}],
         "router": {"host": "npu-a"}},
        {"name": "moe", "model": "/m/moe", "tensorParallelSize": 2, "memoryFraction": 0.9,
         "dataParallel": {"size": 2, "perHost": 1, "expertParallel": True,
                          "memberPins": [{"host": "npu-a", "devices": [4, 5]}, {"host": "npu-b", "devices": [0, 1]}]}},
        {"name": "pd", "model": "/m/pd", "disaggregated": {
            "prefill": {"tensorParallelSize": 1, "memoryFraction": 0.5, "replicaPins": [{"host": "npu-b", "devices": [6]}]},
            "decode": {"tensorParallelSize": 1, "memoryFraction": 0.5, "replicaPins": [{"host": "npu-b", "devices": [7]}]},
            "connector": {"name": "MooncakeConnectorV1"}, "kvPool": {"backend": "mooncake"}, "proxy": {"host": "npu-b"}}},
    ],
    "ports": {"reserved": [[60000, 60031]]},
    "ssh": {},
    "metrics": {"npuExporter": {"image": "npu-exporter:v5"}},
    "shards": {"size": 50},
    "memoryBudget": 0.95,
    "kubernetes": {},
}  # fmt: skip
"""A valid stack holding every config model, and a list or map of every kind."""
PROBES = [True, False, 0, 1, 2, 8, 8.0, 0.5, -1, 1440, 70000, 2**40, "8", "8.0", "0.5", "true", "auto", "x", "", None]


SHARD = shard_stack("s", 0)


def shard_base() -> dict[str, Any]:
    """BASE as the file of shard 0 of fleet `s`: `shardOf` holds the shard's hash, which no other key
    may change, and the stack is `SHARD`."""
    shard_hash = parse_fleet("s", BASE).shard_hash("s", 0)
    return BASE | {"shardOf": {"fleet": "s", "index": 0, "fleetHash": shard_hash}}


def inner_model(annotation: Any) -> type[BaseModel] | None:
    """The config model a field holds (itself, in a list, or optional), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next(filter(None, map(inner_model, getattr(annotation, "__args__", ()))), None)


def paths(model: type[BaseModel], node: dict, at: tuple = ()) -> Iterator[tuple[tuple, type[BaseModel]]]:
    """Every key of `model` under `at`, and of the models, lists and maps `node` holds; with the model
    of each."""
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key == "stack":
            continue
        yield at + (key,), model
        inner, value = inner_model(field.annotation), node.get(key)
        entries = enumerate(value) if isinstance(value, list) else value.items() if isinstance(value, dict) else ()
        if isinstance(value, dict) and inner is not None:
            yield from paths(inner, value, at + (key,))
            continue
        for index, entry in entries:
            yield at + (key, index), model
            if isinstance(entry, dict) and inner is not None:
                yield from paths(inner, entry, at + (key, index))


DEV = values_of("dev")
"""The committed dev stack, pinned as `pin` writes it, for the keys it holds."""
CASES = [(p, BASE) for p, _ in paths(FleetConfig, BASE)] + [
    (p, shard_base()) for p, _ in paths(FleetConfig, shard_base()) if p[0] == "shardOf"
]
DEV_CASES = [(p, DEV) for p, _ in paths(FleetConfig, DEV)]


def put(base: dict, path: tuple, value: Any) -> dict:
    doc = copy.deepcopy(base)
    node = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return doc


def schema_node(loc: tuple) -> dict | None:
    """The node of the config schema at a pydantic error's location (a key, or a model's entry)."""
    node: dict | None = CONFIG
    for part in loc:
        node = resolved(node)
        node = node.get("items") if isinstance(part, int) else node.get("properties", {}).get(part)
        if node is None:
            return None
    return node


def resolved(node: dict) -> dict:
    """A node with its `$ref` followed, or of its alternatives the one that holds keys or items."""
    if "$ref" in node:
        return resolved(CONFIG["$defs"][node["$ref"].rpartition("/")[2]])
    for option in node.get("anyOf", ()):
        option = resolved(option)
        if "properties" in option or "items" in option:
            return option
    return node


def stated_in_words(error: dict) -> bool:
    """A refusal by a validator whose rule the schema states in words where it refuses: at the key,
    else at the model holding it (a rule across its keys)."""
    if error["type"] != "value_error":
        return False
    node = schema_node(tuple(error["loc"])) or {}
    models = [CONFIG["$defs"][n["$ref"].rpartition("/")[2]] for n in [node, *node.get("anyOf", ())] if "$ref" in n]
    return any(PLAN_CHECKS in n.get("description", "") for n in [node, *models])


def disagreement(base: dict, path: tuple, value: Any) -> str | None:
    """Why the program and the schema read `value` at `path` otherwise, or None when they agree."""
    doc = put(base, path, value)
    schema_accepts = STACK.is_valid({"config": {f"{NAMESPACE}:{k}": v for k, v in doc.items()}})
    read = {k: top_level_reading(k, v) for k, v in doc.items()}
    stack = SHARD if "shardOf" in base else "s"
    try:
        parse_fleet(stack, read)
    except ConfigError as exc:
        if not schema_accepts:
            return None
        try:
            FleetConfig.model_validate({"stack": stack, **read})
        except ValidationError as refused:
            if all(map(stated_in_words, refused.errors())):
                return None
        return f"{path} = {value!r}: the schema accepts it, the program refuses it: {exc}"
    return None if schema_accepts else f"{path} = {value!r}: the program accepts it, the schema refuses it"


def test_the_stack_below_is_valid_and_reaches_every_config_model():
    assert STACK.is_valid({"config": {f"{NAMESPACE}:{k}": v for k, v in shard_base().items()}})
    parse_fleet(SHARD, shard_base())
    reached = {m.__name__ for _, m in paths(FleetConfig, shard_base())}
    held = {n for n, m in _models(FleetConfig, {}).items() if any(f for f in m.model_fields if f != "stack")}
    assert held - reached == set()


@pytest.mark.parametrize(("path", "base"), CASES + DEV_CASES, ids=[f"{'dev:' if b is DEV else ''}{'/'.join(map(str, p))}" for p, b in CASES + DEV_CASES])
def test_the_program_and_the_schema_agree_on_every_kind_of_value_at_every_key(path, base):
    assert [d for d in (disagreement(base, path, v) for v in PROBES) if d] == []


VALUES = st.one_of(
    st.integers(-(2**64), 2**64),
    st.booleans(),
    st.integers(-2, 70000).map(str),
    st.integers(-10**6, 10**6).map(lambda n: n / 100),  # at most 2 places: the 4-place rule is in words
    st.integers(-10**6, 10**6).map(lambda n: str(n / 100)),
    st.sampled_from(["1e3", " 8", "08", "-0", "+1", "0.0", "1.", ".5", "8-80", "80 - 8080", "a3", "kubernetes"]),
    st.text(alphabet="ab8.-/ ", max_size=6),
    st.none(),
)


@settings(max_examples=400, deadline=None)
@given(case=st.sampled_from(CASES), value=VALUES)
def test_the_program_and_the_schema_agree_on_generated_values(case, value):
    path, base = case
    note(f"{path} = {value!r}")
    assert disagreement(base, path, value) is None
