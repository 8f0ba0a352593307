"""`disaggregated:` of a service: prefill and decode in separate vLLM instances, declared as roles.

vllm-ascend runs prefill-decode disaggregation as two kinds of `vllm serve` instance that pass the
KV cache between them through the Mooncake connector, with a proxy in front that sends each request
to a prefiller and then to a decoder (v0.20.2rc1: `docs/source/tutorials/features/
pd_disaggregation_mooncake_single_node.md`, `..._multi_node.md`; the proxy
`examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py`). Each instance carries a
`--kv-transfer-config` naming the connector, its role (`kv_producer` for prefill, `kv_consumer` for
decode), a `kv_port` from which it binds one handshake port per card, a unique `engine_id`, and both
roles' sizes. A stack says only the roles' sizes, cards and replicas; the planner owns every port and
id (`allocation.disaggregated`), so `args` may set none of them. Pure.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, create_model
from pydantic.json_schema import WithJsonSchema

from allocation.config_types import Fraction, Model, Name, PowerOfTwo, _pin_fields, _Pinned, card_count_problems
from allocation.group_config import _once_each
from allocation.scalars import Whole
from allocation.vllm_args import spelled
from allocation.windows import PROXY, ROLE_KINDS

CONNECTOR = "MooncakeConnectorV1"
"""The connector's name as vllm-ascend registers it (`vllm_ascend/distributed/kv_transfer/__init__.py`,
v0.14.0rc1 to v0.21.0rc1: `KVConnectorFactory.register_connector("MooncakeConnectorV1", ...)`)."""
SUPPORTED = ((0, 15), (0, 21))
"""The vllm-ascend versions (major, minor) the plan of a disaggregated service follows, first and last.
Read at each tag from v0.15.0rc1 to v0.21.0rc1: the connector's name, its handshake ports
(`kv_port + data_parallel_rank x TP x PP x PCP + device_index`, `mooncake_connector.py`), the
`kv_connector_extra_config` `prefill`/`decode` sizes it asserts, and the proxy's flags are the same;
the `kv_port` guide against AscendDirectTransport's random ports starts at v0.15.0rc1. Before it,
v0.10.1rc1 to v0.11.0 also needed `PHYSICAL_DEVICES`; later versions are not read yet."""
ROLES = ("prefill", "decode")
KV_ROLE = {"prefill": "kv_producer", "decode": "kv_consumer"}
"""`kv_role` of each role's `--kv-transfer-config`, as the tutorials write them."""

OWNED_ARGS = {
    "--kv-transfer-config": "the plan writes it for each instance (connector, kv_role, kv_port, engine_id, both "
    "roles' sizes, the KV pool's lookup_rpc_port) from disaggregated",
    "--kv-events-config": "its ZMQ endpoint (tcp://*:5557 by default) would be a port on the host network the plan "
    "does not hand out",
    **dict.fromkeys(("--pipeline-parallel-size", "-pp", "--prefill-context-parallel-size", "-pcp"),
                    "the kv_port block is planned for pipeline and prefill-context parallel size 1 (DP x TP x PP x "
                    "PCP handshake ports, each role's tensorParallelSize cards)"),
}  # fmt: skip
"""What a disaggregated service's `args` (and the defaults' while the stack has one) may not set, each
with why (vllm@0.20.2 `engine/arg_utils.py` `add_cli_args` names them)."""

_RoleWindowPins: type[_Pinned] = create_model("_RoleWindowPins", __base__=_Pinned, **_pin_fields(ROLE_KINDS))
_ProxyPins: type[_Pinned] = create_model("_ProxyPins", __base__=_Pinned, **_pin_fields((PROXY,)))


class RolePins(_RoleWindowPins):
    """Pins of one instance of a role, in instance order: its host, its cards and its windows, the
    `kvPort` block among them. What `pin` writes."""

    host: Name | None = None
    """Host of the instance."""
    devices: Annotated[list[Annotated[Whole, Field(ge=0, le=15)]], AfterValidator(_once_each)] | None = None
    """Physical NPU indices; as many as the role's `tensorParallelSize`."""


