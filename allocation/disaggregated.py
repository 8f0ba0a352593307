"""A disaggregated service as the planner places it: prefill and decode instances, and their ids.

Each role of a service with `disaggregated` is a set of instances named as a replicated service's
(`<service>-prefill-1` ...), each one container on `tensorParallelSize` cards of one host. An
instance is placed as any instance is (`allocation.placement`), and answers the capacity check with
its role's sizes, so it carries its role as a service of its own (`service`), derived once from the
configured one (`parent`). What the Mooncake connector adds, the planner owns: a block of handshake
ports from `kv_port` (`allocation.windows.KV_PORT`), an `engine_id` and, with the KV pool, a
`lookup_rpc_port`. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from allocation import names
from allocation.config import ContainerSettings, Service
from allocation.disaggregated_config import KV_ROLE, Role, RolePins
from allocation.instance import Instance
from allocation.resolved import resolve


@dataclass(frozen=True)
class RoleInstance(Instance):
    """One prefill or decode instance. `service` is its role as a service (the role's sizes, named
    `<service>-<role>`); `parent` the disaggregated service as configured."""

    parent: Service = field(default=None)  # type: ignore[assignment]  # always given (`role_instances`)
    role: str = ""
    """`prefill` or `decode`."""

    @property
    def kind(self) -> str:
        return names.ROLE

    @property
    def replica_of(self) -> str:
        return self.parent.name

    @property
    def shard_key(self) -> str:
        """Every instance of both roles goes to one shard: the proxy, which that shard's stack creates after
        them, names each of them."""
        return self.parent.name

    @property
    def served_model_name(self) -> str:
        """Every instance answers to the service's model name: the proxy passes requests on unchanged."""
        return self.parent.served_model_name or self.parent.original_name

    @property
    def alone(self) -> str:
        """It holds its cards alone, as a multi-host member: it runs on the host network, with HCCL and the KV
        transfer on its cards (the connector binds a port per card, `kv_port + device_index`, and moves the KV
        cache over the cards' own NICs, `/etc/hccn.conf`), so the placer gives it cards of its own rather than a
        share of a card in device-share mode and start order."""
        return "a prefill or decode instance"

    @property
    def kv_role(self) -> str:
        """`kv_role` of its `--kv-transfer-config`: `kv_producer` (prefill) or `kv_consumer` (decode)."""
        return KV_ROLE[self.role]

    @property
    def kv_block(self) -> int:
        """Ports of its handshake block: DP x TP x PP x PCP (vllm-ascend@v0.20.2rc1 `mooncake_connector.py`,
        `side_channel_port = kv_port + data_parallel_rank x TP x PP x PCP`, then `+ device_index`), with data,
        pipeline and prefill-context parallel size 1 (their flags are refused in its `args`): one per card."""
        return self.tp_size

    @property
    def engine_id(self) -> str:
        """`engine_id`: its container's name, unique in the stack as every container name is, and kept across
        renames as the container is; the tutorials ask "that each node's engine_id is uniquely assigned", and the
        connector refuses a peer with its own (`Conflict engine id`, `mooncake_connector.py`)."""
        return self.original_name

    @cached_property
    def pins(self) -> RolePins:  # type: ignore[override]
        """Its entry of its role's `replicaPins` (the first for a role of one instance)."""
        assert self.parent.disaggregated is not None
        pins = getattr(self.parent.disaggregated, self.role).replica_pins or ()
        at = max(self.index, 1) - 1
        return pins[at] if at < len(pins) else RolePins()


def role_service(parent: Service, role: str, r: Role) -> Service:
    """Role `r` of `parent` as a service of its own: its name, sizes and replicas, the rest the parent's."""
    previous = [names.role_name(p, role) for p in parent.previous_names or ()] or None
    return parent.model_copy(update={
        "name": names.role_name(parent.name, role), "previous_names": previous, "disaggregated": None,
        "tensor_parallel_size": r.tensor_parallel_size, "memory_fraction": r.memory_fraction, "replicas": r.replicas,
    })  # fmt: skip


def role_instances(services: list[Service], defaults: ContainerSettings) -> list[RoleInstance]:
    """Every prefill and decode instance of every disaggregated service, by service name, prefill first, in
    instance order; settings resolved over `defaults`."""
    out = []
    for s in sorted((s for s in services if s.disaggregated is not None), key=lambda s: s.name):
        resolved = resolve(s, defaults)
        assert s.disaggregated is not None
        for role, r in s.disaggregated.roles():
            derived = role_service(s, role, r)
            for i in names.instance_indexes(r.replicas):
                out.append(RoleInstance(derived, resolved, r.memory_fraction, i, parent=s, role=role))
    return out
