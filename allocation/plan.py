"""The plan: what the allocator decided for every service, frozen.

A plan is made once for the whole stack; each Pulumi component, exporter and
`doctor` check receives its own `ServicePlan` slice and never allocates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from decimal import Decimal
from typing import Any, Callable, Mapping

from allocation import names
from allocation.capacity import GIB, Capacity, fixed_kv_bytes
from allocation.config import FleetConfig, Host, Service
from allocation.disaggregated import RoleInstance
from allocation.disaggregated_config import CONNECTOR
from allocation.group import Member
from allocation.instance import Instance
from allocation.measured import measured_json
from allocation.resolved import Resolved, ResolvedRouter
from allocation.windows import API, DP_RPC, ENDPOINT, KINDS, KV_PORT, MEMBER_KINDS, METRICS, PROXY, ROUTER_KINDS, PortWindow


@dataclass(frozen=True)
class Assignment:
    """The resources the allocator gives one service: cards on one host and port windows."""

    host_name: str
    cards: tuple[int, ...]
    """Physical card indices."""
    windows: Mapping[str, PortWindow]
    """Window kind key -> its window; a kind the service drops (hcclPortRanges: false) is absent."""

    @property
    def api_port(self) -> int:
        return self.windows[API.key][0]


@dataclass(frozen=True)
class ServicePlan:
    """One instance of a service (the service itself, or one replica) together with its assignment."""

    instance: Instance
    assignment: Assignment
    capacity: Capacity | None = None
    """Memory per card as vLLM will find it; None without a `profile`."""
    running_total: Decimal | None = None
    """`--gpu-memory-utilization` for a vLLM-Ascend before 0.15 on a shared card: the fractions of the
    services before it on its cards plus its own. None: its own fraction."""

    @property
    def service(self) -> Service:
        """The configured service this container is an instance of."""
        return self.instance.service

    @property
    def resolved(self) -> Resolved:
        return self.instance.resolved

    @property
    def memory_fraction(self) -> Decimal:
        return self.instance.memory_fraction

    @property
    def gpu_memory_utilization(self) -> Decimal:
        return self.running_total if self.running_total is not None else self.memory_fraction

    @property
    def kv_cache_bytes(self) -> int | None:
        """`--kv-cache-memory-bytes` per card, from `kvCacheGiB`; None: vLLM sizes the cache from the fraction."""
        return fixed_kv_bytes(self.service)

    @property
    def name(self) -> str:
        return self.instance.name

    @property
    def replica_of(self) -> str:
        """The configured service this container serves: its replicated service, or itself."""
        return self.instance.replica_of

    def to_json(self) -> dict[str, Any]:
        """`kvCacheMemoryBytes` only for a service that fixes its cache: every other prints as before."""
        a = self.assignment
        fixed = {} if self.kv_cache_bytes is None else {"kvCacheMemoryBytes": self.kv_cache_bytes}
        return {
            "name": self.name,
            "kind": self.instance.kind,
            "previousNames": list(self.instance.previous_names),
            "replicaOf": self.replica_of,
            "host": a.host_name,
            "devices": list(a.cards),
            "tensorParallelSize": self.service.tensor_parallel_size,
            "memoryFraction": float(self.memory_fraction),
            "gpuMemoryUtilization": float(self.gpu_memory_utilization),
            **fixed,
        } | {k.key: k.value(a.windows.get(k.key)) for k in KINDS} | {"capacity": _capacity_json(self.capacity)} | (
            # Only for a calibrated service: a plan without one prints as before.
            {} if self.service.measured is None else {"measured": measured_json(self.instance)}
        )


@dataclass(frozen=True)
class MemberPlan:
    """One member of a multi-host service on its host: its cards, windows and capacity, and the
    group it belongs to (`GroupPlan`), which holds the flags every member shares."""

    member: Member
    assignment: Assignment
    host: Host
    capacity: Capacity | None = None

    @property
    def name(self) -> str:
        return self.member.name

    @property
    def service(self) -> Service:
        return self.member.service

    @property
    def memory_fraction(self) -> Decimal:
        return self.member.memory_fraction

    @property
    def role(self) -> str:
        return "leader" if self.member.leader else "follower"


@dataclass(frozen=True)
class GroupPlan:
    """A multi-host service as planned: one object, its members (one per host, the leader first)."""

    service: Service
    members: tuple[MemberPlan, ...]

    @property
    def name(self) -> str:
        return self.service.name

    @property
    def leader(self) -> MemberPlan:
        return self.members[0]

    @property
    def address(self) -> str:
        """`--data-parallel-address`: the leader host's `HCCL_IF_IP` (the tutorial passes node 0's `local_ip`)."""
        return self.leader.host.nic_address or ""

    @property
    def rpc_port(self) -> int | None:
        """`--data-parallel-rpc-port`: the leader's window; None on one host, where the handshake stays local."""
        window = self.leader.assignment.windows.get(DP_RPC.key)
        return window[0] if window else None

    @property
    def endpoint(self) -> str:
        """The OpenAI-compatible base URL: the leader's, `http://address:apiPort/v1`."""
        return f"http://{self.leader.host.url_address()}:{self.leader.assignment.api_port}/v1"

    def args(self, mp: MemberPlan) -> tuple[str, ...]:
        """The data-parallel flags of member `mp`'s `vllm serve`, as the DeepSeek-R1 two-A2 recipe writes
        them: every member the sizes and the leader's address and RPC port; a follower `--headless` with
        its start rank."""
        dp = self.service.data_parallel
        assert dp is not None
        out = ["--data-parallel-size", str(dp.size), "--data-parallel-size-local", str(dp.per_host)]
        if not mp.member.leader:
            out = ["--headless", *out, "--data-parallel-start-rank", str(mp.member.ranks.start)]
        out += ["--data-parallel-address", self.address]
        out += ["--data-parallel-rpc-port", str(self.rpc_port)] if self.rpc_port is not None else []
        return (*out, *(["--enable-expert-parallel"] if dp.expert_parallel else []))

    def to_json(self) -> dict[str, Any]:
        dp = self.service.data_parallel
        assert dp is not None
        return {
            "service": self.name,
            "name": self.name,
            "kind": names.GROUP,
            "previousNames": list(self.service.previous_names or ()),
            "dataParallelSize": dp.size,
            "dataParallelSizeLocal": dp.per_host,
            "tensorParallelSize": self.service.tensor_parallel_size,
            "expertParallel": dp.expert_parallel,
            "leader": self.leader.name,
            "address": self.address,
            DP_RPC.key: self.rpc_port,
            "endpoint": self.endpoint,
            "members": [self._member_json(mp) for mp in self.members],
        }

    def _member_json(self, mp: MemberPlan) -> dict[str, Any]:
        a = mp.assignment
        return {
            "name": mp.name,
            "kind": names.MEMBER,
            "previousNames": list(mp.member.previous_names),
            "role": mp.role,
            "host": a.host_name,
            "devices": list(a.cards),
            "startRank": mp.member.ranks.start,
            "memoryFraction": float(mp.memory_fraction),
        } | {k.key: k.value(a.windows.get(k.key)) for k in MEMBER_KINDS} | {
            "env": mp.host.nic_env(), "args": list(self.args(mp)), "capacity": _capacity_json(mp.capacity),
        }


