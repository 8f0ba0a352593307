"""Break-glass exports: the planned containers as docker-compose files or `docker run` scripts.

For operators who must act without Pulumi. Both are written from the
deployment records (`records.deployment`) the Pulumi program uses, so an
export cannot drift from what Pulumi would deploy. Every value is quoted by
the library made for its target: shell words by `shlex.quote`, compose files
by the YAML emitter (every string double-quoted, so YAML 1.1 and 1.2 readers
agree, and `$` doubled, so Compose does not interpolate); comments carry only
printable text.
"""

from __future__ import annotations

import io
import re
import shlex
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.representer import SafeRepresenter

from allocation.config import Mount
from records.containers import ContainerSpec, created_on_host
from records.deployment import Deployment, HostDeployment
from records.disaggregated import InstanceDeployment, ProxyDeployment
from records.group import MemberDeployment
from records.runtime import DISABLE, named
from records.ssh_argv import script_argv

# Ends the here-documents that feed a host its device-share, start-order and router-image scripts; they never contain it.
_END = "ASCEND_FLEET_DEVICE_SHARE_END"


def docker_run_args(spec: ContainerSpec) -> list[str]:
    """`docker run` arguments (after `docker run`) that create the container of a spec."""
    hc = spec.healthcheck
    args = ["-d", "--name", spec.name, "--restart", spec.restart, "--ipc", spec.ipc_mode]
    args += [] if spec.network_mode is None else ["--network", spec.network_mode]
    args += ["--shm-size", f"{spec.shm_size_mib}m", "--log-driver", spec.log_driver]
    args += ["--stop-timeout", str(spec.stop_grace_seconds)]
    args += ["--init"] if spec.init else []
    args += [f"--sysctl={k}={v}" for k, v in spec.sysctls.items()]
    args += [f"--log-opt={k}={v}" for k, v in spec.log_opts.items()]
    if spec.privileged:
        args.append("--privileged")
    args += [f"--device={d}:{d}" for d in spec.device_files]
    args += [f"--volume={m.source}:{m.target}{':ro' if m.read_only else ''}" for m in spec.mounts]
    args += [a for port in spec.ports for a in ("--publish", f"{port}:{port}")]
    args += [f"--env={k}={v}" for k, v in spec.env.items()]
    args += [f"--label={k}={v}" for k, v in spec.labels.items()]
    args += ["--health-cmd", hc.test[1], f"--health-interval={hc.interval_seconds}s"]
    # Only for a host declared to run Docker Engine 25 or later (records.health): older CLIs refuse the flag.
    if hc.start_interval_seconds is not None:
        args.append(f"--health-start-interval={hc.start_interval_seconds}s")
    args += [f"--health-timeout={hc.timeout_seconds}s", f"--health-start-period={hc.start_period_seconds}s"]
    args += [f"--health-retries={hc.retries}"]
    # `--entrypoint` takes one word: the first of the planned entrypoint; the rest go before the command.
    entrypoint = () if spec.entrypoint is None else spec.entrypoint
    args += [f"--entrypoint={entrypoint[0]}"] if entrypoint else []
    # `--`: the image is never read as an option, whatever it is.
    args += ["--", spec.image, *entrypoint[1:], *spec.command]
    return args


class _QuotedStrings(SafeRepresenter):
    """Every string double-quoted: `yes`, `on` or `12:30:00` stay strings for a YAML 1.1 reader too."""


_QuotedStrings.add_representer(
    str, lambda r, data: r.represent_scalar("tag:yaml.org,2002:str", data, style='"')
)


class _QuotedInPlanOrder(_QuotedStrings):
    """Mappings in the order they were built: a host's services as the plan has them, not sorted by name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sort_base_mapping_type_on_output = False


def _comment(text: str) -> str:
    """A `#` comment line of printable text: a newline in a value can never end it."""
    return "# " + re.sub(r"[\x00-\x1f\x7f]", "?", text)


def _literal(value: Any) -> Any:
    """Compose interpolates `$VAR` and `${VAR}` in every string value; `$$` is a literal `$`."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, dict):
        return {k: _literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_literal(v) for v in value]
    return value


def _volume(mount: Mount, short: bool) -> dict | str:
    """A bind mount: the long syntax; a source Compose may create (the start gate's lock folder, the compile
    caches: the host check does) with `create_host_path`, or in the short syntax when `short`."""
    long = {"type": "bind", "source": mount.source, "target": mount.target, "read_only": mount.read_only}
    if not created_on_host(mount.source):
        return long
    if short:  # no `:` in a mount's paths (config validation), so the short syntax cannot be misread
        return f"{mount.source}:{mount.target}{':ro' if mount.read_only else ''}"
    return long | {"bind": {"create_host_path": True}}


