"""NpuExporter: MindCluster's NPU Exporter on one host, for the Prometheus job `npu-exporter`.

Its container comes from the host's deployment record (`records.exporter`, which cites what the
exporter needs); like a model's, it runs the image id the host pulled, after the host check.
Nothing else depends on it: a failed exporter never holds back a model.
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_docker as docker

from components.ascend_host import AscendHost
from components.model_service import container_args, container_options
from records.containers import ContainerSpec


class NpuExporter(pulumi.ComponentResource):
    container: docker.Container

    def __init__(
        self, name: str, spec: ContainerSpec, host: AscendHost, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        super().__init__("ascend-fleet:index:NpuExporter", name, None, opts)
        self.container = docker.Container(
            f"{name}-container",
            container_args(spec, host.images[spec.image].image_id),
            opts=container_options(spec, self, host, [*host.ready]),
        )
        self.register_outputs({"container": self.container.name})
