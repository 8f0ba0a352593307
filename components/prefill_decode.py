"""PrefillDecodeInstance: one prefill or decode instance of a disaggregated service, i.e. one docker container
on its host.

Built from the instance's record (records.disaggregated) as ModelService is from a service's: the same container
arguments and options, on Docker's host network with nothing published. No instance waits for another: each
binds its own `kvPort` block and handshakes with a peer only when the proxy hands it a request (vllm-ascend
v0.20.2rc1 `mooncake_connector.py`), so both roles are created side by side and each `wait`s for its own /health.
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_docker as docker

from components.ascend_host import AscendHost
from components.model_service import model_container, renamed
from records.disaggregated import InstanceDeployment


class PrefillDecodeInstance(pulumi.ComponentResource):
    container: docker.Container
    summary: dict

    def __init__(
        self, name: str, i: InstanceDeployment, host: AscendHost, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        renames = pulumi.ResourceOptions(aliases=renamed(i.earlier_names))
        super().__init__("ascend-fleet:index:PrefillDecodeInstance", name, None, pulumi.ResourceOptions.merge(opts, renames))
        self.container = model_container(name, i.spec, self, host, list(host.ready), i.earlier_names)
        endpoint = i.endpoint
        # Derived from the container so that it exists once the container does.
        self.summary = {"endpoint": self.container.name.apply(lambda _: endpoint), **i.summary()}
        self.register_outputs(self.summary)
