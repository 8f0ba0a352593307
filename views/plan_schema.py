"""The JSON Schema of `plan --format json`, so a CI job that reads the plan can check what it reads.

It states the keys `views.report.plan_json` writes (and the records' `to_json` under it), their
types and which are always there. Every object allows keys it does not name: the plan gains keys
(add, don't rename), and a reader written against this schema keeps working when one is added; a
new key is added here with its type when it lands. The port-window keys come from the windows
table (`allocation/windows.py`), so a new kind of window is in the schema the day it is planned.
Every golden plan validates against it (tests/test_schema.py). Pure.
"""

from __future__ import annotations

from typing import Any

from allocation import names
from allocation.windows import DP_RPC, KINDS, KV_PORT, MEMBER_KINDS, PROXY, ROUTER_KINDS

DIALECT = "https://json-schema.org/draft/2020-12/schema"
INT = {"type": "integer"}
NUMBER = {"type": "number"}
TEXT = {"type": "string"}
FLAG = {"type": "boolean"}
CARDS = {"type": "array", "items": {"type": "integer", "minimum": 0}}
TEXTS = {"type": "array", "items": TEXT}
TEXT_MAP = {"type": "object", "additionalProperties": TEXT}
PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
RANGE = {"description": "`[first, last]`, inclusive", "type": "array", "prefixItems": [PORT, PORT], "minItems": 2, "maxItems": 2}


