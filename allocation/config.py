"""The stack configuration: the user-facing contract of ascend-fleet.

These models are the single parser of the `ascend-fleet:` config namespace.
The command line feeds them the values of `Pulumi.<stack>.yaml`; the Pulumi
program feeds them what `pulumi.Config` hands over. Field docstrings are the
reference documentation of every key. Keys are camelCase as in Pulumi configs;
unknown keys are errors, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from decimal import Decimal
from functools import cached_property
from typing import Annotated, Any, Literal, Mapping

from pydantic import Field, ValidationError, create_model, field_validator, model_validator

from allocation import names as naming
from allocation.config_errors import field_aliases, suggest, unknown_keys, validation_problems
from allocation.config_types import (  # re-exported: every layer imports these from allocation.config
    FRACTION_SCALE, AnyPort, Fraction, FractionOrAuto, Model, Name, Port, PortCount, PortRange, PowerOfTwo,
    _RouterPins, _WindowPins, card_count_problems, units,
)
from allocation.errors import ConfigError, listing
from allocation.scalars import Flag, Number, Whole, holds_number, top_level_value
from allocation.group_config import DataParallel, MemberPins, nic_env_problems
from allocation.disaggregated_config import Disaggregated, owned_arg_problems
from allocation.host_config import A3_CHIPS, DEFAULT_DOCKER_ENGINE, DockerEngine, Host, npu_chip  # re-exported
from allocation.profile_config import LINEAR_FIELDS, Measured, ModelProfile  # re-exported
from allocation.values import (
    STACK_NAME_RULE, AbsPath, Arg, EnvKey, EnvValue, Image, StackName, Text, Word,
)
from allocation.defaults import (
    DEFAULT_IMAGE,
    DEFAULT_IMAGES,
    DEFAULT_IPC_MODE,
    DEFAULT_RESTART,
    DEFAULT_SHM_SIZE_MIB,
    DEFAULT_START_TIMEOUT_SECONDS,
    DEFAULT_STOP_GRACE_SECONDS,
    LOG_OPTS,
    REQUEST_TIMEOUT_SECONDS,
)
from allocation.target import DEFAULT_TARGET, Kubernetes, Target
from allocation.windows import DP_RPC, EPHEMERAL, KINDS, KV_PORT, ROUTER_KINDS, WindowKind
from allocation.vllm_args import ArgsError, read_args

NAMESPACE = "ascend-fleet"
DEFAULT_MEMORY_BUDGET = Decimal("0.95")
DEFAULT_RUNTIME_OVERHEAD_GIB = Decimal("4")  # see allocation/capacity.py and docs/capacity.md
VISIBLE_DEVICES_ENV = "ASCEND_RT_VISIBLE_DEVICES"
# Variables the plan sets (or that would show other cards); in `env` they would
# silently defeat it. Each with the key to use instead.
ALLOCATED_ENV = {
    VISIBLE_DEVICES_ENV: "devices",
    "ASCEND_VISIBLE_DEVICES": "devices",
    **{k.env: k.key for k in KINDS if k.env},
}
CARDS_ENV = "ASCEND_FLEET_CARDS"
HEALTH_URL_ENV = "ASCEND_FLEET_HEALTH_URL"
START_WAIT_ENV = "ASCEND_FLEET_START_WAIT_SECONDS"
CONTAINER_ENV = "ASCEND_FLEET_CONTAINER"
"""The container's own Docker name: what its gate's files are called. Never a neighbour's."""
GATE_ENV = {
    CONTAINER_ENV: "the container's own name",
    CARDS_ENV: "the cards it holds (devices)",
    HEALTH_URL_ENV: "its health URL (apiPort)",
    START_WAIT_ENV: "how long it waits for its card locks (startTimeoutSeconds)",
}
"""The start gate's own variables (records.containers `_gated`), written over `env`: refused there,
each with what the plan puts in it."""
# Config keys the Pulumi program reads but the planner has no use for.
PROGRAM_ONLY_KEYS = frozenset({"sshPrivateKey"})
VERBATIM_KEYS = frozenset({"dockerEngine"})
"""Top-level keys whose value the program takes as the engine passes it, a string: JSON would read
the version `20.10` as the number 20.1."""




class Mount(Model):
    """An extra bind mount from the host into the container."""

    source: AbsPath
    """Absolute path on the host."""
    target: AbsPath
    """Absolute path inside the container."""
    read_only: Flag = True
    """Mount read-only (default)."""


