"""Router: the vLLM router in front of a replicated service's replicas, on one host.

Its image is built on the host by a script (the service's image plus the pinned wheel;
`allocation.router`), which prints the image id; the container runs that id, so a rebuilt
image replaces it. The container is created after the first replica is healthy: the router
exits when no worker answers.
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_docker as docker

from allocation.deployment import RouterDeployment
from components.ascend_host import AscendHost, script
from components.model_service import ModelService, container_args, container_options


class Router(pulumi.ComponentResource):
    container: docker.Container
    summary: dict

    def __init__(
        self,
        name: str,
        deployment: RouterDeployment,
        host: AscendHost,
        first: ModelService,
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> None:
        super().__init__("ascend-fleet:index:Router", name, None, opts)
        spec = deployment.spec
        build = script(
            f"{name}-image",
            deployment.build_script,
            host.connection,
            pulumi.ResourceOptions(parent=self, depends_on=[host.images[deployment.base_image]]),
        )
        image_id = build.stdout.apply(lambda out: out.strip().splitlines()[-1])
        self.container = docker.Container(
            f"{name}-container",
            container_args(spec, image_id),
            opts=container_options(spec, self, host.provider, [host.check, first.container]),
        )
        endpoint = deployment.endpoint
        plan = deployment.plan
        self.summary = {
            "endpoint": self.container.name.apply(lambda _: endpoint),
            "host": plan.host_name,
            "routerPort": plan.port,
            "routerMetricsPort": plan.metrics_port,
            "replicas": list(plan.replicas),
        }
        self.register_outputs(self.summary)