@dataclass(frozen=True)
class RolePlan(ServicePlan):
    """One prefill or decode instance of a disaggregated service on its host: a service's plan, its
    `kvPort` block among its windows, and the host whose address its peers and the proxy reach."""

    host: Host | None = None  # always given (allocation.planner)

    @property
    def role_instance(self) -> RoleInstance:
        assert isinstance(self.instance, RoleInstance)
        return self.instance

    @property
    def kv_ports(self) -> PortWindow:
        """Its handshake block: `kv_port` to `kv_port + kv_block - 1`."""
        return self.assignment.windows[KV_PORT.key]

    @property
    def lookup_rpc_port(self) -> int:
        """The KV pool's `lookup_rpc_port`: its `kv_port`, unique on its host since the blocks there are
        disjoint. vllm-ascend@v0.20.2rc1 reads it as a number that names an IPC socket, not a TCP port
        (`kv_pool/ascend_store/pool_scheduler.py` `get_zmq_rpc_path_lookup`:
        `ipc://{VLLM_RPC_BASE_PATH}/lookup_rpc_port_{port}_dp_rank{rank}`), and asks that each instance have
        its own (`docs/source/user_guide/feature_guide/kv_pool.md`)."""
        return self.kv_ports[0]

    @property
    def url(self) -> tuple[str, int]:
        """Where the proxy reaches it: its host's address and API port (the instance is on the host network)."""
        assert self.host is not None
        return self.host.url_address(), self.assignment.api_port