class ContainerSettings(Model):
    """Settings a service inherits from `ascend-fleet:defaults` unless it sets them itself."""

    image: Image | None = Field(default=None, description=f"Container image. Default `{DEFAULT_IMAGE}`, "
        f"and `{DEFAULT_IMAGES['a3']}` on a host with `board: a3`, also where `defaults` names `{DEFAULT_IMAGE}` "
        "(as `Pulumi.yaml` does for every stack). Any other image applies to every board: give a service on an A3 "
        "host an `-a3` build in its own `image`.")
    env: dict[EnvKey, EnvValue] | None = None
    """Extra environment; merged over the tuning defaults (defaults' env, then the service's). Every
    container gets the seed's tuning environment, which `env` may override: `HCCL_BUFFSIZE=512`,
    `OMP_PROC_BIND=false`, `OMP_NUM_THREADS=1`, `TASK_QUEUE_ENABLE=1`,
    `PYTORCH_NPU_ALLOC_CONF=expandable_segments:True`, and `VLLM_WORKER_MULTIPROC_METHOD=spawn` when TP > 1.
    It may not set the start gate's own variables, which the plan writes for each container:
    `ASCEND_FLEET_CONTAINER` (its name), `ASCEND_FLEET_CARDS` (its cards), `ASCEND_FLEET_HEALTH_URL` (its
    health URL) and `ASCEND_FLEET_START_WAIT_SECONDS` (its start wait); such a stack is refused, naming the
    service (or `defaults`) and the variable."""
    args: list[Arg] | None = None
    """Extra `vllm serve` arguments, appended after the generated ones (defaults' first). Flags the
    plan sets (`--port`, `--tensor-parallel-size`, `--gpu-memory-utilization`...) are refused.

    The plan reads them (the defaults' then the service's) as `vllm serve` does, in one place
    (`allocation/vllm_args.py`, after vLLM's `FlexibleArgumentParser.parse_args` and
    `_compute_kwargs`), for the capacity check, the router policy, the NPU graph pool, `profile`'s
    `--kv-cache-dtype` and the diff. Underscores in an option's name (up to its first `.`) are dashes
    (`--enable_prefix_caching`); values are never changed. Booleans have a `--no-` form and take no
    value (`--enforce-eager=true` and `--enforce-eager true` are refused, as vLLM refuses them).
    `--block-size 16` and `--block-size=16` are the same; of a repeated option the last one wins.
    `--speculative-config` takes JSON or dotted keys (`--speculative-config.num_speculative_tokens
    3`), which replace the JSON wherever it stands. Whole numbers are read with Python's `int()`, as
    vLLM's argparse does: `١٦` and `1_6` are 16, `¹⁶` is refused; `--block-size None` leaves the block
    size unset. An abbreviation of an option the plan reads (`--enable-prefix`) is refused: vLLM
    (argparse's `allow_abbrev`) may read it as that option. Not read: short options other than `-tp`,
    and `--config FILE` (options set in a file inside the container are not seen by the capacity
    check or the router policy). Arguments vLLM would refuse are a config error naming the service
    and the option (`service chat: args: --block-size '¹⁶' is not a block size: vLLM reads it with
    int(), which refuses it`)."""
    mounts: list[Mount] | None = None
    """Extra bind mounts (defaults' and the service's are both applied)."""
    shm_size_mib: Whole | None = Field(
        default=None, ge=64, le=1_048_576, alias="shmSizeMiB",
        description=f"Shared memory of the container in MiB. Default {DEFAULT_SHM_SIZE_MIB} (the seed's 10.24 GB).",
    )  # fmt: skip
    start_timeout_seconds: Whole | None = Field(
        default=None, ge=60, le=86_400,
        description="How long a model may take to load before it counts as failed: the health check's start period "
        f"and how long `pulumi up` waits for healthy. Default {DEFAULT_START_TIMEOUT_SECONDS}.",
    )  # fmt: skip
    all_devices: Flag | None = None
    """Opt in to the seed's layout: every card mounted into a privileged container.
    Off by default, so a container can only touch its own cards."""
    restart: Literal["unless-stopped", "always"] | None = Field(
        default=None, description=f"Docker restart policy. Default `{DEFAULT_RESTART}`."
    )
    log_opts: dict[Annotated[str, Field(pattern=r"^[a-z0-9-]{1,64}$")], Text] | None = Field(
        default=None,
        description=f"Options of the `json-file` log driver. Default `{json.dumps(dict(LOG_OPTS))}`. dockerd adds "
        "`/etc/docker/daemon.json`'s `log-opts` to every container that leaves a key unset, and the provider "
        "would then replace the container on every `pulumi up`: set here every key daemon.json sets (the "
        "host check refuses a host where they differ).",
    )
    ipc_mode: Literal["private", "host"] | None = Field(
        default=None,
        description=f"Default `{DEFAULT_IPC_MODE}`. `private`: the container's own IPC namespace and `/dev/shm` of "
        "`shmSizeMiB`, as the official vllm-ascend `docker run`. `host` shares the host's: `shmSizeMiB` is then "
        "ignored and each service gets its own `ATB_SHARE_MEMORY_NAME_SUFFIX`.",
    )
    vllm_ascend_version: Annotated[str, Field(pattern=r"^v?[0-9]{1,4}\.[0-9]{1,4}(\.[0-9]{1,4})?(rc[0-9]{1,4})?$")] | None = None
    """vLLM-Ascend version the image runs (`0.11.0`); default: read from the image's tag (before an
    `@sha256:` digest).
    It decides the KV cache layout the capacity check computes, and what a later service on a shared
    card gets: before 0.15 the running total of the fractions there, until 0.18 a warning that the
    others' memory comes off its KV cache."""
    graph_memory_gi_b: Number | None = Field(
        default=None, ge=0, le=1024, alias="graphMemoryGiB",
        description="Per-card GiB of the NPU graph pool vLLM-Ascend captures after the KV cache, outside "
        "`memoryFraction` (vllm-ascend@v0.20.2rc1 `worker/worker.py` `compile_or_warm_up_model`); the shared-card "
        "check counts it unless `args` has `--enforce-eager`. Set it to what the startup log reports "
        "(\"... GiB for NPU graph memory\"): `python -m allocation calibrate` reads it from the running containers. "
        "Unset: estimated from `profile` (its layers and the batch sizes "
        "`maxNumSeqs` implies, scaled from vLLM-Ascend's published measurements), and a warning built on the "
        "estimate starts with `estimate:`; without a profile either, the card's room for graphs is not checked "
        "(see [room for graphs on shared cards](capacity.md)).",
    )  # fmt: skip
    stop_grace_seconds: Whole | None = Field(
        default=None, ge=0, le=3600,
        description="How long `docker stop`, a replacement or a destroy waits after SIGTERM before SIGKILL, so vLLM "
        f"releases its HBM before the next container starts. Default {DEFAULT_STOP_GRACE_SECONDS}.",
    )  # fmt: skip

    @field_validator("env", mode="before")
    @classmethod
    def _env_keys_not_the_plans(cls, value: Any) -> Any:
        """No variable the plan sets (the HCCL windows, `VLLM_PORT`, `ASCEND_RT_VISIBLE_DEVICES`,
        `ASCEND_VISIBLE_DEVICES`): set its key instead."""
        if isinstance(value, Mapping):
            owned = sorted(set(value) & set(ALLOCATED_ENV))
            if owned:
                raise ValueError(
                    "; ".join(f"{v} is set by the plan: set the service's {ALLOCATED_ENV[v]} instead" for v in owned)
                )
            gate = sorted(set(value) & set(GATE_ENV))
            if gate:
                raise ValueError(
                    "; ".join(f"{v} is set by the start gate to {GATE_ENV[v]}; remove it from env" for v in gate)
                )
        return value


class Defaults(ContainerSettings):
    """`ascend-fleet:defaults`: applied to every service unless it overrides."""


