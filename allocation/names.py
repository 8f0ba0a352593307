"""Every name a service implies, built in one place.

A configured service becomes one container named after it, or, with `replicas` above 1, one
container per replica (`<name>-1` ... `<name>-N`) behind a router (`<name>-router`). A renamed
service keeps its containers under the first of its `previousNames` (the docker provider re-creates
a container whose name changes) and aliases its Pulumi resources to every name they had. These
names are the keys that join the layers (placement, records, components, the plan JSON and the
diff), so, as Terraform's `internal/addrs` owns every address, this module owns their rules: no
other module joins a suffix or an index to a name, or reads one back (tests/test_names.py holds
that). The plan JSON says what each entry is (`kind`), so a reader never parses a name. Pure.
"""

from __future__ import annotations

from typing import Sequence

SERVICE, REPLICA, ROUTER = "service", "replica", "router"
"""The plan JSON's `kind` of an entry: a service of its own, one replica of a replicated service,
or the router in front of a replicated service's replicas."""
GROUP, MEMBER = "group", "member"
"""The plan JSON's `kind` of a multi-host service (its `groups` entry) and of each of its members."""
DISAGGREGATED, ROLE, PROXY = "disaggregated", "role", "proxy"
"""The plan JSON's `kind` of a disaggregated service (its `disaggregated` entry), of each prefill or decode
instance, and of its proxy."""
KINDS = (SERVICE, REPLICA, ROUTER)

_ROUTER_SUFFIX = "-router"


def replicated(replicas: int) -> bool:
    """Replicas above 1 run behind a router, each named `<name>-<i>`; one is the service itself."""
    return replicas > 1


def instance_kind(index: int) -> str:
    """The `kind` of an instance: replica number `index` (1 to N), or a service of its own (0)."""
    return REPLICA if index else SERVICE


def instance_name(service: str, index: int) -> str:
    """Replica number `index` of `service` (1 to N), or the service itself (0)."""
    return f"{service}-{index}" if index else service


def instance_indexes(replicas: int) -> range:
    """The indexes of a service's instances: 1 to N for a replicated service, 0 for one of its own."""
    return range(1, replicas + 1) if replicated(replicas) else range(1)


def container_names(service: str, replicas: int) -> list[str]:
    """The containers of a service: its own name, or `<service>-1` ... `<service>-N`."""
    return [instance_name(service, i) for i in instance_indexes(replicas)]


def router_name(service: str) -> str:
    """The router of a replicated service: its component's name, and its container's under the
    service's original name."""
    return service + _ROUTER_SUFFIX


def implied_names(service: str, replicas: int, members: int = 0) -> list[str]:
    """Every name a service gives a resource: its own, and its replicas' and router's when replicated,
    or its members' when it spans `members` hosts."""
    if members:
        return [service, *member_names(service, members)]
    if not replicated(replicas):
        return [service]
    return [service, *container_names(service, replicas), router_name(service)]


def member_name(service: str, index: int) -> str:
    """Member number `index` (0 the leader) of a multi-host service: `<service>-node<index>`, its
    container on that host. vLLM numbers the hosts of a multi-node launch as nodes (`--node-rank`)."""
    return f"{service}-node{index}"


def member_names(service: str, members: int) -> list[str]:
    """The members of a multi-host service over `members` hosts, the leader first."""
    return [member_name(service, i) for i in range(members)]


def role_name(service: str, role: str) -> str:
    """The instances of role `role` (`prefill`, `decode`) of a disaggregated service are named as the replicas
    of a service of this name: `<service>-<role>`, or `<service>-<role>-1` ... with more than one."""
    return f"{service}-{role}"


def proxy_name(service: str) -> str:
    """The proxy in front of a disaggregated service's instances."""
    return f"{service}-proxy"


def disaggregated_names(service: str, roles: dict[str, int]) -> list[str]:
    """Every name a disaggregated service gives a resource: its own, each role's instances (`roles`: role ->
    replicas) and its proxy."""
    instances = [n for role, replicas in roles.items() for n in container_names(role_name(service, role), replicas)]
    return [service, *instances, proxy_name(service)]


def original_name(name: str, previous: Sequence[str] | None) -> str:
    """The name a resource's container was created with and keeps across renames: the first
    previous name, else the current one. A rename back (`a` to `b` and back to `a`) lists the whole
    history, `previousNames: [a, b]`, so the container keeps `a`."""
    return previous[0] if previous else name


def renamed_back(name: str, previous: Sequence[str] | None) -> bool:
    """`previousNames` spells a rename back: the current name first, then the names it had since."""
    return bool(previous) and previous[0] == name and len(previous) > 1


def shard_stack(fleet: str, index: int) -> str:
    """The stack that deploys shard `index` of a fleet deployed as shards: `<fleet>-shard-<index>`.
    A shard's file names its fleet and index (`shardOf`), so the program refuses it in any other stack."""
    return f"{fleet}-shard-{index}"


def earlier_names(name: str, previous: Sequence[str]) -> list[str]:
    """The names a resource had and no longer has, oldest first: its Pulumi aliases. A rename back
    lists the current name among the previous ones; a resource is not an alias of itself."""
    return [p for p in dict.fromkeys(previous) if p != name]


def previous_instance_names(previous: Sequence[str] | None, index: int) -> tuple[str, ...]:
    """Instance `index`'s names under the service's previous names, oldest first."""
    return tuple(instance_name(p, index) for p in previous or ())


def previous_router_names(previous: Sequence[str] | None) -> tuple[str, ...]:
    """The router's names under the service's previous names, oldest first."""
    return tuple(router_name(p) for p in previous or ())