@dataclass(frozen=True)
class DisaggregatedPlan:
    """A disaggregated service as planned: its prefill and decode instances (the very plans of the host
    plans), in instance order, and its proxy's host and port."""

    service: Service
    prefill: tuple[RolePlan, ...]
    decode: tuple[RolePlan, ...]
    proxy_host: Host
    proxy_windows: Mapping[str, PortWindow]

    @property
    def name(self) -> str:
        return self.service.name

    @property
    def instances(self) -> tuple[RolePlan, ...]:
        return (*self.prefill, *self.decode)

    @property
    def proxy_port(self) -> int:
        return self.proxy_windows[PROXY.key][0]

    @property
    def endpoint(self) -> str:
        """The OpenAI-compatible base URL: the proxy's (it serves `/v1/completions` and `/v1/chat/completions`)."""
        return f"http://{self.proxy_host.url_address()}:{self.proxy_port}/v1"

    def kv_transfer_config(self, rp: RolePlan) -> dict[str, Any]:
        """`--kv-transfer-config` of instance `rp`, as vllm-ascend@v0.20.2rc1's tutorials write it
        (`pd_disaggregation_mooncake_single_node.md`): the connector, its `kv_role`, `kv_port` (an integer:
        vLLM's `KVTransferConfig.kv_port`), `engine_id`, and both roles' sizes, which the connector asserts
        (`mooncake_connector.py` `_get_prefill_decode_size`); each instance is an engine of data-parallel size
        1, so `dp_size` is 1, as the tutorial's 1P1D (and its 2P1D, "different ports for each P process").
        With the KV pool, a `MultiConnector` of it and `AscendStoreConnector` (`kv_pool.md`), `engine_id` on
        the outer config only: vLLM's `MultiConnector` passes it to each child and refuses a child that repeats it
        (`KVTransferConfig(**ktc, engine_id=engine_id)`, `multi_connector.py`)."""
        ri = rp.role_instance
        sizes = {role: {"dp_size": 1, "tp_size": r.tensor_parallel_size} for role, r in self._pd.roles()}
        mooncake = {"kv_connector": CONNECTOR, "kv_role": ri.kv_role, "kv_port": rp.kv_ports[0]}
        extra = {"kv_connector_extra_config": sizes}
        pool = self._pd.kv_pool
        if pool is None:
            return mooncake | {"engine_id": ri.engine_id} | extra
        store = {"kv_connector": "AscendStoreConnector", "kv_role": ri.kv_role, "kv_connector_extra_config": {
            "lookup_rpc_port": rp.lookup_rpc_port, "backend": pool.backend,
        }}  # fmt: skip
        return {"kv_connector": "MultiConnector", "kv_role": ri.kv_role, "engine_id": ri.engine_id,
                "kv_connector_extra_config": {"connectors": [mooncake | extra, store]}}  # fmt: skip

    def proxy_args(self) -> tuple[str, ...]:
        """The flags of vllm-ascend@v0.20.2rc1's `examples/disaggregated_prefill_v1/
        load_balance_proxy_server_example.py` (`--port`, `--host`, `--prefiller-hosts`/`--prefiller-ports`,
        `--decoder-hosts`/`--decoder-ports`, each of the last four `nargs="+"`), in instance order."""
        out = ["--host", "0.0.0.0", "--port", str(self.proxy_port)]
        for flag, plans in (("prefiller", self.prefill), ("decoder", self.decode)):
            out += [f"--{flag}-hosts", *(rp.url[0] for rp in plans), f"--{flag}-ports", *(str(rp.url[1]) for rp in plans)]
        return tuple(out)

    @property
    def _pd(self):
        assert self.service.disaggregated is not None
        return self.service.disaggregated

    def role_json(self, rp: RolePlan) -> dict[str, Any]:
        """An instance's entry: a service's keys, then its role, its block and ids, its `--kv-transfer-config`, and
        its host's NIC variables (`env`), as a member's."""
        ri = rp.role_instance
        assert rp.host is not None
        pool = {"lookupRpcPort": rp.lookup_rpc_port} if self._pd.kv_pool is not None else {}
        return rp.to_json() | {KV_PORT.key: rp.kv_ports[0], "role": ri.role, "kvPortBlock": list(rp.kv_ports),
                               "engineId": ri.engine_id, **pool, "kvTransferConfig": self.kv_transfer_config(rp),
                               "env": rp.host.nic_env()}  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {
            "service": self.name,
            "name": self.name,
            "kind": names.DISAGGREGATED,
            "previousNames": list(self.service.previous_names or ()),
            "connector": self._pd.connector.name,
            "kvPool": self._pd.kv_pool is not None,
            "prefill": [self.role_json(rp) for rp in self.prefill],
            "decode": [self.role_json(rp) for rp in self.decode],
            "proxy": {
                "name": names.proxy_name(self.name), "kind": names.PROXY, "host": self.proxy_host.name,
                PROXY.key: self.proxy_port, "args": list(self.proxy_args()),
            },
            "endpoint": self.endpoint,
        }  # fmt: skip


