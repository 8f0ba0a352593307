"""AscendHost: what every service on one Ascend server shares.

One docker provider (over SSH with the fleet's ssh options, or the host's own
`dockerHost`), one host check that must pass before anything is pulled or
started there, one RemoteImage per image the host's services use, and the takeover
of the containers it `replaces`, which waits for every image the host needs. Model
services receive the host and take the provider, the check and the image from
it; nothing here depends on another host, so hosts deploy in parallel.
"""

from __future__ import annotations

import asyncio
from typing import Optional

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from records.deployment import HostDeployment
from records.durations import go_duration
from records.runtime import log_tail
from ops.ssh import run_script

LOG_LINES = 20


class AscendHost(pulumi.ComponentResource):
    provider: docker.Provider
    connection: command.remote.ConnectionArgs | None
    """How scripts reach the host over SSH; None for a local daemon."""
    check: pulumi.CustomResource
    takeover: pulumi.CustomResource | None
    """Disables the containers the host `replaces`, after the check and every image of the host;
    None when it replaces none."""
    device_share: pulumi.CustomResource | None
    start_order: pulumi.CustomResource | None
    """Writes the shared cards' deploy-time order on the host (records.card_order); None without shared cards."""
    images: dict[str, docker.RemoteImage]

    def __init__(
        self,
        name: str,
        hd: HostDeployment,
        private_key: Optional[pulumi.Input[str]] = None,
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> None:
        super().__init__("ascend-fleet:index:AscendHost", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.provider = docker.Provider(
            f"{name}-docker",
            host=hd.docker_url,
            ssh_opts=list(hd.ssh_options) if hd.ssh_options is not None else None,
            opts=child,
        )
        self.connection = connection = _connection(hd, private_key)
        self.check = script(f"{name}-check", hd.check_script, connection, child)
        # Pulled once per host and image, after the check: a 20 GB pull onto a host
        # without its cards or weights is time lost. keep_locally: destroying the
        # stack or changing the tag must not delete an image an operator may roll back to.
        pull = go_duration(hd.pull_timeout_seconds)
        after_check = pulumi.ResourceOptions(
            parent=self,
            provider=self.provider,
            depends_on=[self.check],
            custom_timeouts=pulumi.CustomTimeouts(create=pull, update=pull),
        )
        self.images = {
            image: docker.RemoteImage(f"{name}-{image}", name=image, keep_locally=True, opts=after_check)
            for image in hd.images
        }
        # The old deployment goes for good after the check (which let its containers pass) and before
        # anything that needs their cards or ports, and only once every image the host needs is here:
        # the pulls (and the routers' image builds) take minutes, with the old services still serving.
        # A dependency, not an input: waiting for the images changes no resource. Its `delete` does
        # nothing: rolling back is by hand (docs/moving-from-compose.md).
        self.takeover = None
        self._router_images: dict[str, asyncio.Future] = {}
        if hd.takeover_script is not None:
            loop = asyncio.get_running_loop()
            self._router_images = {rd.name: loop.create_future() for rd in hd.routers}
            after_images = pulumi.ResourceOptions(
                parent=self, depends_on=[self.check, *self.images.values(), *self._router_images.values()]
            )
            self.takeover = script(f"{name}-takeover", hd.takeover_script, connection, after_images)
        self.device_share, self.start_order = self._sharing_steps(name, hd, connection)
        self._hd = hd
        self.register_outputs({"dockerHost": hd.docker_url, "images": list(hd.images)})

    @property
    def ready(self) -> list[pulumi.Resource]:
        """What every container of the host waits for: the check, and the takeover of the old
        containers, which hold the cards and ports the new ones need."""
        return [self.check, *([self.takeover] if self.takeover is not None else [])]

    def router_image_built(self, router: str, build: pulumi.Resource) -> None:
        """The step that builds `router`'s image on this host (components.router), which the takeover
        waits for like a pull. Routers are made after their host, so the takeover holds a future of
        each build (as components.router.Rollout does for the replicas' serves steps)."""
        if router in self._router_images:
            self._router_images[router].set_result(build)

    def _sharing_steps(
        self, name: str, hd: HostDeployment, connection: command.remote.ConnectionArgs | None
    ) -> tuple[pulumi.CustomResource | None, pulumi.CustomResource | None]:
        """The shared cards' steps, after the check (and the takeover) and before any container on them: device-share
        mode, and their deploy-time order (records.card_order). Both are dependencies of the
        containers, so a new card list or order runs them again and replaces nothing."""
        after_check = pulumi.ResourceOptions(parent=self, depends_on=self.ready)
        share = order = None
        if hd.device_share_script is not None:
            share = script(
                f"{name}-device-share", hd.device_share_script, connection, after_check, delete=hd.device_share_removal
            )
        if hd.start_order_script is not None:
            order = script(
                f"{name}-start-order", hd.start_order_script, connection, after_check, delete=hd.start_order_removal
            )
        return share, order

    def last_log_lines(self, container: str, lines: int = LOG_LINES) -> str:
        """A container's last log lines on this host (`docker logs --tail`, over SSH like `doctor`),
        or why they could not be read. For the error hook of a container that did not start, which
        may not exist: by its exact name, never as another container's ID prefix (`log_tail`)."""
        result = run_script(self._hd, log_tail(container, lines))
        if not result.reachable:
            return f"(its log could not be read: {result.error})"
        return result.stdout.strip() or "(its log is empty)"


def _connection(hd: HostDeployment, private_key: Optional[pulumi.Input[str]]) -> command.remote.ConnectionArgs | None:
    """How scripts reach the host over SSH; None for a local daemon."""
    host = hd.host
    if host.is_local():
        return None
    return command.remote.ConnectionArgs(
        host=host.address,
        port=host.ssh_port,
        user=host.user,
        # Secret from config; the provider also marks the whole connection secret.
        private_key=private_key,
        # The key the docker provider's ssh and `doctor` trust; None only when
        # strictHostKeyChecking is not `yes` (then any key is accepted here).
        host_key=hd.host_key,
        per_dial_timeout=hd.connect_timeout_seconds,
        dial_error_limit=3,
    )


def script(
    name: str,
    text: str,
    connection: command.remote.ConnectionArgs | None,
    opts: pulumi.ResourceOptions,
    delete: str | None = None,
    triggers: Optional[pulumi.Input[list]] = None,
) -> pulumi.CustomResource:
    """A script run on the host: over SSH, or here for the dev stack's local daemon. A changed
    script runs again as an update, never as a replacement, whose create-then-delete would run the
    new script and then the old one's `delete`; `delete` runs when the resource goes. A change of
    `triggers` replaces it: the script runs again as a create.

    The script is `create` alone: pulumi-command runs `create` for an update when `update` is
    unset (`Command.Update` in provider/pkg/provider/{remote,local}/commandController.go, v1.2.1),
    and only `triggers` replace. An `update` equal to it would store the script twice more in the
    state, inputs and outputs, which every step of an `up` rewrites (docs/performance.md)."""
    if connection is None:
        return command.local.Command(name, create=text, delete=delete, triggers=triggers, opts=opts)
    return command.remote.Command(name, connection=connection, create=text, delete=delete, triggers=triggers, opts=opts)
