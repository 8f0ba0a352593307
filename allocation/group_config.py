"""`dataParallel:` of a service: one model over several hosts, declared the way vLLM launches it.

vllm-ascend's DeepSeek-R1 tutorial (v0.20.2rc1 `docs/source/tutorials/models/DeepSeek-R1.md`, the
two Atlas 800 A2 recipe) runs one `vllm serve` per host with `--data-parallel-size 4
--data-parallel-size-local 2 --tensor-parallel-size 4 --enable-expert-parallel`, the first host
with `--data-parallel-address <its address> --data-parallel-rpc-port 13389`, the second with
`--headless --data-parallel-start-rank 2` pointing at the first. A stack says the same with
`tensorParallelSize: 4` and `dataParallel: {size: 4, perHost: 2, expertParallel: true}`: the
planner chooses the hosts (or honours `hosts` and `memberPins`), makes the first the leader and
gives every other one its start rank; the flags and ports are the plan's, never `args`'. Pure.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, create_model

from allocation.config_types import Model, Name, _pin_fields, _Pinned
from allocation.scalars import Flag, Whole
from allocation.windows import LEADER_KINDS, MEMBER_KINDS

_MemberWindowPins: type[_Pinned] = create_model("_MemberWindowPins", __base__=_Pinned, **_pin_fields(MEMBER_KINDS))


def _once_each(cards: list[int]) -> list[int]:
    """No card twice."""
    if len(set(cards)) != len(cards):
        raise ValueError(f"devices {cards} lists a card twice")
    return cards


class MemberPins(_MemberWindowPins):
    """Pins of one member (one host) of a multi-host service, in member order: the first is the
    leader's. What `pin` writes: its host, its cards and its windows; `apiPort` and
    `dataParallelRpcPort` on the leader's entry only."""

    host: Name | None = None
    """Host of the member."""
    devices: Annotated[list[Annotated[Whole, Field(ge=0, le=15)]], AfterValidator(_once_each)] | None = None
    """Physical NPU indices; `perHost` x `tensorParallelSize` of them."""


class DataParallel(Model):
    """`dataParallel:` of a service: data-parallel ranks spread over several hosts, one `vllm serve`
    per host ([One model over several hosts](multi-host.md)). Each rank is a tensor-parallel group of
    the service's `tensorParallelSize` cards; each host runs `perHost` of them on an aligned block of
    `perHost` x `tensorParallelSize` cards, held by the member alone. The hosts have one board and one
    HBM size; the first is the leader, which serves the API."""

    size: Whole = Field(ge=2, le=1024)
    """`--data-parallel-size`: data-parallel ranks in all."""
    per_host: Whole = Field(ge=1, le=16)
    """`--data-parallel-size-local`: ranks on each host, so `size / perHost` hosts."""
    expert_parallel: Flag = False
    """`--enable-expert-parallel`: the MoE layers' experts are split over every card of every rank
    (size x `tensorParallelSize`) instead of each rank's tensor-parallel group; the capacity check
    splits `profile.expertWeightBytes` the same way."""
    member_pins: list[MemberPins] | None = None
    """Pins of each member, in order, the leader first (`pin` writes them)."""

    @property
    def hosts(self) -> int:
        """How many hosts the ranks need: one member on each."""
        return self.size // self.per_host

    def problems(self, tp: int) -> list[str]:
        """What vLLM or the cards make of these numbers with `tensorParallelSize` `tp`, one problem each."""
        problems = []
        if self.size % self.per_host:
            problems.append(
                f"dataParallel.size {self.size} is not a multiple of perHost {self.per_host}: every host runs "
                "perHost ranks (vLLM's --data-parallel-size-local), so size is perHost times the number of hosts"
            )
        cards = self.per_host * tp
        if cards & (cards - 1) or cards > 16:
            problems.append(
                f"dataParallel.perHost {self.per_host} x tensorParallelSize {tp} = {cards} cards per host, not an "
                "aligned block of 1, 2, 4, 8 or 16 cards"
            )
        for i, pins in enumerate(self.member_pins or (), start=1):
            if pins.devices is not None and len(pins.devices) != cards:
                problems.append(
                    f"dataParallel.memberPins entry {i}: devices {pins.devices} pins {len(pins.devices)} cards, but a "
                    f"member holds perHost x tensorParallelSize = {cards}"
                )
            leader_only = sorted(k for k in LEADER_KINDS if getattr(pins, k) is not None)
            if i > 1 and leader_only:
                problems.append(
                    f"dataParallel.memberPins entry {i} pins {', '.join(leader_only)}, which only "
                    "the leader (entry 1) binds: a --headless follower serves no API and joins the leader's RPC port"
                )
        if len(self.member_pins or ()) > self.hosts > 0:
            problems.append(f"dataParallel.memberPins has {len(self.member_pins or ())} entries for {self.hosts} hosts")
        return problems


def nic_env_problems(env: dict[str, Any] | None) -> list[str]:
    """The NIC variables the plan of a multi-host or disaggregated service sets from its hosts' `nic`, refused in `env`."""
    owned = sorted(set(env or ()) & set(NIC_ENV))
    return [f"{v} is set by the plan from each host's nic ({NIC_ENV[v]}); remove it from env" for v in owned]


NIC_ENV = {
    "HCCL_IF_IP": "nic.address",
    "GLOO_SOCKET_IFNAME": "nic.interface",
    "TP_SOCKET_IFNAME": "nic.interface",
    "HCCL_SOCKET_IFNAME": "nic.interface",
}
"""The variables vllm-ascend's multi-node recipes (DeepSeek-R1.md: `HCCL_IF_IP=$local_ip`, the three
`*_SOCKET_IFNAME=$nic_name`) and its PD tutorials (v0.20.2rc1 `pd_disaggregation_mooncake_single_node.md`, for
each instance: `export HCCL_IF_IP=192.0.0.1  # node ip`, `GLOO_SOCKET_IFNAME`, `TP_SOCKET_IFNAME`,
`HCCL_SOCKET_IFNAME` `="eth0"`) set per host, and the host key each comes from."""