class ReplicaPins(_WindowPins):
    """Pins of one replica of a replicated service: what a service pins at its top level."""

    host: Name | None = None
    """Host of the replica."""
    devices: list[Annotated[Whole, Field(ge=0, le=15)]] | None = None
    """Physical NPU indices; as many as the service's `tensorParallelSize`."""

    @field_validator("devices")
    @classmethod
    def _distinct(cls, value: list[int] | None) -> list[int] | None:
        """No card twice."""
        if value is not None and len(set(value)) != len(value):
            raise ValueError(f"devices {value} lists a card twice")
        return value


class Router(Model):
    """`router:` of a replicated service: the vLLM router in front of its replicas."""

    host: Name | None = None
    """Host of the router container; default the first replica's host."""
    policy: Literal["round_robin", "random", "power_of_two", "cache_aware", "consistent_hash"] | None = None
    """Load-balancing policy; default `round_robin`, or `cache_aware` when prefix caching is on."""
    request_timeout_seconds: Whole | None = Field(
        default=None, ge=10, le=86_400,
        description=f"How long one request may take through the router. Default {REQUEST_TIMEOUT_SECONDS}, for long contexts.",
    )  # fmt: skip
    base_image: Image | None = None
    """The image the router's image is built from (it needs Python and vLLM's dependencies); default
    the service's image. The router's image, and so its container, follow it: pin it to the current
    image before upgrading the service's, and the replicas roll one at a time while the router, the
    service's endpoint, keeps running."""


