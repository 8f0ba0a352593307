"""ModelService: one `vllm serve` instance, i.e. one docker container on its host.

The container is built from the service's deployment record and nothing else: the command,
environment, devices, mounts and ports were decided by the planner for the
whole stack, and this component only translates them into pulumi-docker terms.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_docker as docker

from records.containers import ContainerSpec, HealthCheck
from records.deployment import ServiceDeployment
from records.durations import go_duration
from components.ascend_host import LOG_LINES, AscendHost


def container_args(spec: ContainerSpec, image: pulumi.Input[str]) -> docker.ContainerArgs:
    """The docker Container a spec becomes."""
    return docker.ContainerArgs(
        name=spec.name,
        image=image,
        command=list(spec.command),
        # Only where the plan sets one: left out, the provider keeps the image's (Computed).
        entrypoints=None if spec.entrypoint is None else list(spec.entrypoint),
        envs=[f"{key}={value}" for key, value in spec.env.items()],
        devices=[
            docker.ContainerDeviceArgs(host_path=path, container_path=path, permissions="rwm")
            for path in spec.device_files
        ],
        mounts=[
            docker.ContainerMountArgs(type="bind", source=m.source, target=m.target, read_only=m.read_only)
            for m in spec.mounts
        ],
        # ip and protocol as the provider stores them after a read, so a refresh finds no change.
        ports=[docker.ContainerPortArgs(internal=p, external=p, ip="0.0.0.0", protocol="tcp") for p in spec.ports],
        # Only for a multi-host service's members (`host`); left out, the provider's default `bridge`.
        network_mode=spec.network_mode,
        ipc_mode=spec.ipc_mode,
        shm_size=spec.shm_size_mib,
        sysctls=dict(spec.sysctls),
        # Docker's own stop timeout and the provider's wait on destroy: vLLM gets SIGTERM
        # and this long to release its HBM before a replacement takes the cards.
        stop_timeout=spec.stop_grace_seconds,
        destroy_grace_seconds=spec.stop_grace_seconds,
        privileged=spec.privileged,
        restart=spec.restart,
        log_driver=spec.log_driver,
        log_opts=dict(spec.log_opts),
        labels=[docker.ContainerLabelArgs(label=k, value=v) for k, v in spec.labels.items()],
        healthcheck=healthcheck_args(spec.healthcheck),
        # `pulumi up` returns once the model answers /health, or fails after the
        # start timeout; the provider requires the healthcheck above for this.
        wait=True,
        wait_timeout=spec.start_timeout_seconds,
        must_run=True,
        init=spec.init,
    )


def healthcheck_args(hc: HealthCheck) -> docker.ContainerHealthcheckArgs:
    """The health check, durations as Go prints them. `start_interval` only where the host's engine
    keeps it (records.health): an engine before 25 drops it, the provider would read back `0s`
    (terraform-provider-docker v4.5.0 resource_docker_container_funcs.go:967) and every preview would
    show a change; left out, the schema's default `0s` (resource_docker_container.go:1080) matches."""
    start_interval = None if hc.start_interval_seconds is None else go_duration(hc.start_interval_seconds)
    return docker.ContainerHealthcheckArgs(
        tests=list(hc.test),
        interval=go_duration(hc.interval_seconds),
        timeout=go_duration(hc.timeout_seconds),
        start_period=go_duration(hc.start_period_seconds),
        retries=hc.retries,
        start_interval=start_interval,
    )


def start_failure_text(container: str, errors: Sequence[str], logs: str) -> str:
    """What an operator reads when a container did not start: the provider's error and the
    container's last log lines, where vLLM says why (a missing config.json, -8005, no free HBM)."""
    error = errors[0] if errors else "unknown error"
    return f"container {container} failed ({error}); its last {LOG_LINES} log lines:\n{logs}"


def start_failure_hook(spec: ContainerSpec, host: AscendHost) -> pulumi.ErrorHook:
    """Reports a failed create or update with the container's own last log lines. The provider's
    message alone is "container failed to be in healthy state" (terraform-provider-docker v4.5.0
    resource_docker_container_funcs.go:40, :614-621), whatever vLLM printed. Never retries."""

    def report(args: pulumi.ErrorHookArgs) -> bool:
        if args.failed_operation in ("create", "update"):
            pulumi.log.error(start_failure_text(spec.name, args.errors, host.last_log_lines(spec.name)))
        return False

    return pulumi.ErrorHook(f"{spec.name}-last-log-lines", report)


