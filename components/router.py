"""Router: the vLLM router in front of a replicated service's replicas, on one host, and the
steps that replace those replicas one at a time.

Its image is built on the host by a script (the service's image plus the pinned wheel;
`records.router`), which prints the image id; the container runs that id, so a rebuilt
image replaces it. Its worker list is a file on the host written by a second script
(`records.rollout.workers_script`), which the container reads at start: scaling rewrites
the file and reconciles the running router, and changes nothing of the container. The
container is created after the first replica is healthy: the router exits when no worker answers.

Per replica a "serves" step (`<replica>-serves`) re-registers it in the router and waits until
the router lists it healthy; the next replica's container depends on it (`Rollout`), so an image
upgrade takes one replica down at a time and a new image that never serves stops the chain.
"""

from __future__ import annotations

import asyncio
from typing import Optional, Sequence

import pulumi
import pulumi_docker as docker

from records.deployment import RouterDeployment, ServiceDeployment, previous_replicas
from allocation.windows import ROUTER_KINDS
from components.ascend_host import AscendHost, script
from components.model_service import ModelService, container_args, container_options, renamed


SERVES_SUFFIX = "-serves"
"""A replica's serves step is named after it: `<replica>-serves`."""


class Rollout:
    """Which serves step each replica's container waits for: its predecessor's.

    Replica containers are declared before the routers that make those steps, so a replica gets
    a future of its predecessor's step, set when its router is built; the SDK accepts any awaitable
    in `depends_on` and sends the step's URN, known once the engine has run the step (a resource
    option, never an input: adding the wait replaces nothing). Replicas are their deployment records."""

    def __init__(self, routers: Sequence[RouterDeployment]) -> None:
        loop = asyncio.get_running_loop()
        self._steps = {sd: loop.create_future() for rd in routers for sd in rd.replicas}
        self._previous = previous_replicas(routers)

    def waits_for(self, replica: ServiceDeployment) -> list[asyncio.Future]:
        """What the container of `replica` depends on beyond its host: its predecessor serving again."""
        previous = self._previous.get(replica)
        return [self._steps[previous]] if previous is not None else []

    def served(self, replica: ServiceDeployment, step: pulumi.Resource) -> None:
        self._steps[replica].set_result(step)


class Router(pulumi.ComponentResource):
    container: docker.Container
    summary: dict

    def __init__(
        self,
        name: str,
        rd: RouterDeployment,
        host: AscendHost,
        replicas: Sequence[ModelService],
        rollout: Rollout,
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> None:
        previous = rd.earlier_names
        renames = pulumi.ResourceOptions(aliases=renamed(previous))
        super().__init__("ascend-fleet:index:Router", name, None, pulumi.ResourceOptions.merge(opts, renames))
        spec = rd.spec
        build = script(
            f"{name}-image",
            rd.build_script,
            host.connection,
            pulumi.ResourceOptions(
                parent=self, depends_on=[host.images[rd.base_image]], aliases=renamed(previous, "-image")
            ),
        )
        host.router_image_built(rd.name, build)  # a takeover on the host waits for it, as for a pull
        image_id = build.stdout.apply(lambda out: out.strip().splitlines()[-1])
        # Updated in place when replicas come or go: the file and the running router change, the container does not.
        after_build = pulumi.ResourceOptions(parent=self, depends_on=[build], aliases=renamed(previous, "-workers"))
        workers = script(f"{name}-workers", rd.workers_script, host.connection, after_build)
        self.container = docker.Container(
            f"{name}-container",
            container_args(spec, image_id),
            opts=container_options(spec, self, host, [*host.ready, workers, replicas[0].container], previous),
        )
        for handover, sd, replica in zip(rd.handovers, rd.replicas, replicas, strict=True):
            step = script(
                handover.replica + SERVES_SUFFIX,
                handover.serve_script,
                host.connection,
                # Delete before replace: the drain of the old step must not follow the new step's registration.
                pulumi.ResourceOptions(
                    parent=self,
                    depends_on=[replica.container, self.container, workers],
                    delete_before_replace=True,
                    aliases=renamed(sd.earlier_names, SERVES_SUFFIX),
                ),
                delete=handover.drain_script,
                # A re-created replica is a new container id: the step runs again.
                triggers=[replica.container.id],
            )
            rollout.served(sd, step)
        endpoint = rd.endpoint
        plan = rd.plan
        self.summary = {
            "endpoint": self.container.name.apply(lambda _: endpoint),
            "host": plan.host_name,
            **{k.key: k.value(plan.windows[k.key]) for k in ROUTER_KINDS},
            "replicas": [sd.name for sd in rd.replicas],
        }
        self.register_outputs(self.summary)