class Service(ContainerSettings, _WindowPins, _RouterPins):
    """One entry of `ascend-fleet:services`: a `vllm serve` instance."""

    name: Name
    """Unique service name in the stack; also the container name (see `previousNames`)."""
    previous_names: list[Name] | None = Field(default=None, min_length=1)
    """Names the service had before, oldest first. Its Pulumi resources get aliases to them, so a
    rename updates them in place instead of creating new ones beside the old (which would need the
    same cards and ports). Its container keeps everything that reaches Docker under the first name
    (docker's container name, the default `--served-model-name`, labels), since the docker provider
    re-creates a container whose name changes; drop that entry and the container is re-created.
    A rename back lists the whole history, the current name first: `a` renamed `b`, then `a` again,
    is `name: a` with `previousNames: [a, b]`, which keeps the container `a` and its served model name.
    Previous names are unique in the stack, none the name of another current service, replica or router."""
    model: AbsPath
    """Absolute path of the weights on the host, mounted read-only at the same path."""
    host: Name | None = None
    """Host to run on; when absent the allocator places the service on a host with room."""
    served_model_name: Word | None = None
    """`--served-model-name`; default: the service name."""
    tensor_parallel_size: PowerOfTwo = 1
    """Cards in the tensor-parallel group, all on one host, aligned (pairs, quads, all eight)."""
    memory_fraction: FractionOrAuto = Decimal("0.9")
    """`--gpu-memory-utilization`: the share of each of its cards' memory the service may take. `auto`:
    the smallest fraction, in hundredths, whose KV cache holds `maxNumSeqs` sequences of `maxModelLen`
    (needs `profile`); `pin` writes the number chosen. Not set with `kvCacheGiB`, from which the plan derives
    it. See [Will it fit](capacity.md)."""
    max_model_len: Whole | None = Field(default=None, ge=1, le=100_000_000)
    """`--max-model-len`."""
    max_num_seqs: Whole | None = Field(default=None, ge=1, le=1_000_000)
    """`--max-num-seqs`."""
    profile: ModelProfile | None = None
    """The model's sizes, for the capacity check (`python -m allocation profile` fills it in; see
    [Will it fit](capacity.md))."""
    # Left out of the fleet's hash while unset, so shard files cut before it still match (FleetConfig.fleet_hash).
    measured: Measured | None = Field(default=None, exclude_if=lambda v: v is None)
    """What a container of the service logged at its last start, and where (`python -m allocation
    calibrate` writes it, with `graphMemoryGiB`)."""
    runtime_overhead_gi_b: Number | None = Field(default=None, ge=0, le=1024, alias="runtimeOverheadGiB")
    """Per-card allowance for the activation peak and non-torch memory; overrides the stack's."""
    kv_cache_gi_b: Number | None = Field(default=None, gt=0, le=1024, alias="kvCacheGiB", exclude_if=lambda v: v is None)
    """Fix the KV cache of each of its cards at this many GiB (`--kv-cache-memory-bytes`, floor of GiB x
    2^30), whatever its neighbours on a shared card hold when it starts: vLLM then skips its memory
    profiling and takes these bytes as they are (vllm-ascend `worker/worker.py`
    `determine_available_memory`, from v0.19.1rc1; older images are refused). The plan then sets
    `--gpu-memory-utilization` itself, so `memoryFraction` is not set with it: vLLM still refuses to
    start unless that fraction of the card is free, so the plan gives the smallest fraction (to 4
    decimals) that covers the service's weights per card, `runtimeOverheadGiB` and this cache, and checks
    that it passes in the start order on a shared card and in its reverse. Needs `profile` (the
    weights); tokens are sized from these bytes; `doctor` compares the size the startup log reports
    ("reserved ... GiB for KV Cache") with it. See [a fixed KV cache](capacity.md#a-fixed-kv-cache-kvcachegib)."""
    hccl_port_ranges: Flag = True
    """Set `HCCL_NPU_SOCKET_PORT_RANGE`/`HCCL_HOST_SOCKET_PORT_RANGE`. Set false for models with MC2
    fused operators on Atlas A2, which do not support them: the service then keeps HCCL's default
    NPU port 16666 and gets its cards to itself."""
    devices: list[Annotated[Whole, Field(ge=0, le=15)]] | None = None
    """Pin: physical NPU indices; as many as `tensorParallelSize`."""
    replicas: Whole = Field(default=1, ge=1, le=64)
    """Containers serving the model, each planned like a service of its own (`<name>-1` ...), on
    different hosts while there is room, behind one router at the service's endpoint. 1: one
    container named after the service, no router. See [Replicas behind one router](replicas.md)."""
    hosts: list[Name] | None = Field(default=None, min_length=1)
    """Hosts the service (each replica) may be placed on; default: any. `memoryFraction: auto` is sized
    for these hosts only, and `pin` narrows the list to the chosen host instead of adding `host`."""
    replica_pins: list[ReplicaPins] | None = None
    """Pins of each replica, in order: `host`, `devices` and the windows (`pin` writes them)."""
    router: Router | None = None
    """The router of a replicated service."""
    # Left out of the fleet's hash while unset, so shard files cut before it still match (FleetConfig.fleet_hash).
    data_parallel: DataParallel | None = Field(default=None, exclude_if=lambda v: v is None)
    """Run the model over several hosts: `size` data-parallel ranks, `perHost` on each host, each a
    tensor-parallel group of `tensorParallelSize` cards ([One model over several hosts](multi-host.md)).
    The plan chooses the hosts (among `hosts`, when set), makes the first the leader and sets the
    data-parallel flags, the ports and each host's `nic` variables; `args` and `env` may set none of
    them. Not with `replicas`, `host`, `devices`, the window pins (pin members under
    `dataParallel.memberPins`) or `memoryFraction: auto`. Deployed on the docker target (one container per
    host, on the host network); the Kubernetes target refuses it."""
    # Left out of the fleet's hash while unset, so shard files cut before it still match (FleetConfig.fleet_hash).
    disaggregated: Disaggregated | None = Field(default=None, exclude_if=lambda v: v is None)
    """Serve the model with prefill and decode apart: `prefill` and `decode` instances, each role with its own
    `tensorParallelSize`, `memoryFraction` and `replicas`, the KV cache passed by the Mooncake connector, one
    proxy in front ([Prefill and decode apart](disaggregated.md)). The plan sets each instance's
    `--kv-transfer-config` (its `kvPort` block, `engine_id`, the KV pool's `lookup_rpc_port`), each host's
    `nic` variables and the proxy's port; `args` and `env` may set none of them. Not with `tensorParallelSize`, `memoryFraction`, `replicas`, `host`,
    `devices`, the window pins (pin each instance under its role's `replicaPins`), `dataParallel`,
    `kvCacheGiB` or `hcclPortRanges: false`. Deployed on the docker target (each instance on the host network
    with `/etc/hccn.conf` mounted, the proxy after them); the Kubernetes target refuses it."""

    @model_validator(mode="after")
    def _disaggregated_agrees(self) -> Service:
        """A disaggregated service's sizes and pins live in its roles, every instance gets HCCL windows of
        its own, and its `args` set none of the options its plan owns."""
        pd = self.disaggregated
        if pd is None:
            return self
        problems = pd.problems()
        own = {k: getattr(self, f) for k, f in (("tensorParallelSize", "tensor_parallel_size"), ("memoryFraction",
               "memory_fraction"), ("replicas", "replicas")) if f in self.model_fields_set}  # fmt: skip
        own |= {"host": self.host, "devices": self.devices, "dataParallel": self.data_parallel, "kvCacheGiB": self.kv_cache_gi_b}
        own |= {k.key: getattr(self, k.key) for k in KINDS}
        pinned = [k for k, v in own.items() if v is not None]
        if pinned:
            problems.append(
                f"a disaggregated service sizes and pins each role under disaggregated.prefill and disaggregated.decode "
                f"(tensorParallelSize, memoryFraction, replicas, replicaPins): it takes no {', '.join(pinned)} of its own"
            )
        if not self.hccl_port_ranges:
            problems.append(
                "hcclPortRanges false: every prefill and decode instance needs HCCL windows of its own, or two on one host "
                "both bind HCCL's default 16666 (vllm-ascend issue 4725)"
            )
        problems += owned_arg_problems(self.args) + nic_env_problems(self.env)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _data_parallel_agrees(self) -> Service:
        """A multi-host service's numbers make whole hosts of aligned blocks, its pins live in
        `dataParallel.memberPins`, and it sets none of the NIC variables itself."""
        dp = self.data_parallel
        if dp is None:
            return self
        problems = dp.problems(self.tensor_parallel_size)
        own = {"replicas": self.replicas if self.replicated else None, "host": self.host, "devices": self.devices}
        own |= {k.key: getattr(self, k.key) for k in KINDS}
        pinned = [k for k, v in own.items() if v is not None]
        if pinned:
            problems.append(
                f"a service with dataParallel is one group of members, one per host: it takes no {', '.join(pinned)} "
                "(pin each member under dataParallel.memberPins; replicas of a multi-host service are not supported)"
            )
        if self.memory_fraction == "auto":
            problems.append("memoryFraction auto is not chosen for a service with dataParallel yet: set the fraction")
        if self.hosts is not None and len(set(self.hosts)) < dp.hosts:
            problems.append(
                f"hosts lists {len(set(self.hosts))} host(s), fewer than the {dp.hosts} its dataParallel needs "
                f"(size {dp.size} / perHost {dp.per_host})"
            )
        problems += nic_env_problems(self.env)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _replicas_agree(self) -> Service:
        """`host` or `hosts`, not both; `replicaPins`, `router`, `routerPort` and `routerMetricsPort`
        only with `replicas` above 1; a replicated service pins each replica under `replicaPins` (at most
        `replicas` entries, each with `tensorParallelSize` devices), never at its top level."""
        replicated = self.replicated
        problems = []
        if self.host is not None and self.hosts is not None:
            problems.append("set host or hosts, not both")
        if not replicated:
            owned = {"replicaPins": self.replica_pins, "router": self.router}
            owned |= {k.key: getattr(self, k.key) for k in ROUTER_KINDS}
            problems += [f"{k} needs replicas above 1" for k, v in owned.items() if v is not None]
        else:
            pins = {"host": self.host, "devices": self.devices} | {k.key: getattr(self, k.key) for k in KINDS}
            pinned = [k for k, v in pins.items() if v is not None]
            if pinned:
                problems.append(
                    f"a service with replicas pins each replica under replicaPins, not {', '.join(pinned)} "
                    "(they would put every replica on the same cards and ports)"
                )
            if self.replica_pins is not None and len(self.replica_pins) > self.replicas:
                problems.append(f"replicaPins has {len(self.replica_pins)} entries for {self.replicas} replicas")
        problems += card_count_problems(self.replica_pins, self.tensor_parallel_size)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def replicated(self) -> bool:
        """Its replicas run behind a router (`replicas` above 1)."""
        return naming.replicated(self.replicas)

    def replica_names(self, name: str | None = None) -> list[str]:
        """The containers of the service: its own name, or `<name>-1` ... `<name>-N`; `name`: those
        it had under a previous name."""
        return naming.container_names(name or self.name, self.replicas)

    @property
    def original_name(self) -> str:
        """The name its containers were created with, and keep across renames: the first of
        `previousNames`, else `name`."""
        return naming.original_name(self.name, self.previous_names)

    def names(self, name: str | None = None) -> list[str]:
        """The service's name and those of its replicas and router, members, or role instances and proxy;
        `name`: under that name."""
        if self.disaggregated is not None:
            roles = {role: r.replicas for role, r in self.disaggregated.roles()}
            return naming.disaggregated_names(name or self.name, roles)
        members = self.data_parallel.hosts if self.data_parallel else 0
        return naming.implied_names(name or self.name, self.replicas, members)

    def old_names(self) -> list[str]:
        """Every name the service, its replicas and its router had under its previous names."""
        return [n for old in self.previous_names or () for n in self.names(old)]

    @model_validator(mode="after")
    def _pins_agree(self) -> Service:
        """`devices` pins `tensorParallelSize` cards, none twice; a pinned range starts at 1024 or
        above; no HCCL socket range is pinned with `hcclPortRanges: false`."""
        problems = []
        if self.devices is not None:
            if len(self.devices) != self.tensor_parallel_size:
                problems.append(
                    f"devices {self.devices} pins {len(self.devices)} cards but "
                    f"tensorParallelSize is {self.tensor_parallel_size}"
                )
            if len(set(self.devices)) != len(self.devices):
                problems.append(f"devices {self.devices} lists a card twice")
        for kind in KINDS:
            pinned = getattr(self, kind.key)
            if isinstance(pinned, PortRange) and pinned.first < 1024:
                problems.append(f"{kind.key} {pinned} starts below 1024")
            if pinned is not None and kind.hccl_range and not self.hccl_port_ranges:
                problems.append(f"hcclPortRanges is false but {kind.key} is pinned")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _fixed_kv_cache(self) -> Service:
        """`kvCacheGiB` sets the fraction too, so not with `memoryFraction`; it needs the profile's weights,
        and a model that keeps a KV cache."""
        if self.kv_cache_gi_b is None:
            return self
        problems = []
        if "memory_fraction" in self.model_fields_set:
            problems.append(
                f"kvCacheGiB {self.kv_cache_gi_b} sets --gpu-memory-utilization too (the smallest fraction that "
                "covers weights, runtimeOverheadGiB and the cache): remove memoryFraction"
            )
        if self.profile is None:
            problems.append("kvCacheGiB needs the model's profile (profile: weightBytes, ...): the fraction covers its weights")
        elif self.profile.attention == "encoder":
            problems.append("kvCacheGiB: an encoder-only model keeps no KV cache (profile attention: encoder)")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _auto_is_sized(self) -> Service:
        """`memoryFraction: auto` needs a `profile` (a hybrid's with its Gated DeltaNet fields) and,
        but for an encoder, `maxModelLen`."""
        if self.memory_fraction == "auto":
            if self.profile is None:
                raise ValueError("memoryFraction auto needs the model's profile (profile: weightBytes, ...)")
            if self.profile.attention == "hybrid" and not self.profile.gated_delta_net:
                raise ValueError(
                    "memoryFraction auto cannot size a hybrid model without its Gated DeltaNet fields "
                    "(profile: linearNumKeyHeads, ...): set the fraction"
                )
            if self.profile.attention != "encoder" and self.max_model_len is None:
                raise ValueError("memoryFraction auto needs maxModelLen: the fraction is sized to hold it")
        return self