def compose_service(spec: ContainerSpec, short_binds: bool = False) -> dict:
    hc = spec.healthcheck
    entrypoint = {} if spec.entrypoint is None else {"entrypoint": list(spec.entrypoint)}
    # On the host network (a multi-host service's member) nothing is published: no `ports:`.
    network = {"ports": [f"{port}:{port}" for port in spec.ports]} if spec.network_mode is None else {
        "network_mode": spec.network_mode
    }
    return {
        "container_name": spec.name,
        "image": spec.image,
        **entrypoint,
        "command": list(spec.command),
        "environment": dict(spec.env),
        "devices": [f"{d}:{d}" for d in spec.device_files],
        "volumes": [_volume(m, short_binds) for m in spec.mounts],
        **network,
        "ipc": spec.ipc_mode,
        "shm_size": f"{spec.shm_size_mib}m",
        "stop_grace_period": f"{spec.stop_grace_seconds}s",
        "sysctls": dict(spec.sysctls),
        "privileged": spec.privileged,
        "init": spec.init,
        "restart": spec.restart,
        "labels": dict(spec.labels),
        "logging": {"driver": spec.log_driver, "options": dict(spec.log_opts)},
        "healthcheck": {
            "test": list(hc.test),
            "interval": f"{hc.interval_seconds}s",
            "timeout": f"{hc.timeout_seconds}s",
            "start_period": f"{hc.start_period_seconds}s",
            "retries": hc.retries,
        }
        # Only for a host declared to run Docker Engine 25 or later (records.health).
        | ({"start_interval": f"{hc.start_interval_seconds}s"} if hc.start_interval_seconds is not None else {}),
    }


def _docker_run_script(deployment: Deployment) -> str:
    lines = ["#!/bin/sh", _comment(f"stack {deployment.stack}: generated by `python -m allocation render`"), "set -eu"]
    for hd in deployment.hosts:
        lines += ["", _comment(f"host {hd.name}"), f"export DOCKER_HOST={shlex.quote(hd.docker_url)}"]
        if hd.takeover_script is not None:
            lines += [_comment(f"first take over from {', '.join(hd.host.replaces)}: restart policy no, stopped, kept")]
            lines += _on_host(hd, hd.takeover_script)
        if hd.device_share_script is not None:
            lines += [_comment(f"shared cards {list(hd.shared_cards)}: device-share mode first, as root on the host")]
            lines += _on_host(hd, hd.device_share_script)
        if hd.start_order_script is not None:
            lines += [_comment(f"shared cards {list(hd.shared_cards)}: their deploy-time order, for the start gates after a reboot")]
            lines += _on_host(hd, hd.start_order_script)
        for sd in hd.services:
            lines += _replace(sd.spec)
        for rd in hd.routers:
            what = "its image is built on the host, its worker list written there, then it runs"
            lines += [_comment(f"router of {rd.plan.service.name}: {what}")]
            lines += _on_host(hd, rd.build_script, " >/dev/null")
            lines += _on_host(hd, rd.workers_script)
            lines += _replace(rd.spec)
        for md in hd.members:
            lines += [_comment(_member_note(md)), *_replace(md.spec)]
        for i in hd.instances:
            lines += [_comment(_instance_note(i)), *_replace(i.spec)]
        for pd in hd.proxies:
            lines += [_comment(_proxy_note(pd)), *_replace(pd.spec)]
        if hd.exporter is not None:
            lines += [_comment("NPU exporter (metrics.npuExporter)"), *_replace(hd.exporter)]
    return "\n".join(lines) + "\n"


def _member_note(md: MemberDeployment) -> str:
    return f"{md.plan.role} of {md.group.name} on the host network: started with the other members, in any order"


def _instance_note(i: InstanceDeployment) -> str:
    return f"{i.role} instance of {i.service.name} on the host network, /etc/hccn.conf mounted read-only"


def _proxy_note(pd: ProxyDeployment) -> str:
    return f"proxy of {pd.plan.name} on the host network, after its instances: it answers once {', '.join(i.name for i in pd.instances)} serve"


def _on_host(hd: HostDeployment, script: str, redirect: str = "") -> list[str]:
    """Lines that run `script` on the host (ssh with the stack's options, or `sh -s` locally),
    fed from a quoted here-document so nothing in it is expanded here."""
    return [shlex.join(script_argv(hd)) + f" <<'{_END}'{redirect}", script.rstrip("\n"), _END]


def _replace(spec: ContainerSpec) -> list[str]:
    """Delete before create: the new container needs the same cards and ports. Stop first, with
    the grace period, so vLLM frees its HBM before it is removed. The one of that exact name, by its
    ID (`named`): Docker would read a name no container has yet as another container's ID prefix."""
    return [
        f"id=$({named(shlex.quote(spec.name))})",
        'if [ -n "$id" ]; then',
        f'  docker stop --time {spec.stop_grace_seconds} -- "$id" >/dev/null 2>&1 || true',
        '  docker rm -f -- "$id" >/dev/null 2>&1 || true',
        "fi",
        shlex.join(["docker", "run", *docker_run_args(spec)]),
    ]


