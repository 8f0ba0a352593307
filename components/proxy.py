"""Proxy: the proxy in front of a disaggregated service's instances (vllm-ascend's example), one docker container.

Created after every prefill and decode instance of its service (`depends_on` their containers, each of which
`wait`s until its /health answers), so it starts once at least one prefiller and one decoder serve, as the
issue asks and the tutorials do by hand. A dependency, not an input: the proxy's container carries only the
plan's flags (every instance's address and API port), so it is re-created only when one of those changes.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_docker as docker

from components.ascend_host import AscendHost
from components.model_service import container_args, container_options, renamed
from records.disaggregated import ProxyDeployment


class Proxy(pulumi.ComponentResource):
    container: docker.Container
    summary: dict

    def __init__(
        self,
        name: str,
        pd: ProxyDeployment,
        host: AscendHost,
        instances: Sequence[docker.Container],
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> None:
        renames = pulumi.ResourceOptions(aliases=renamed(pd.earlier_names))
        super().__init__("ascend-fleet:index:Proxy", name, None, pulumi.ResourceOptions.merge(opts, renames))
        spec = pd.spec
        self.container = docker.Container(
            f"{name}-container",
            container_args(spec, host.images[spec.image].image_id),
            opts=container_options(spec, self, host, [*host.ready, *instances], pd.earlier_names),
        )
        endpoint = pd.endpoint
        self.summary = {
            "endpoint": self.container.name.apply(lambda _: endpoint),
            "prefill": [i.name for i in pd.instances if i.role == "prefill"],
            "decode": [i.name for i in pd.instances if i.role == "decode"],
        }
        self.register_outputs(self.summary)