def _policy_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for k in KINDS:
        fields[k.base_key] = (Port, Field(default=k.base, description=f"First port of the `{k.key}` windows: {k.doc}."))
        if k.count_key:
            fields[k.count_key] = (PortCount, Field(default=k.size, description=f"Ports per `{k.key}` window."))
    # A group's and a role instance's own windows, left out of the fleet's hash at their defaults (FleetConfig.fleet_hash).
    for k in (DP_RPC, KV_PORT):
        fields[k.base_key] = (Port, Field(
            default=k.base, exclude_if=lambda v, base=k.base: v == base,
            description=f"First port of the `{k.key}` windows: {k.doc}.",
        ))  # fmt: skip
    return fields


_WindowPolicy: type[Model] = create_model("_WindowPolicy", __base__=Model, **_policy_fields())


class Ports(_WindowPolicy):
    """`ascend-fleet:ports`: where the allocator takes each kind of window from, per host.

    Every window of every service on a host is disjoint from every other, whatever its kind.
    """

    reserved: list[PortRange] = [PortRange(first=60000, last=60031)]
    """Ports never handed out on any host: single ports (`22`), `"a-b"` strings or `[a, b]`.
    Default: HCCL's default host window 60000-60031, kept free for processes outside the plan."""
    ephemeral: PortRange = Field(default=PortRange(first=EPHEMERAL[0], last=EPHEMERAL[1]), exclude_if=lambda v: v.window == EPHEMERAL)
    """The hosts' `net.ipv4.ip_local_port_range` (`sysctl net.ipv4.ip_local_port_range`), where the kernel
    picks the ports vLLM leaves to it. No window of a member of a multi-host service, which binds on the host
    network, is handed out or pinned in it. Default Linux's, 32768-60999."""

    def base(self, kind: WindowKind) -> int:
        return getattr(self, kind.base_key)

    def size(self, kind: WindowKind) -> int:
        return getattr(self, kind.count_key) if kind.count_key else kind.size


class Ssh(Model):
    """`ascend-fleet:ssh`: how Pulumi, the host checks and `doctor` reach the hosts."""

    identity_file: str | None = None
    """Private key file (`ssh -i`). The key itself can be given as the secret `ascend-fleet:sshPrivateKey`."""
    known_hosts_file: str | None = None
    """`UserKnownHostsFile`; default: ssh's own."""
    strict_host_key_checking: Literal["yes", "accept-new", "no"] = "yes"
    """`StrictHostKeyChecking`: keep `yes` in production."""
    connect_timeout_seconds: Whole = Field(default=10, ge=1, le=300)
    """`ConnectTimeout`: an unreachable host costs this long, not minutes."""


EXPORTER_CONTAINER = "ascend-fleet-npu-exporter"
"""The NPU exporter's container on every host (records.exporter)."""
EXPORTER_PORTS = (1025, 40000)
"""The ports MindCluster NPU Exporter accepts (Ascend/mind-cluster component/npu-exporter
cmd/npu-exporter/main.go: `portLeft`, `portRight`; it exits on any other)."""