class Role(Model):
    """`disaggregated.prefill` or `disaggregated.decode`: the instances of one role, each a `vllm serve` of
    the service's model on `tensorParallelSize` cards of one host."""

    tensor_parallel_size: PowerOfTwo = 1
    """`--tensor-parallel-size` of each instance, and the `tp_size` of this role that every instance's
    `kv_connector_extra_config` carries; its `kvPort` block has this many ports."""
    memory_fraction: Fraction = Decimal("0.9")
    """`--gpu-memory-utilization` of each instance on each of its cards."""
    replicas: Whole = Field(default=1, ge=1, le=64)
    """Instances of the role (`<service>-<role>`, or `<service>-<role>-1` ... with more than one), on
    different hosts or cards while there is room; the proxy sends each request to one of them."""
    replica_pins: list[RolePins] | None = None
    """Pins of each instance, in order: `host`, `devices`, the windows and `kvPort` (`pin` writes them)."""

    def problems(self, role: str) -> list[str]:
        """Pins that do not match the role's numbers, one problem each."""
        problems = []
        if len(self.replica_pins or ()) > self.replicas:
            problems.append(f"{role}.replicaPins has {len(self.replica_pins or ())} entries for {self.replicas} replicas")
        return problems + card_count_problems(self.replica_pins, self.tensor_parallel_size, f"{role}.")


def _planned_connector(name: str) -> str:
    """Only the connector whose ports and ids the plan knows."""
    if name != CONNECTOR:
        raise ValueError(
            f"{name!r} is not a connector this version plans: only {CONNECTOR} (vllm-ascend's Mooncake connector, whose "
            "handshake ports, engine ids and sizes the plan owns, read at vllm-ascend v0.15.0rc1 to v0.21.0rc1); the "
            "layerwise and hybrid Mooncake connectors and others are not planned yet"
        )
    return name


class Connector(Model):
    """`disaggregated.connector`: how the instances pass the KV cache."""

    name: Annotated[str, AfterValidator(_planned_connector), WithJsonSchema({"enum": [CONNECTOR]})] = CONNECTOR
    """`kv_connector`: `MooncakeConnectorV1`, vllm-ascend's Mooncake connector (vllm-ascend v0.15 to v0.21;
    other images are refused); the only one planned."""


class KvPool(Model):
    """`disaggregated.kvPool`: vllm-ascend's KV pool beside the transfer (`docs/source/user_guide/feature_guide/
    kv_pool.md`): each instance's `--kv-transfer-config` becomes a `MultiConnector` of `MooncakeConnectorV1` and
    `AscendStoreConnector`, whose `lookup_rpc_port` the plan sets, unique on each host."""

    backend: Literal["mooncake", "memcache", "yuanrong"] = "mooncake"
    """`backend` of the `AscendStoreConnector`."""


class Proxy(_ProxyPins):
    """`disaggregated.proxy`: vllm-ascend's example proxy in front of the instances, the service's endpoint:
    `load_balance_proxy_server_example.py --port P --prefiller-hosts ... --prefiller-ports ... --decoder-hosts
    ... --decoder-ports ...`."""

    host: Name | None = None
    """Host of the proxy; default the first prefill instance's host (the single-node tutorial runs it
    "on the same node with the prefiller service instance")."""


class Disaggregated(Model):
    """`disaggregated:` of a service: its model served by prefill and decode instances apart, the KV cache
    passed between them by the Mooncake connector, behind one proxy ([Prefill and decode apart](disaggregated.md)).
    Every instance runs on the host network with its own cards, HCCL windows and `kvPort` block."""

    prefill: Role
    """The prefill instances (`kv_producer`)."""
    decode: Role
    """The decode instances (`kv_consumer`)."""
    connector: Connector = Connector()
    """The KV-transfer connector."""
    kv_pool: KvPool | None = None
    """Turn on the KV pool (`AscendStoreConnector`) beside the transfer."""
    proxy: Proxy = Proxy()
    """Where the proxy runs, and its pinned port."""

    def roles(self) -> tuple[tuple[str, Role], ...]:
        """(`prefill`, its role), (`decode`, its role): the order of every listing."""
        return ("prefill", self.prefill), ("decode", self.decode)

    def problems(self) -> list[str]:
        return [p for name, role in self.roles() for p in role.problems(name)]


def owned_arg_problems(args: list[str] | None) -> list[str]:
    """The options of `args` a disaggregated service's plan owns (`OWNED_ARGS`), also as `--flag=value`,
    `--flag.key`, with `_`, or abbreviated (argparse's `allow_abbrev`), one problem each."""
    problems = []
    for value in args or ():
        flag = spelled(value).partition("=")[0].partition(".")[0]
        owned = [f for f in OWNED_ARGS if f == flag or (len(flag) > 4 and flag.startswith("--") and f.startswith(flag))]
        if owned:
            problems.append(f"args: {value!r} sets {owned[0]}, which a disaggregated service's plan owns: {OWNED_ARGS[owned[0]]}")
    return problems