def _compose_document(deployment: Deployment, hd: HostDeployment, file: str | None = None) -> str:
    """One host's compose document. For the stream (`file` None) as it always was; for a file of its own
    (`file`, its name), what docker-compose v1 1.29 accepts too: no top-level `name:` (v1 refuses every
    top-level key but `version`, `services`, `networks`, `volumes`, `configs`, `secrets` and `x-*`), the
    project name given with `-p` instead, the services in the plan's order, and the mounts Compose may create in the short syntax, which
    both versions create when absent (v1 refuses `bind.create_host_path`; the Compose spec's
    `create_host_path` is "implied by short syntax for backward compatibility with docker-compose
    legacy", compose-spec/compose-spec `spec.md`, Volumes)."""
    short = file is not None
    yaml = YAML(typ="safe", pure=True)
    yaml.Representer = _QuotedInPlanOrder if short else _QuotedStrings
    yaml.default_flow_style = False
    services = {sd.spec.name: compose_service(sd.spec, short) for sd in hd.services}
    container = {sd.name: sd.spec.name for sd in hd.services}  # a renamed service keeps its container's
    for rd in hd.routers:
        services[rd.spec.name] = compose_service(rd.spec, short)
        if rd.first in container:  # the router exits when no replica answers
            services[rd.spec.name]["depends_on"] = {container[rd.first]: {"condition": "service_healthy"}}
    for md in hd.members:  # no depends_on: a member's group spans hosts, each its own compose file
        services[md.spec.name] = compose_service(md.spec, short)
    for i in hd.instances:
        services[i.spec.name] = compose_service(i.spec, short)
    for pd in hd.proxies:  # after its instances in this file; those on other hosts are in theirs
        services[pd.spec.name] = compose_service(pd.spec, short)
        here = [i.spec.name for i in pd.instances if i in hd.instances]
        if here:
            services[pd.spec.name]["depends_on"] = {name: {"condition": "service_healthy"} for name in here}
    if hd.exporter is not None:
        services[hd.exporter.name] = compose_service(hd.exporter, short)
    project = f"ascend-fleet-{deployment.stack}".lower()
    body = {"services": {name: _literal(service) for name, service in services.items()}}
    buffer = io.StringIO()
    yaml.dump(body if short else {"name": project} | body, buffer)
    how = "-f <this file>" if file is None else f"-p {project} -f {file}"
    header = _comment(f"stack {deployment.stack}, host {hd.name}: DOCKER_HOST={hd.docker_url} docker compose {how} up -d")
    notes = _first_steps(hd)
    if short and any("start_interval" in service["healthcheck"] for service in services.values()):
        # docker-compose 1.29.2's schema has no start_interval (`docker-compose config`: "services.X.healthcheck
        # value 'start_interval' does not match any of the regexes: '^x-'"); the Compose spec has it.
        notes.append("healthcheck start_interval (Docker Engine 25 and later): docker-compose v1 refuses it; use docker compose v2")
    return header + "".join("\n" + _comment(line) for line in notes) + "\n" + buffer.getvalue()


def _first_steps(hd: HostDeployment) -> list[str]:
    """What the docker-run export does on the host before its containers, and a compose file cannot."""
    steps = []
    if hd.takeover_script is not None:
        steps.append(f"first take {', '.join(hd.host.replaces)} out of service for good: {DISABLE} (the docker-run export does it)")
    if hd.device_share_script is not None:
        steps.append(f"first put shared cards {list(hd.shared_cards)} into device-share mode: the docker-run export does it")
    if hd.start_order_script is not None:
        steps.append(f"first write the order of shared cards {list(hd.shared_cards)} on the host: the docker-run export does it")
    for pd in hd.proxies:
        away = [i.name for i in pd.instances if i not in hd.instances]
        if away:
            steps.append(f"start {pd.spec.name} once {', '.join(away)} serve on their hosts: their compose files start them")
    for rd in hd.routers:
        steps.append(
            f"first build the image {rd.spec.image} and write the worker list of {rd.spec.name} on the host: "
            "the docker-run export does both"
        )
    return steps


def _compose_files(deployment: Deployment) -> str:
    return "---\n".join(_compose_document(deployment, hd) for hd in deployment.hosts)


def compose_files(deployment: Deployment) -> dict[str, str]:
    """One compose file per host, `<host>.compose.yaml` (host names are DNS labels: no `/`, no dot),
    in the plan's host order."""
    names = {hd.name: f"{hd.name}.compose.yaml" for hd in deployment.hosts}
    return {names[hd.name]: _compose_document(deployment, hd, names[hd.name]) for hd in deployment.hosts}


def render(deployment: Deployment, fmt: str) -> str:
    """Every host of the plan: one compose document, or one block of the docker-run script."""
    return _docker_run_script(deployment) if fmt == "docker-run" else _compose_files(deployment)
