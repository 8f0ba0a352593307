"""GroupMember: one member of a multi-host service, i.e. one docker container on its host.

Built from the member's record (records.group) as ModelService is from a service's: the same container
arguments and options, on Docker's host network with nothing published. No member depends on another:
vLLM's leader waits for its followers' engines in its handshake (vllm v0.20.2 `v1/engine/utils.py`
`wait_for_engine_startup`) and a follower joins the leader's RPC port as soon as it is bound, so the
members are created side by side and each `wait`s until the group serves (a follower's health check
asks the leader's /health). A change to any member re-creates them all: their group-digest label.
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_docker as docker

from components.ascend_host import AscendHost
from components.model_service import model_container, renamed
from records.group import MemberDeployment


class GroupMember(pulumi.ComponentResource):
    container: docker.Container
    summary: dict

    def __init__(
        self, name: str, md: MemberDeployment, host: AscendHost, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        renames = pulumi.ResourceOptions(aliases=renamed(md.earlier_names))
        super().__init__("ascend-fleet:index:GroupMember", name, None, pulumi.ResourceOptions.merge(opts, renames))
        self.container = model_container(name, md.spec, self, host, list(host.ready), md.earlier_names)
        endpoint = md.group.endpoint
        # Derived from the container so that it exists once the container does.
        self.summary = {"endpoint": self.container.name.apply(lambda _: endpoint), **md.summary()}
        self.register_outputs(self.summary)