@dataclass(frozen=True)
class HostPlan:
    host: Host
    budget: Decimal
    services: tuple[ServicePlan, ...]
    """Sorted by service name."""
    shard: int | None = None
    """The shard that deploys this host, in a fleet deployed as shards (allocation.shards)."""
    members: tuple[MemberPlan, ...] = ()
    """The members of multi-host services on this host, by name; each holds its cards alone."""
    roles: tuple[RolePlan, ...] = ()
    """The prefill and decode instances of disaggregated services on this host, by name."""
    proxies: Mapping[str, Mapping[str, PortWindow]] = field(default_factory=dict)
    """The windows of each disaggregated service's proxy on this host, by the service's name."""

    def card_load(self) -> dict[int, list[ServicePlan]]:
        """Services per card, every card of the host present."""
        load: dict[int, list[ServicePlan]] = {c: [] for c in range(self.host.npus)}
        for ps in self.services:
            for card in ps.assignment.cards:
                load[card].append(ps)
        return load

    def shared_cards(self) -> tuple[int, ...]:
        """Cards used by more than one service, ascending."""
        return self._shared_cards

    def device_share_cards(self) -> tuple[int, ...]:
        """The cards device-share mode reaches when the shared cards are switched, ascending: each
        shared card's sharing unit, on Atlas A3 both chips of its NPU (npu-smi switches them together,
        so the other chip must be free of containers too, and stays in the mode)."""
        return self._device_share_cards

    # Counted once per (frozen) plan: the records, the report and the exports each ask.
    @cached_property
    def _shared_cards(self) -> tuple[int, ...]:
        return tuple(card for card, services in self.card_load().items() if len(services) > 1)

    @cached_property
    def _device_share_cards(self) -> tuple[int, ...]:
        return tuple(sorted({c for card in self.shared_cards() for c in self.host.sharing_unit(card)}))