def renamed(previous: Sequence[str], suffix: str = "") -> list[pulumi.Alias]:
    """Aliases to the names a resource had under the service's previous names and no longer has
    (`previousNames`, allocation.names.earlier_names: a rename back lists the current name too, and
    a resource is no alias of itself), so a rename updates it instead of creating a new one before
    the old is deleted. A component's aliases reach
    its children only through the engine's guess that a child's name starts with its parent's (pulumi
    pkg/resource/deploy/step_generator.go, generateAliases and inheritedChildAlias, which also drops
    duplicates), so every child names its own. The alias keeps the current parent: a child's URN holds
    its parent's type, not its name, and the component's type does not change."""
    return [pulumi.Alias(name=f"{old}{suffix}") for old in previous]


def container_options(
    spec: ContainerSpec,
    parent: pulumi.Resource,
    host: AscendHost,
    depends_on: list[pulumi.Input[pulumi.Resource]],
    previous: Sequence[str] = (),
) -> pulumi.ResourceOptions:
    """How every container is created, replaced and deleted; `previous`: its parent's previous names."""
    return pulumi.ResourceOptions(
        parent=parent,
        provider=host.provider,
        depends_on=depends_on,
        aliases=renamed(previous, "-container"),
        hooks=pulumi.ResourceHookBinding(on_error=[start_failure_hook(spec, host)]),
        # The replacement needs the same cards and host ports as the old container,
        # so the old one must go first (else "port is already allocated").
        delete_before_replace=True,
        # The provider's default create timeout (20 minutes) would cut the health
        # wait of a large model short; update and delete stay bounded too.
        # The provider's update never applies a changed health check or init to a running
        # container (terraform-provider-docker v4.5.0 resourceDockerContainerUpdate; `init` is
        # Optional and Computed, not ForceNew, in resource_docker_container.go).
        replace_on_changes=["healthcheck", "init"],
        custom_timeouts=pulumi.CustomTimeouts(
            create=go_duration(spec.create_timeout_seconds),
            update=go_duration(spec.create_timeout_seconds),
            delete=go_duration(spec.delete_timeout_seconds),
        ),
    )


def model_container(
    name: str,
    spec: ContainerSpec,
    parent: pulumi.Resource,
    host: AscendHost,
    depends_on: list[pulumi.Input[pulumi.Resource]],
    previous: Sequence[str],
) -> docker.Container:
    """The container of a model (a service's, or a multi-host service's member's), `<name>-container`."""
    return docker.Container(
        f"{name}-container",
        # The image id, not the name: the provider stores the id and would report a
        # perpetual diff against a name (terraform-provider-docker issues 49, 426); and
        # not repo_digest, empty for an image built locally (the dev stack's npu-sim).
        # A new tag or a re-pulled image is a new id, so the container is replaced.
        container_args(spec, host.images[spec.image].image_id),
        opts=container_options(spec, parent, host, depends_on, previous),
    )


class ModelService(pulumi.ComponentResource):
    container: docker.Container
    summary: dict

    def __init__(
        self,
        name: str,
        sd: ServiceDeployment,
        host: AscendHost,
        after: Sequence["ModelService"] = (),
        depends_on: Sequence[pulumi.Input[pulumi.Resource]] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> None:
        renames = pulumi.ResourceOptions(aliases=renamed(sd.earlier_names))
        super().__init__("ascend-fleet:index:ModelService", name, None, pulumi.ResourceOptions.merge(opts, renames))
        depends_on = [*host.ready, *_sharing(sd, host), *(s.container for s in after), *depends_on]
        self.container = model_container(name, sd.spec, self, host, depends_on, sd.earlier_names)
        endpoint = sd.endpoint
        # Derived from the container so that it exists once the container does.
        self.summary = {"endpoint": self.container.name.apply(lambda _: endpoint), **sd.summary()}
        self.register_outputs(self.summary)


def _sharing(sd: ServiceDeployment, host: AscendHost) -> list[pulumi.Resource]:
    """The host's device-share and start-order commands, for a service on a shared card."""
    steps = (host.device_share, host.start_order) if sd.shared else ()
    return [step for step in steps if step is not None]
