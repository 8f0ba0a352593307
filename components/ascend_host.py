"""AscendHost: what every service on one Ascend server shares.

One docker provider (over SSH with the fleet's ssh options, or the host's own
`dockerHost`), one host check that must pass before anything is pulled or
started there, and one RemoteImage per image the host's services use. Model
services receive the host and take the provider, the check and the image from
it; nothing here depends on another host, so hosts deploy in parallel.
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from allocation.config import FleetConfig
from allocation.containers import container_spec
from allocation.plan import HostPlan
from components.host_check import host_check_script


class AscendHost(pulumi.ComponentResource):
    provider: docker.Provider
    check: pulumi.CustomResource
    images: dict[str, docker.RemoteImage]

    def __init__(
        self,
        name: str,
        fleet: FleetConfig,
        host_plan: HostPlan,
        private_key: Optional[pulumi.Input[str]] = None,
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> None:
        super().__init__("ascend-fleet:index:AscendHost", name, None, opts)
        host = host_plan.host
        url = host.docker_url()  # the URL the exports and `doctor` use too
        child = pulumi.ResourceOptions(parent=self)

        self.provider = docker.Provider(
            f"{name}-docker",
            host=url,
            # Only the ssh transport reads them; BatchMode and ConnectTimeout make an
            # unreachable host fail in seconds instead of waiting for a password.
            ssh_opts=fleet.ssh.options() if url.startswith("ssh://") else None,
            opts=child,
        )

        script = host_check_script(host_plan, fleet)
        if host.is_local():  # the dev stack: the daemon runs where Pulumi runs
            self.check = command.local.Command(f"{name}-check", create=script, opts=child)
        else:
            self.check = command.remote.Command(
                f"{name}-check",
                connection=command.remote.ConnectionArgs(
                    host=host.address,
                    port=host.ssh_port,
                    user=host.user,
                    # Secret from config; the provider also marks the whole connection secret.
                    private_key=private_key,
                    per_dial_timeout=fleet.ssh.connect_timeout_seconds,
                    dial_error_limit=3,
                ),
                create=script,
                opts=child,
            )

        # Pulled once per host and image, after the check: a 20 GB pull onto a host
        # without its cards or weights is time lost. keep_locally: destroying the
        # stack or changing the tag must not delete an image an operator may roll back to.
        images = sorted({container_spec(fleet, ps).image for ps in host_plan.services})
        self.images = {
            image: docker.RemoteImage(
                f"{name}-{image}",
                name=image,
                keep_locally=True,
                opts=pulumi.ResourceOptions(parent=self, provider=self.provider, depends_on=[self.check]),
            )
            for image in images
        }
        self.docker_host = url
        self.register_outputs({"dockerHost": url, "images": images})