class NpuExporter(Model):
    """`ascend-fleet:metrics.npuExporter`: deploy MindCluster's NPU Exporter on every host in use."""

    image: Image
    """The exporter's image, which the operator builds (there is no public one: MindCluster's own
    DaemonSet runs a local `npu-exporter:v5.0.RC1` with `imagePullPolicy: Never`), e.g. pushed to the
    registry the hosts pull from, or loaded on every host. Pulled like the services' images."""


class Metrics(Model):
    """`ascend-fleet:metrics`: what `render --format prometheus` writes for Prometheus and Grafana."""

    npu_exporter_port: AnyPort = 8082
    """Port of each host's NPU exporter (MindCluster NPU Exporter's default). Reserved on every host:
    no window is handed out over it, and a pinned window over it is refused. With `npuExporter` set,
    the exporter the fleet deploys listens there, so it must be in 1025-40000."""
    npu_exporter: NpuExporter | None = None
    """Deploy MindCluster's NPU Exporter, one container per host in use
    ([NPU exporter](metrics.md#npu-exporter)). Off by default: the operator must provide its image."""
    scrape_interval_seconds: Whole = Field(default=15, ge=1, le=75)
    """How often Prometheus scrapes every target. At most 75: the alert rules' shortest range is
    `[5m]`, and `rate()` over it needs several samples (four at 75 s) to be anything but empty."""
    ttft_p95_seconds: Number = Field(default=Decimal(10), gt=0, le=3600)
    """The alert threshold of a service's 95th-percentile time to first token."""

    @model_validator(mode="after")
    def _exporter_port(self) -> Metrics:
        """With `npuExporter` set, `npuExporterPort` is in 1025-40000, the only ports the exporter accepts."""
        first, last = EXPORTER_PORTS
        if self.npu_exporter is not None and not first <= self.npu_exporter_port <= last:
            raise ValueError(
                f"npuExporterPort {self.npu_exporter_port} cannot be the deployed NPU exporter's port: "
                f"MindCluster NPU Exporter accepts only {first}-{last} and exits on any other port; "
                f"set metrics.npuExporterPort within {first}-{last}, or remove metrics.npuExporter"
            )
        return self


class Shards(Model):
    """`ascend-fleet:shards`: the fleet is deployed as shards, each a stack of its own that owns a
    set of hosts (docs/shards.md). Every shard plans the whole fleet and deploys its hosts' slice."""

    size: Whole = Field(default=50, ge=1, le=1000)
    """At most this many hosts per shard: one docker provider process per host runs during a shard's
    `pulumi up`, and its state grows with its hosts."""


class ShardOf(Model):
    """`ascend-fleet:shardOf`, written by `python -m allocation shards` into each shard's stack file:
    which fleet the file was cut from, which shard it deploys, and the hash of both with the fleet at
    that time. A shard file refuses to deploy when edited by hand, cut from another version of the
    fleet, or run in any stack but `<fleet>-shard-<index>`."""

    fleet: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,100}$")]
    """The fleet's stack name (its file is `Pulumi.<fleet>.yaml`)."""
    index: Whole = Field(ge=0, le=9999)
    """The shard this stack deploys: the hosts whose `shard` is this."""
    fleet_hash: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    """sha256 of what the shard deploys: the fleet's keys as the program reads them (`shardOf` left
    out), the fleet's name and the shard's index."""