def _object(required: dict[str, Any], optional: dict[str, Any] | None = None, description: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": required | (optional or {}), "required": list(required)}
    return ({"description": description} if description else {}) | out


def _kind(*kinds: str) -> dict[str, Any]:
    """An entry's `kind` (allocation.names): what it is, so a reader never parses a name."""
    return {"description": "What the entry is: " + ", ".join(f"`{k}`" for k in kinds) + ".", "enum": list(kinds)}


def _window(shape: str) -> dict[str, Any]:
    """A window as the plan prints it: a range or a first port, `null` when the service has none
    (`hcclPortRanges: false`)."""
    return {"anyOf": [RANGE if shape == "range" else PORT, {"type": "null"}]}


HEALTHCHECK = _object(
    {"test": TEXTS, "intervalSeconds": INT, "timeoutSeconds": INT, "startPeriodSeconds": INT, "retries": INT},
    {"startIntervalSeconds": INT},
)
CONTAINER = _object(
    {
        "name": TEXT, "image": TEXT, "command": TEXTS, "env": TEXT_MAP, "privileged": FLAG, "deviceFiles": TEXTS,
        "mounts": {"type": "array", "items": _object({"source": TEXT, "target": TEXT, "readOnly": FLAG})},
        "ipcMode": {"enum": ["private", "host"]}, "shmSizeMiB": INT, "ports": {"type": "array", "items": PORT},
        "labels": TEXT_MAP, "extraHosts": TEXT_MAP, "restart": TEXT, "sysctls": TEXT_MAP, "logDriver": TEXT,
        "logOpts": TEXT_MAP, "stopGraceSeconds": INT, "init": FLAG, "startTimeoutSeconds": INT,
        "healthcheck": HEALTHCHECK,
    },
    {"entrypoint": TEXTS, "networkMode": TEXT},
    "Everything the container receives (`ContainerSpec.to_json`); `plan --against` compares it key by key.",
)  # fmt: skip
CAPACITY = {
    "description": "The capacity check per card; `null` for a service without a `profile`.",
    "anyOf": [
        _object({
            "weightsGiBPerCard": NUMBER, "kvCacheGiBPerCard": NUMBER, "kvCacheTokens": INT,
            "maxConcurrency": {"anyOf": [NUMBER, {"type": "null"}]}, "blockSizeTokens": {"anyOf": [INT, {"type": "null"}]},
            "kvCacheBlocks": INT, "bytesPerRequest": {"anyOf": [INT, {"type": "null"}]}, "fits": FLAG,
        }),  # fmt: skip
        {"type": "null"},
    ],
}
MEASURED = _object(
    {
        "container": TEXT, "host": TEXT, "date": TEXT, "line": TEXT, "tensorParallelSize": INT, "weightsGiB": NUMBER,
        "graphMemoryGiB": NUMBER, "used": FLAG,
    },
    {"memoryFraction": NUMBER, "overheadGiB": NUMBER, "kvCacheGiB": NUMBER, "kvCacheTokens": INT},
    "Only for a service with `measured:` (written by `calibrate`): that record, and whether the plan uses it (`used`: "
    "measured at the service's tensorParallelSize).",
)  # fmt: skip
SERVICE = _object(
    {
        "name": TEXT, "kind": _kind(names.SERVICE, names.REPLICA), "previousNames": TEXTS, "replicaOf": TEXT,
        "host": TEXT, "devices": CARDS,
        "tensorParallelSize": INT, "memoryFraction": NUMBER, "gpuMemoryUtilization": NUMBER,
        **{k.key: _window(k.shape) for k in KINDS}, "capacity": CAPACITY, "container": CONTAINER,
    },
    {
        "measured": MEASURED,
        "kvCacheMemoryBytes": {"description": "Only for a service with `kvCacheGiB`: its `--kv-cache-memory-bytes`.",
                               "type": "integer", "minimum": 1},
    },
    description="One container of a service: the service itself, or one of its replicas (`replicaOf` names the service).",
)  # fmt: skip
MUST_STOP = {
    "description": "Only on a host where the plan stops a running (pinned) service while a card switches to "
    "device-share mode (`records.held_cards`), ascending by card.",
    "type": "array",
    "items": _object({"card": {"type": "integer", "minimum": 0}, "holder": TEXT, "joinedBy": TEXTS, "reason": TEXT}),
}
SHARD = {"description": "Only in a fleet deployed as shards: the shard that deploys the host.", "type": "integer", "minimum": 0}
HOST = _object(
    {
        "name": TEXT, "address": TEXT, "npus": INT, "board": {"enum": ["a2", "a3"]}, "hbmGiB": INT, "hbmBytes": INT,
        "memoryBudget": NUMBER, "sharedCards": CARDS, "deviceShareCards": CARDS,
        "cardSharing": {"enum": ["deviceShare", "privileged", "refuse"]}, "heldCards": {"enum": ["refuse", "stopHolders"]},
        "replaces": TEXTS, "services": {"type": "array", "items": SERVICE},
    },
    {"npuExporter": CONTAINER, "mustStop": MUST_STOP, "shard": SHARD, "members": {
        "description": "Only on a host that runs a member of a multi-host service: the members' names (under `groups`).",
        **TEXTS,
    }, "roles": {
        "description": "Only on a host that runs a prefill or decode instance: their names (under `disaggregated`).",
        **TEXTS,
    }},
)  # fmt: skip
ROUTER = _object(
    {
        "service": TEXT, "name": TEXT, "kind": _kind(names.ROUTER), "previousNames": TEXTS, "host": TEXT,
        **{k.key: _window(k.shape) for k in ROUTER_KINDS}, "replicas": TEXTS, "endpoint": TEXT, "container": CONTAINER,
    },
    description="The router in front of a replicated service's replicas.",
)  # fmt: skip


MEMBER = _object(
    {
        "name": TEXT, "kind": _kind(names.MEMBER), "previousNames": TEXTS, "role": {"enum": ["leader", "follower"]},
        "host": TEXT, "devices": CARDS, "startRank": INT, "memoryFraction": NUMBER,
        **{k.key: _window(k.shape) for k in MEMBER_KINDS}, "env": TEXT_MAP, "args": TEXTS, "capacity": CAPACITY,
        "container": CONTAINER,
    },
    description="One member of a multi-host service on its host: `apiPort` and `dataParallelRpcPort` are the "
    "leader's (`null` on a follower), `args` the data-parallel flags of its `vllm serve`, `env` its host's NIC variables, "
    "`container` its container (on the host network: `networkMode` `host`, no `ports`).",
)  # fmt: skip
GROUP = _object(
    {
        "service": TEXT, "name": TEXT, "kind": _kind(names.GROUP), "previousNames": TEXTS, "dataParallelSize": INT,
        "dataParallelSizeLocal": INT, "tensorParallelSize": INT, "expertParallel": FLAG, "leader": TEXT,
        "address": TEXT, DP_RPC.key: {"anyOf": [PORT, {"type": "null"}]}, "endpoint": TEXT,
        "members": {"type": "array", "items": MEMBER},
    },
    description="A multi-host service (`dataParallel`): one group, its members the leader first.",
)  # fmt: skip


ROLE = _object(
    {
        "name": TEXT, "kind": _kind(names.ROLE), "previousNames": TEXTS, "replicaOf": TEXT, "host": TEXT, "devices": CARDS,
        "tensorParallelSize": INT, "memoryFraction": NUMBER, "gpuMemoryUtilization": NUMBER,
        **{k.key: _window(k.shape) for k in KINDS}, "capacity": CAPACITY, KV_PORT.key: PORT,
        "role": {"enum": ["prefill", "decode"]}, "kvPortBlock": RANGE, "engineId": TEXT,
        "kvTransferConfig": {"description": "Its `--kv-transfer-config`, as vLLM reads it.", "type": "object"},
        "env": TEXT_MAP, "container": CONTAINER,
    },
    {"lookupRpcPort": {"description": "Only with the KV pool: the `lookup_rpc_port` of its AscendStoreConnector.", **INT}},
    description="One prefill or decode instance of a disaggregated service on its host: a service's keys, its "
    "`kvPort` (the first of the `kvPortBlock` handshake ports it binds, one per card), `engineId`, `env` its host's NIC "
    "variables, and `container` its "
    "container (on the host network: `networkMode` `host`, no `ports`).",
)  # fmt: skip
DISAGGREGATED = _object(
    {
        "service": TEXT, "name": TEXT, "kind": _kind(names.DISAGGREGATED), "previousNames": TEXTS, "connector": TEXT,
        "kvPool": FLAG, "prefill": {"type": "array", "items": ROLE}, "decode": {"type": "array", "items": ROLE},
        "proxy": _object({"name": TEXT, "kind": _kind(names.PROXY), "host": TEXT, PROXY.key: PORT, "args": TEXTS,
                          "container": CONTAINER}),
        "endpoint": TEXT,
    },
    description="A disaggregated service (`disaggregated`): its prefill and decode instances in order, and its proxy "
    "(`args`: the flags of vllm-ascend's example proxy; `container`: its container, on the host network).",
)  # fmt: skip


def plan_schema() -> dict[str, Any]:
    """The schema of `python -m allocation plan --format json` (docs/plan-json.md says what each key means)."""
    return {
        "$schema": DIALECT,
        "title": "ascend-fleet plan (python -m allocation plan --format json)",
        "description": "Keys may be added in later versions (add, don't rename): readers should ignore keys they do "
        "not know, and every object here allows them.",
        **_object({"stack": TEXT, "hosts": {"type": "array", "items": HOST}, "routers": {"type": "array", "items": ROUTER},
                   "warnings": TEXTS}, {"groups": {"description": "Only with a multi-host service: one entry each, by name.",
                                                    "type": "array", "items": GROUP},
                                         "disaggregated": {"description": "Only with a disaggregated service: one entry "
                                                           "each, by name.", "type": "array", "items": DISAGGREGATED},
                                         "notes": {"description": "Where a figure comes from when the plan cannot vouch "
                                                   "for it (an unverified profile, an estimate, a service not sized), and "
                                                   "how to make it sure; always written, absent from plans before it.",
                                                   **TEXTS}}),  # fmt: skip
    }
