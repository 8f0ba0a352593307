"""`ascend-fleet:hosts`: one Ascend server each, and what the plan must know of it.

Split out of `allocation.config` (which re-exports `Host`); pure.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from allocation.config_types import AnyPort, ContainerName, Fraction, Model, Name, PortRange, PowerOfTwo
from allocation.hbm import declared_hbm_problem
from allocation.scalars import Whole
from allocation.values import Address, HostKey, Text, UserName

A3_CHIPS = 16  # Atlas 800T/800I A3: 8 NPUs of 2 chips


def _interface(value: str) -> str:
    """A Linux interface name as the kernel accepts it (torvalds/linux `net/core/dev.c`
    `dev_valid_name`): 1 to 15 characters, not `.` or `..`, without `/`, `:` or whitespace."""
    if len(value) > 15 or value in (".", "..") or re.search(r"[/:\s]", value) or not value.isprintable():
        raise ValueError(f"{value!r} is not a network interface name (1-15 characters, no '/', ':' or space)")
    return value


def _ip(value: str) -> str:
    """An IP address (HCCL reads `HCCL_IF_IP` as one, never a host name)."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address") from None
    return value


class HostNic(Model):
    """`nic:` of a host: the address and interface the NPUs' host-side traffic of a multi-host service
    or a prefill or decode instance uses on this host (vllm-ascend's multi-node recipes and its
    pd_disaggregation_mooncake tutorials set them per host: `HCCL_IF_IP=$local_ip`, `GLOO_SOCKET_IFNAME`,
    `TP_SOCKET_IFNAME` and `HCCL_SOCKET_IFNAME` `=$nic_name`). Read only for hosts that run a member of a
    multi-host service or a prefill or decode instance."""

    address: Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_ip)] | None = None
    """`HCCL_IF_IP`, and the leader's `--data-parallel-address`. Default: the host's `address` when that
    is an IP address; a host named by a host name must set it to run a member or a prefill or decode instance."""
    interface: Annotated[str, Field(min_length=1), AfterValidator(_interface)] | None = None
    """`GLOO_SOCKET_IFNAME`, `TP_SOCKET_IFNAME` and `HCCL_SOCKET_IFNAME`: the interface `address` is on
    (`ip -br addr`). Default: unset, and Gloo and HCCL pick an interface by their own rules, which on a
    host with several NICs may not be the one `address` is on."""