class FleetConfig(Model):
    """Everything under the `ascend-fleet:` namespace of one stack."""

    stack: str = Field(exclude=True)
    defaults: Defaults = Defaults()
    """Settings applied to every service unless it overrides them."""
    hosts: list[Host] = Field(min_length=1)
    """The Ascend hosts of the stack."""
    services: list[Service] = []
    """The model services of the stack."""
    ports: Ports = Ports()
    """Port policy: where each kind of port comes from."""
    memory_budget: Fraction = DEFAULT_MEMORY_BUDGET
    """Per-card ceiling on the sum of memory fractions of the services sharing a card."""
    ssh: Ssh = Ssh()
    """SSH client settings."""
    metrics: Metrics = Metrics()
    """Prometheus targets, alert thresholds and the dashboard."""
    pull_timeout_minutes: Whole = Field(default=60, ge=1, le=1440)
    """How long `pulumi up` may take to pull one image onto a host."""
    runtime_overhead_gi_b: Number = Field(default=DEFAULT_RUNTIME_OVERHEAD_GIB, ge=0, le=1024, alias="runtimeOverheadGiB")
    """Per-card allowance, in the capacity check, for vLLM's activation peak and non-torch memory."""
    docker_engine: DockerEngine = DEFAULT_DOCKER_ENGINE
    """The Docker Engine version the hosts run unless a host sets its own `dockerEngine`; a quoted
    string, e.g. `"20.10"` or `"28.5"`. Declared, not asked of a live host, so the plan never depends
    on one; the host check compares it with `docker version` on each host. Default `"20.10"`: Debian
    12's docker.io (the engine the simulated host runs) and the oldest engine the program supports;
    declaring an old engine is safe on a new one (the short probe interval works everywhere), while a
    new engine declared on an old one would be dropped silently."""
    shards: Shards | None = None
    """Deploy the fleet as shards of at most `shards.size` hosts, each its own stack (README
    "Shards"). The stack that sets it is the fleet: it is planned and pinned, never deployed itself."""
    shard_of: ShardOf | None = None
    """Set only in a shard's stack file, by `python -m allocation shards`; never by hand."""
    health_start_interval_seconds: Whole = Field(default=2, ge=0, le=30)
    """How soon after a model is ready its container turns healthy. Docker Engine 25 and later probe
    every this many seconds while the container starts (`start_interval`), then every 30 s as before;
    older engines have no `start_interval`, so their containers probe every this many seconds for
    their whole life (one HTTP GET on loopback each), with more retries so that a hung server is still
    marked unhealthy after about 120 s
    ([Time to serving](deploying.md#time-to-serving-health-probes-per-docker-engine)). `0` turns it
    off: every container probes every 30 s from its start, as before (up to 30 s between ready and
    healthy)."""
    target: Target = DEFAULT_TARGET
    """Where the plan runs: `docker` (each host's Docker daemon over SSH) or `kubernetes` (a cluster,
    with the `kubernetes` settings; [Running on Kubernetes](kubernetes.md)). The plan is the same for
    both: only what `pulumi up` creates changes."""
    kubernetes: Kubernetes = Kubernetes()
    """How the Kubernetes target runs the plan; read only when `target` is `kubernetes`."""

    @property
    def fleet_name(self) -> str:
        """The fleet's name: the stack's, or for a shard's stack the fleet it was cut from. Containers
        are labelled with it, so a host moved between shards (`move-host`) keeps its inputs."""
        return self.stack if self.shard_of is None else self.shard_of.fleet

    def fleet_hash(self) -> str:
        """sha256 of the fleet as validated, `shardOf` left out: equal for a fleet's stack file and
        every shard file cut from it, whatever YAML spelling each uses for the same values."""
        # The target's keys count once written, so a fleet that never names them keeps its hash.
        unset = {"target", "kubernetes"} - self.model_fields_set
        text = self.model_dump_json(by_alias=True, exclude={"shard_of", *unset})
        return hashlib.sha256(text.encode()).hexdigest()

    def shard_hash(self, fleet: str, index: int) -> str:
        """sha256 of what shard `index` of fleet `fleet` deploys: the fleet's hash, its name (every
        container's label) and the index (which hosts). A shard file whose index or fleet name was
        edited by hand no longer matches the hash it carries."""
        return hashlib.sha256(json.dumps([fleet, index, self.fleet_hash()]).encode()).hexdigest()

    @model_validator(mode="after")
    def _shard_of_its_fleet(self) -> FleetConfig:
        cut = self.shard_of
        if cut is None:
            return self
        bound = naming.shard_stack(cut.fleet, cut.index)
        if self.stack != bound:
            raise ValueError(
                f"this file is shard {cut.index} of fleet {cut.fleet} (shardOf), which only stack {bound} deploys, "
                f"not stack {self.stack}: run `pulumi up` on stack {bound}; stack {self.stack}'s own file is written "
                f"by `python -m allocation shards --stack {cut.fleet}` (a shard file copied or edited by hand would "
                "deploy another shard's hosts, or delete this stack's containers)"
            )
        if self.shards is None:
            raise ValueError(
                f"shardOf names fleet {cut.fleet}, but this stack holds no ascend-fleet:shards: a shard's file "
                f"holds its whole fleet; write it with `python -m allocation shards --stack {cut.fleet}`"
            )
        now = self.shard_hash(cut.fleet, cut.index)
        if now != cut.fleet_hash:
            raise ValueError(
                f"shardOf says this file was cut as shard {cut.index} of fleet {cut.fleet} at hash {cut.fleet_hash[:12]}, "
                f"but the shard it holds hashes to {now[:12]}: a shard's file is written by `python -m allocation "
                f"shards --stack {cut.fleet}`, never by hand; change Pulumi.{cut.fleet}.yaml and run that command "
                "again (files cut before the hash covered the fleet's name and the shard's index, 2026-12-05, need "
                "that once too)"
            )
        return self

    @model_validator(mode="after")
    def _kubernetes_service_names(self) -> FleetConfig:
        """On Kubernetes each service is reached through a Service, whose name the API server accepts
        only when it starts with a letter (an RFC 1035 label)."""
        bad = [s.name for s in self.services if not s.name[0].isalpha()] if self.target == "kubernetes" else []
        if bad:
            raise ValueError(
                f"target is kubernetes, where each service becomes a Service named after it, and a Service's "
                f"name must start with a letter: rename {', '.join(bad)} (previousNames keeps the old name)"
            )
        return self

    def docker_engine_of(self, host: Host) -> str:
        """The engine version declared for `host`: its own, else the fleet's."""
        return host.docker_engine or self.docker_engine

    @model_validator(mode="after")
    def _references(self) -> FleetConfig:
        """Host names, service names, host addresses and `dockerHost`s each used once; no replica or
        router name is a service's; `previousNames` each listed once in the stack and none a current
        service's, replica's or router's name; every host a service names exists, with the cards it
        pins and at least `tensorParallelSize` NPUs."""
        problems = []
        same_machine = " (two hosts on one machine would both get card 0 and the same ports)"
        for what, names, why in (
            ("host name", [h.name for h in self.hosts], ""),
            ("service name", [s.name for s in self.services], ""),
            ("host address", [h.address.lower() for h in self.hosts], same_machine),
            ("dockerHost", [h.docker_url() for h in self.hosts], same_machine),
        ):
            dupes = sorted(n for n, count in Counter(names).items() if count > 1)
            problems += [f"{what} {n!r} is used more than once{why}" for n in dupes]
        services = {s.name for s in self.services}
        problems += [
            f"service {s.name}: its container {n} has the name of another service; rename one"
            for s in self.services
            for n in s.names()[1:]
            if n in services
        ]
        problems += _previous_name_problems(self.services)
        if self.metrics.npu_exporter is not None and EXPORTER_CONTAINER in services:
            problems.append(
                f"service {EXPORTER_CONTAINER}: its container would have the name of the NPU exporter's "
                "(metrics.npuExporter); rename the service"
            )
        hosts = {h.name: h for h in self.hosts}
        for s in self.services:
            for what, name, devices in _host_references(s):
                host = hosts.get(name)
                if host is None:
                    problems.append(
                        f"service {s.name}: {what}unknown host '{name}'{suggest(name, hosts)}; "
                        f"hosts are {', '.join(sorted(hosts))}"
                    )
                    continue
                if s.tensor_parallel_size > host.npus and what != "router.host: ":
                    problems.append(
                        f"service {s.name}: tensorParallelSize {s.tensor_parallel_size} is larger "
                        f"than host {host.name}'s {host.npus} NPUs"
                    )
                elif s.data_parallel and s.data_parallel.per_host * s.tensor_parallel_size > host.npus:
                    problems.append(
                        f"service {s.name}: dataParallel.perHost {s.data_parallel.per_host} x tensorParallelSize "
                        f"{s.tensor_parallel_size} is more cards than host {host.name}'s {host.npus} NPUs"
                    )
                bad = [d for d in devices if d >= host.npus]
                if bad:
                    problems.append(
                        f"service {s.name}: {what}devices {bad} do not exist on host {host.name} "
                        f"(cards 0-{host.npus - 1})"
                    )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def host(self, name: str) -> Host:
        return self._hosts_by_name[name]

    @cached_property
    def _hosts_by_name(self) -> dict[str, Host]:
        """Looked up once per service and router: a scan of 1,300 hosts each time was a fifth of `plan`."""
        return {h.name: h for h in self.hosts}

    def budget(self, host: Host) -> Decimal:
        return host.memory_budget if host.memory_budget is not None else self.memory_budget

    @model_validator(mode="after")
    def _nic_env_is_the_plans(self) -> FleetConfig:
        """The defaults' `env` reaches every service: with a multi-host or disaggregated service in the stack
        it sets none of the NIC variables the plan sets from each host's `nic`."""
        on_nic = any(s.data_parallel or s.disaggregated for s in self.services)
        problems = nic_env_problems(self.defaults.env) if on_nic else []
        if problems:
            raise ValueError("defaults: " + "; ".join(problems))
        return self

    @model_validator(mode="after")
    def _disaggregated_defaults(self) -> FleetConfig:
        """The defaults' `args` reach every service: with a disaggregated service in the stack they set none of
        the options its plan owns."""
        problems = owned_arg_problems(self.defaults.args) if any(s.disaggregated for s in self.services) else []
        if problems:
            raise ValueError("defaults: " + "; ".join(problems))
        return self

    @model_validator(mode="after")
    def _args_read_as_vllm_reads_them(self) -> FleetConfig:
        """Each service's `args` (the defaults' then its own) are read once here as vLLM reads them
        (`allocation.vllm_args`), so every later reader of them can trust they read."""
        problems = []
        for s in self.services:
            try:
                read_args([*(self.defaults.args or ()), *(s.args or ())])
            except ArgsError as exc:
                problems.append(f"service {s.name}: args: {exc}")
        if problems:
            raise ValueError("; ".join(problems))
        return self


