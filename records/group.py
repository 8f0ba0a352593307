"""A multi-host service deployed: one record per group, one per member, built once by `records.deployment`.

The group is the unit (docs/multi-host.md): vLLM's leader takes its followers only while the group
starts (vllm v0.20.2 `v1/engine/utils.py` `wait_for_engine_startup`), so a follower that restarts alone
never joins again, and the members must start, restart and stop together. The docker provider
re-creates a container whose labels change (terraform-provider-docker v4.5.0
`internal/provider/resource_docker_container.go`: `labels` is `ForceNew`), so every member carries
one label with a digest of every member's container: a change to any member's inputs changes every
member's label, and `pulumi up` re-creates the whole group, as `plan --against` says in one line.
Pure.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from types import MappingProxyType

from allocation import names
from allocation.plan import GroupPlan, MemberPlan, Plan
from allocation.windows import MEMBER_KINDS
from records.containers import LABEL_PREFIX, ContainerSpec, Site, member_health_url, member_spec

DIGEST_LABEL = f"{LABEL_PREFIX}.group-digest"
"""sha256 over every member's container (`ContainerSpec.to_json`, this label left out), leader first."""


@dataclass(frozen=True, eq=False)
class MemberDeployment:
    """One member of a multi-host service: its container on its host. Compared and hashed by identity,
    as `ServiceDeployment`."""

    plan: MemberPlan
    group: GroupPlan
    """The group it belongs to: the flags, leader and endpoint every member shares."""
    spec: ContainerSpec
    health_url: str
    """What its health check and start gate ask (`records.containers.member_health_url`): a follower
    its leader's /health."""

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def earlier_names(self) -> list[str]:
        """The names it had under the service's previous names and no longer has: its resources' aliases."""
        return names.earlier_names(self.name, self.plan.member.previous_names)

    def summary(self) -> dict[str, object]:
        """The member's stack output, as a service's: its host, cards and windows, and its group and role."""
        a = self.plan.assignment
        windows = {k.key: k.text(a.windows[k.key]) if k.key in a.windows else None for k in MEMBER_KINDS}
        return {"group": self.group.name, "role": self.plan.role, "host": a.host_name, "devices": list(a.cards), **windows}


@dataclass(frozen=True, eq=False)
class GroupDeployment:
    """A multi-host service: its members' deployments, the leader first, and where it answers."""

    plan: GroupPlan
    members: tuple[MemberDeployment, ...]
    digest: str
    """Every member's `DIGEST_LABEL`."""

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def endpoint(self) -> str:
        """The OpenAI-compatible base URL: the leader's, `http://address:apiPort/v1`."""
        return self.plan.endpoint


def group_digest(specs: tuple[ContainerSpec, ...]) -> str:
    """sha256 over the members' containers in member order, as their plan JSON writes them."""
    text = json.dumps([s.to_json() for s in specs], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def group_deployment(plan: Plan, group: GroupPlan) -> GroupDeployment:
    """The group's record and its members', each member's container labelled with the group's digest."""
    specs = tuple(member_spec(group, mp, Site.of(plan.fleet, mp.host)) for mp in group.members)
    digest = group_digest(specs)
    members = tuple(
        MemberDeployment(mp, group, _labelled(spec, digest), member_health_url(group, mp))
        for mp, spec in zip(group.members, specs)
    )
    return GroupDeployment(group, members, digest)


def _labelled(spec: ContainerSpec, digest: str) -> ContainerSpec:
    return replace(spec, labels=MappingProxyType({**spec.labels, DIGEST_LABEL: digest}))


def by_member(groups: tuple[GroupDeployment, ...]) -> dict[int, MemberDeployment]:
    """Every member's deployment, by the identity of its plan (`MemberPlan`)."""
    return {id(md.plan): md for g in groups for md in g.members}