def npu_chip(card: int, board: str) -> tuple[int, int]:
    """npu-smi's (NPU ID, chip ID) of card `card` on `board`: on A3 two chips per NPU ID."""
    return (card // 2, card % 2) if board == "a3" else (card, 0)


def _engine_version(value: Any) -> Any:
    """YAML reads `20.10` as the number 20.1: a Docker Engine version must be written as a string."""
    if not isinstance(value, str):
        raise ValueError(f'a Docker Engine version is written as a quoted string, e.g. "20.10" or "28.5", not {value!r}')
    return value


# The pattern before the validator: after it, pydantic checks it in a wrapper the JSON Schema never sees.
DockerEngine = Annotated[str, Field(pattern=r"^[0-9]{1,3}(\.[0-9]{1,3}){0,2}$"), BeforeValidator(_engine_version)]
"""A Docker Engine version as `docker version --format '{{.Server.Version}}'` prints it, at least the major."""
DEFAULT_DOCKER_ENGINE = "20.10"

class Host(Model):
    """One entry of `ascend-fleet:hosts`: an Ascend server reachable over SSH."""

    name: Name
    """Unique host name: lowercase letters, digits and '-'."""
    address: Address
    """SSH address (host name, IPv4, or IPv6 without brackets); also the address of the API endpoints."""
    user: UserName = "root"
    """SSH user (a POSIX user name); must be allowed to use Docker on the host."""
    ssh_port: AnyPort = 22
    """SSH port."""
    npus: PowerOfTwo = 8
    """Number of NPUs (cards) on the host: on Atlas A3 the chips (`/dev/davinciN`), 16."""
    board: Literal["a2", "a3"] = "a2"
    """The server's board. `a2` (default): Atlas 800T/800I A2, one 910B chip per npu-smi NPU ID, so
    card k is NPU k, chip 0. `a3`: Atlas 800T/800I A3, 16 chips as 8 NPUs of 2 chips: card k is NPU
    k//2, chip k%2 (`npu-smi info -m` prints the mapping; the host check compares it), npu-smi switches
    device-share for both chips of an NPU at once, so the two are one sharing unit, and the default
    image is the `-a3` build. Needs `npus: 16`. See [A3 boards](a3.md)."""
    hbm_gi_b: Whole = Field(default=64, ge=1, le=4096, alias="hbmGiB")
    """Nominal HBM per NPU in GiB (64 or 32 for 910B cards)."""
    hbm_bytes: Whole | None = Field(default=None, ge=1 << 30, le=1 << 45)
    """HBM per NPU as the runtime reports it, which memory fractions multiply. Default from `hbmGiB`:
    64 -> 65452113920, 32 -> 31662800896; other sizes must set it for the capacity check."""
    memory_budget: Fraction | None = None
    """Per-card ceiling on the sum of memory fractions; overrides `ascend-fleet:memoryBudget`."""
    card_sharing: Literal["deviceShare", "privileged", "refuse"] = "deviceShare"
    """What the program does when services share a card on this host. A card opened by one
    non-privileged container cannot be opened by a second one unless the card is in Huawei's
    container-sharing mode. `deviceShare` (default): put exactly the shared cards into that mode
    before their containers start, and again at every boot. `privileged`: run only the services on
    shared cards privileged with every card visible, as the seed deployment did. `refuse`: a plan
    that shares a card here is an error. See [Shared cards](shared-cards.md)."""
    held_cards: Literal["refuse", "stopHolders"] = "refuse"
    """When a card must go into device-share mode while running containers hold it (a service newly
    pinned onto a running service's card; the mode can only change while no container uses the card).
    `refuse` (default): the host check stops `pulumi up` before any container of this host changes,
    naming the card and the containers holding it. `stopHolders`: `pulumi up` stops the holders (each
    with its stop grace period), switches the card, starts them again (each reloads its model, one at
    a time per card) and then starts the newcomer. See [Shared cards](shared-cards.md)."""
    replaces: list[ContainerName] = []
    """Containers already running on this host that the stack takes over from, by the name `docker ps`
    shows (e.g. `[model-emb-vl, model-text]` of a docker compose deployment). `pulumi up` disables each
    for good before it creates anything on the host: its restart policy set to `no`, then stopped, so
    no reboot brings it back; it is kept, not removed, so going back is two commands
    ([Moving from docker compose](moving-from-compose.md)). Names are exact: a name no container has is
    skipped, never read as a container ID or the beginning of one (as `docker stop NAME` would). A name
    the plan gives one of its own containers on this host (a service, a replica, a router, the NPU
    exporter) is refused, and so is a list whose takeover script would be longer than the 131,071
    bytes a host script can have."""
    reserved_ports: list[PortRange] = []
    """Ports on this host the allocator must never hand out (in addition to `ascend-fleet:ports.reserved`):
    single ports (`22`), `"a-b"` strings or `[a, b]`."""
    host_key: HostKey | None = None
    """The host's SSH public key (`ssh-ed25519 AAAA...`, as `ssh-keyscan` prints it). The docker provider,
    `doctor` and the host check then trust this key and no other. Without it, the key is looked up in
    `ssh.knownHostsFile` (default `~/.ssh/known_hosts`)."""
    docker_engine: DockerEngine | None = None
    """The Docker Engine version this host runs (`"28.5"`); default `ascend-fleet:dockerEngine`. It
    decides the host's health probes (`ascend-fleet:healthStartIntervalSeconds`), and the host check
    stops `pulumi up` when the engine found on the host is on the other side of version 25."""
    shard: Whole | None = Field(default=None, ge=0, le=9999)
    """The shard (`ascend-fleet:shards`) this host is deployed by, pinned by `pin` like cards so that
    adding hosts or services never moves a host to another stack (which would delete and re-create
    its containers). Unpinned hosts fill the lowest shard with room, in name order. Moving a host on
    purpose is `python -m allocation move-host` (docs/shards.md)."""
    docker_host: Text | None = None
    """Docker daemon URL; default `ssh://user@address:sshPort`. Set `unix:///var/run/docker.sock`
    for a daemon on the machine running Pulumi (the dev stack). An `ssh://` or `tcp://` URL must
    name this host's `address`, so `doctor` checks the machine the containers run on."""
    # Left out of the fleet's hash while unset, so shard files cut before it still match (FleetConfig.fleet_hash).
    nic: HostNic | None = Field(default=None, exclude_if=lambda v: v is None)
    """The address and interface of this host's NPU host-side traffic, for a member of a multi-host service
    ([One model over several hosts](multi-host.md)) or a prefill or decode instance
    ([Prefill and decode apart](disaggregated.md)); see its keys for the defaults."""

    @model_validator(mode="after")
    def _replaces_each_once(self) -> Host:
        """`replaces` names each container once."""
        twice = sorted({n for n in self.replaces if self.replaces.count(n) > 1})
        if twice:
            raise ValueError(f"replaces names {', '.join(twice)} more than once")
        return self

    @model_validator(mode="after")
    def _hbm_declarations_agree(self) -> Host:
        """`hbmBytes`, when set, is 85-100% of a card the host check accepts for `hbmGiB` (within 10%
        of it): the rule the host check applies on the host (allocation.hbm)."""
        problem = declared_hbm_problem(self.hbm_gi_b, self.hbm_bytes)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _board_has_its_chips(self) -> Host:
        """`board: a3` needs `npus: 16`."""
        if self.board == "a3" and self.npus != A3_CHIPS:
            raise ValueError(
                f"board a3 has {A3_CHIPS} chips (8 NPUs of 2), but npus is {self.npus}: set npus: {A3_CHIPS}, "
                "or board: a2 for an 8-card Atlas A2 server"
            )
        return self

    def npu_chip(self, card: int) -> tuple[int, int]:
        """npu-smi's (NPU ID, chip ID) of card `card` (`/dev/davinci<card>`): what `-i` and `-c` take."""
        return npu_chip(card, self.board)

    def sharing_unit(self, card: int) -> tuple[int, ...]:
        """The cards npu-smi puts into device-share mode together with `card`: on A3 both chips of its NPU."""
        npu = self.npu_chip(card)[0]
        return (2 * npu, 2 * npu + 1) if self.board == "a3" else (card,)

    @model_validator(mode="after")
    def _docker_host_is_this_host(self) -> Host:
        """`dockerHost` is `unix:///path`, or an `ssh://` or `tcp://` URL naming this host's `address`."""
        url = self.docker_host
        if url is None or re.fullmatch(r"unix:///[^:\s]+", url):
            return self
        match = re.fullmatch(r"(ssh|tcp)://(?:([^@/\s]+)@)?(\[[^\]]+\]|[^:/\s]+)(?::(\d{1,5}))?/?", url)
        if match is None:
            raise ValueError(f"dockerHost {url!r} is not unix:///path, ssh://[user@]address[:port] or tcp://address:port")
        if match.group(3).strip("[]") != self.address:
            raise ValueError(f"dockerHost {url!r} names another machine than address {self.address!r}")
        return self

    def url_address(self) -> str:
        """The address as it goes into a URL: IPv6 literals in brackets."""
        a = self.address
        return f"[{a}]" if ":" in a and not a.startswith("[") else a

    def docker_url(self) -> str:
        """The Docker daemon URL that Pulumi's provider, the exports and `doctor` all use."""
        return self.docker_host or f"ssh://{self.user}@{self.url_address()}:{self.ssh_port}"

    @property
    def nic_address(self) -> str | None:
        """`HCCL_IF_IP` here: `nic.address`, else `address` when it is an IP address; None when neither is."""
        if self.nic is not None and self.nic.address is not None:
            return self.nic.address
        try:
            return str(ipaddress.ip_address(self.address))
        except ValueError:
            return None

    def nic_env(self) -> dict[str, str]:
        """The NIC variables of a process on this host's network (`nic`): a multi-host member's and a prefill
        or decode instance's, as vllm-ascend's recipes set them per host (`HostNic`)."""
        interface = self.nic.interface if self.nic is not None else None
        names = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME") if interface else ()
        return {"HCCL_IF_IP": self.nic_address or ""} | dict.fromkeys(names, interface or "")

    def is_local(self) -> bool:
        """A daemon on this machine: reached without SSH."""
        return self.docker_url().startswith("unix://")