QUOTED_NUMBER_KEYS = frozenset(f.alias or n for n, f in FleetConfig.model_fields.items() if holds_number(f))
"""Top-level keys holding a number. Pulumi hands the program every top-level value as text, so there
`90` and `"90"` are one value (allocation.scalars); the schema says so."""


def read_top_level(key: str, text: str) -> Any:
    """The program's reading of the text Pulumi hands it for the top-level key `key` (namespace
    stripped); `plan` reads a stack file's top-level values through it too (cli.stackfile)."""
    if key in VERBATIM_KEYS:
        return text
    return top_level_value(text, number=key in QUOTED_NUMBER_KEYS)


def _previous_name_problems(services: list[Service]) -> list[str]:
    """`previousNames` that would alias two resources to one old one: a name listed twice, one (or an
    old replica or router name it implies) that another service, replica or router has now, or one
    that another service's previous name implies (`old` with replicas implies the names of its old
    replicas and router, allocation.names). A service's own names may be listed first: a rename back."""
    current = {n for s in services for n in s.names()}
    problems, seen = [], {}
    claimed: dict[str, tuple[str, str]] = {}  # an old name -> (the service, the previous name giving it)
    for s in services:
        for old in s.previous_names or ():
            if old in seen:
                problems.append(f"service {s.name}: previousNames lists {old}, which service {seen[old]} lists too")
            seen.setdefault(old, s.name)
            for n in s.names(old):
                owner, given = claimed.setdefault(n, (s.name, old))
                if owner != s.name and given != old:  # the same previous name twice is reported above
                    implier, lister = ((owner, given), s.name) if given != n else ((s.name, old), owner)
                    problems.append(
                        f"service {s.name}: previousNames {implier[1]} of service {implier[0]} implies {n} "
                        f"(an old replica or router), which service {lister} lists under previousNames; "
                        "two resources would alias one old container"
                    )
        own = set(s.names()) if naming.renamed_back(s.name, s.previous_names) else set()
        taken = sorted({n for n in s.old_names() if n in current} - own)
        problems += [
            f"service {s.name}: previousNames gives {n}, the name of a current service, replica or router; "
            "a previous name must be one no container has now, or, for a rename back, the service's own "
            "name listed first, before the names it had since"
            for n in taken
        ]
    return problems


def _host_references(s: Service) -> list[tuple[str, str, list[int]]]:
    """Every host a service names, with where it names it (a message prefix) and the cards pinned there."""
    refs = [("", s.host, s.devices or [])] if s.host else []
    refs += [("hosts: ", name, []) for name in s.hosts or ()]
    for i, rp in enumerate(s.replica_pins or (), start=1):
        if rp.host is not None:
            refs.append((f"replicaPins entry {i}: ", rp.host, rp.devices or []))
    for i, mp in enumerate(s.data_parallel.member_pins or () if s.data_parallel else (), start=1):
        if mp.host is not None:
            refs.append((f"dataParallel.memberPins entry {i}: ", mp.host, mp.devices or []))
    if s.router is not None and s.router.host is not None:
        refs.append(("router.host: ", s.router.host, []))
    for role, r in s.disaggregated.roles() if s.disaggregated else ():
        for i, rp in enumerate(r.replica_pins or (), start=1):
            if rp.host is not None:
                refs.append((f"disaggregated.{role}.replicaPins entry {i}: ", rp.host, rp.devices or []))
    if s.disaggregated is not None and s.disaggregated.proxy.host is not None:
        refs.append(("disaggregated.proxy.host: ", s.disaggregated.proxy.host, []))
    return refs


def parse_fleet(stack: str, values: Mapping[str, Any]) -> FleetConfig:
    """Validate the `ascend-fleet:` values of a stack (namespace stripped) into a FleetConfig.

    Raises ConfigError listing every problem at once, each with its location.
    """
    if not StackName.fullmatch(stack):
        raise ConfigError(f"stack name {stack!r} is not a stack name: {STACK_NAME_RULE}")
    known = set(field_aliases(FleetConfig)) - {"stack"}
    problems = unknown_keys(values, known, PROGRAM_ONLY_KEYS, NAMESPACE)
    data = {k: v for k, v in values.items() if k in known}
    try:
        fleet = FleetConfig.model_validate({"stack": stack, **data})
    except ValidationError as exc:
        problems += validation_problems(exc, values, FleetConfig, NAMESPACE)
    else:
        if not problems:
            return fleet
    raise ConfigError(f"stack {stack}: invalid configuration: " + listing(problems) + ".")