@dataclass(frozen=True)
class RouterPlan:
    """The router in front of a replicated service's replicas: its host and ports."""

    service: Service
    """The replicated service, as configured."""
    settings: ResolvedRouter
    """What it runs with, every default applied."""
    host_name: str
    windows: Mapping[str, PortWindow]
    """Router window kind key (`allocation.windows.ROUTER_KINDS`) -> its window, published on the host."""
    replicas: tuple[ServicePlan, ...]
    """Its replicas' plans, in replica order (the very objects of the host plans)."""

    @property
    def port(self) -> int:
        """The service's endpoint."""
        return self.windows[ENDPOINT.key][0]

    @property
    def metrics_port(self) -> int:
        """Prometheus metrics."""
        return self.windows[METRICS.key][0]

    @property
    def name(self) -> str:
        """The router's name: its component's, and its container's unless the service was renamed."""
        return names.router_name(self.service.name)

    @property
    def container_name(self) -> str:
        """The docker container's name, kept across renames of the service (`previousNames`)."""
        return names.router_name(self.service.original_name)

    @property
    def previous_names(self) -> tuple[str, ...]:
        """The names the router had under the service's previous names."""
        return names.previous_router_names(self.service.previous_names)

    def to_json(self) -> dict[str, Any]:
        return {
            "service": self.service.name,
            "name": self.name,
            "kind": names.ROUTER,
            "previousNames": list(self.previous_names),
            "host": self.host_name,
            **{k.key: k.value(self.windows[k.key]) for k in ROUTER_KINDS},
            "replicas": [ps.name for ps in self.replicas],
        }


@dataclass(frozen=True)
class Plan:
    fleet: FleetConfig
    """As configured: each service once, however many instances it has."""
    hosts: tuple[HostPlan, ...]
    """Sorted by host name; every configured host, used or not."""
    warnings: tuple[str, ...] = ()
    """What will run, but not as configured (requests that will queue), or a real risk."""
    routers: tuple[RouterPlan, ...] = ()
    """One per replicated service, by service name."""
    groups: tuple[GroupPlan, ...] = ()
    """One per multi-host service, by service name; its members are those of the host plans."""
    disaggregated: tuple[DisaggregatedPlan, ...] = ()
    """One per disaggregated service, by service name; its instances are those of the host plans."""
    notes: tuple[str, ...] = ()
    """Where a figure comes from when the plan cannot vouch for it (`allocation.outcome.Outcome.notes`)."""

    @property
    def stack(self) -> str:
        """The fleet's name: a shard's stack plans, labels and reports its whole fleet."""
        return self.fleet.fleet_name

    def services(self) -> list[tuple[HostPlan, ServicePlan]]:
        return [(hp, ps) for hp in self.hosts for ps in hp.services]


CAPACITY_KEYS: Mapping[str, Callable[[Capacity], Any]] = {
    "weightsGiBPerCard": lambda cap: round(cap.weight_bytes_per_card / GIB, 2),
    "kvCacheGiBPerCard": lambda cap: round(cap.kv_bytes_per_card / GIB, 2),
    "kvCacheTokens": lambda cap: cap.kv_tokens,
    "maxConcurrency": lambda cap: _two_places(cap.max_concurrency),
    "fits": lambda cap: cap.fits,
    "blockSizeTokens": lambda cap: cap.block_tokens,
    "kvCacheBlocks": lambda cap: cap.kv_blocks,
    "bytesPerRequest": lambda cap: cap.bytes_per_request,
}
"""The plan JSON's `capacity` of a service, key by key in the order written; `plan --against`
compares exactly these keys (views.diff.compare)."""


def _two_places(concurrency: float | None) -> float | None:
    return float(f"{concurrency:.2f}") if concurrency is not None else None  # as the log's %.2f


def _capacity_json(cap: Capacity | None) -> dict[str, Any] | None:
    return None if cap is None else {key: value(cap) for key, value in CAPACITY_KEYS.items()}
