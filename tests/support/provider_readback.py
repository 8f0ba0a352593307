"""What the real docker provider stores for a container after create and refresh: a small model.

Pulumi's mocks hand back exactly the inputs they were given, so they cannot show
a perpetual diff. The real provider (pulumi-docker 5.2.0 wraps
kreuzwerker/terraform-provider-docker v4.5.0, commit 5074970c) reads every
container back from Docker in `resourceDockerContainerRead`
(internal/provider/resource_docker_container_funcs.go) and stores what Docker
reports. `stored(inputs, daemon)` applies those read rules to the inputs the
program registered; when the stored value of every argument the program sets
equals the input, a second `pulumi preview` has nothing to change. Each rule
names the line it comes from (v4.5.0).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

GO_UNITS = {"h": 3600, "m": 60, "s": 1}


def go_seconds(text: str) -> int:
    """`1h0m0s`, `30m0s`, `1800s` -> seconds (the subset of Go durations in whole seconds)."""
    parts = re.findall(r"(\d+)([hms])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a whole-second Go duration: {text!r}")
    return sum(int(n) * GO_UNITS[u] for n, u in parts)


def go_string(seconds: int) -> str:
    """Go's time.Duration.String() for whole seconds, written here independently of the program."""
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m}m{s}s" if h else f"{m}m{s}s" if m else f"{s}s"


# The first Docker Engine major with HealthConfig.StartInterval (API 1.44); transcribed here
# independently of records/health.py. dockerd 20.10.24 stores a container created with it without
# it (checked here, /work/shared/DOMAIN.md), so Config.Healthcheck.StartInterval reads back as 0.
START_INTERVAL_ENGINE = 25
# resource_docker_container.go:1080-1086 (v4.5.0): `start_interval` has `Default: "0s"`, so an input
# that leaves it out is "0s" to the provider, and the read below always sets it.
HEALTHCHECK_DEFAULTS = {"startInterval": "0s"}


def _healthcheck(hc: Mapping[str, Any], engine: str) -> dict[str, Any]:
    # funcs.go:960-968: "interval": container.Config.Healthcheck.Interval.String(), and the same
    # for timeout, start_period and start_interval: Docker keeps nanoseconds, Go prints them back.
    out = {**HEALTHCHECK_DEFAULTS, **hc}
    if int(engine.split(".")[0]) < START_INTERVAL_ENGINE:
        out["startInterval"] = "0s"
    for key in ("interval", "timeout", "startPeriod", "startInterval"):
        if key in out:
            out[key] = go_string(go_seconds(out[key]))
    return out


def _ports(ports: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    # structures.go:35-59 flattenContainerPorts: one entry per binding, "ip" = HostIP and
    # "protocol" from the port key. With no HostIP, a dual-stack daemon binds 0.0.0.0 and ::,
    # so two entries come back and the list differs on every refresh (kreuzwerker issue 909).
    out = []
    for p in ports:
        base = {"internal": int(p["internal"]), "external": int(p["external"]), "protocol": p.get("protocol") or "tcp"}
        ips = [p["ip"]] if p.get("ip") else ["0.0.0.0", "::"]
        out += [{**base, "ip": ip} for ip in ips]
    return out


def _log_opts(opts: Mapping[str, str], daemon: Mapping[str, Any]) -> dict[str, str]:
    # funcs.go:952 containerLogOptsForState returns HostConfig.LogConfig.Config, which dockerd
    # filled with daemon.json's "log-opts" for keys the container did not set, when the
    # container's driver is the daemon's default one (moby daemon/logs.go mergeAndVerifyLogConfig).
    merged = dict(opts)
    if daemon.get("log-driver", "json-file") == "json-file":
        for key, value in (daemon.get("log-opts") or {}).items():
            merged.setdefault(key, value)
    return merged


def stored(inputs: Mapping[str, Any], daemon: Mapping[str, Any] | None = None, engine: str = "20.10") -> dict[str, Any]:
    """The provider's state for a container created from `inputs` on a daemon with `daemon` as daemon.json,
    running Docker Engine `engine`."""
    state = dict(inputs)
    if "healthcheck" in inputs:
        state["healthcheck"] = _healthcheck(inputs["healthcheck"], engine)
    if "ports" in inputs:
        state["ports"] = _ports(inputs["ports"])
    if "logOpts" in inputs:
        state["logOpts"] = _log_opts(inputs["logOpts"], daemon or {})
    # funcs.go:945 shm_size = HostConfig.ShmSize/1024/1024: the MiB the input gave.
    # funcs.go:857 restart = RestartPolicy.Name; :900 privileged; :972 sysctls; :973 ipc_mode;
    # :977-978 stop_signal, stop_timeout; :849 command = Config.Cmd: all as given.
    # structures.go:467-495 flattenDevices: host_path, permissions, and container_path when
    # configured: as given, with permissions as given ("rwm").
    # structures.go:388-403 getDockerContainerMounts: target, source, type, read_only as given.
    # env and labels are written at create (funcs.go:79, :135) and never read back.
    # funcs.go:836-844: an image given as a sha256 id is read back from .Image, the same id.
    for key in ("shmSize", "stopTimeout"):
        if key in state:
            state[key] = int(state[key])
    return state


def stored_after_stop(inputs: Mapping[str, Any], daemon: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The state a `pulumi refresh` stores for a container stopped by hand (`docker stop`).

    funcs.go:800-806: ports are read whenever the state says must_run, and a stopped container has
    no NetworkSettings.Ports, so the list comes back empty; :815-822 then sets must_run false "to
    trigger update". `ports` is ForceNew, so the next `pulumi up` re-creates the container (seen
    with the real engine in tests/engine: refresh diffs `mustRun` and `ports`, up replaces it).
    """
    state = stored(inputs, daemon)
    state["mustRun"] = False
    if "ports" in state:
        state["ports"] = []
    return state


def differences(inputs: Mapping[str, Any], state: Mapping[str, Any]) -> list[str]:
    """Keys where the next run's input (the same as this one) differs from the stored value."""
    planned = dict(inputs)
    if "healthcheck" in planned:
        planned["healthcheck"] = {**HEALTHCHECK_DEFAULTS, **planned["healthcheck"]}
    for key in ("shmSize", "stopTimeout"):
        if key in planned:
            planned[key] = int(planned[key])
    if "ports" in planned:
        planned["ports"] = [
            {k: int(v) if k in ("internal", "external") else v for k, v in p.items()} for p in planned["ports"]
        ]
    return sorted(k for k in planned.keys() | state.keys() if planned.get(k) != state.get(k))


# Which `docker_container` attributes re-create the container when they change: `ForceNew: true`
# in the resource schema (internal/provider/resource_docker_container.go, v4.5.0); the others the
# provider's `resourceDockerContainerUpdate` applies in place. Only the attributes the program sets
# are listed. Transcribed from the source, independently of records/restarts.py, which the
# tests check against it.
FORCE_NEW = frozenset({
    "name", "image", "command", "entrypoint", "env", "privileged", "devices", "mounts", "ports", "host", "labels",
    "shm_size", "log_driver", "log_opts", "sysctls", "ipc_mode", "stop_timeout",
    "network_mode",  # resource_docker_container.go:901-906: ForceNew, Default "bridge"
})  # fmt: skip
# `init` is Optional and Computed, not ForceNew, and the update never applies it (schema: "Configured
# whether an init process should be injected"): the program replaces on its change, as for healthcheck.
UPDATED_IN_PLACE = frozenset({"restart", "wait", "wait_timeout", "must_run", "destroy_grace_seconds", "healthcheck", "init"})
# pulumi-docker's Python input names that differ from the Terraform attribute (sdk/python
# pulumi_docker/container.py: `envs` is `env`, `hosts` is `host`, `entrypoints` is `entrypoint`); the rest
# are camelCase of it.
PULUMI_NAMES = {"envs": "env", "hosts": "host", "entrypoints": "entrypoint"}


def attribute(pulumi_key: str) -> str:
    """The Terraform attribute a registered input (camelCase, as the engine receives it) sets."""
    return PULUMI_NAMES.get(pulumi_key) or re.sub(r"(?<!^)([A-Z])", lambda m: "_" + m.group(1).lower(), pulumi_key)


def recreates(before: Mapping[str, Any], after: Mapping[str, Any], replace_on_changes: tuple[str, ...] = ()) -> list[str]:
    """The inputs whose change makes the engine replace the container: ForceNew attributes, and
    those the program lists in `replace_on_changes`."""
    keys = sorted(before.keys() | after.keys())
    return [
        k for k in keys
        if before.get(k) != after.get(k) and (attribute(k) in FORCE_NEW or k in replace_on_changes)
    ]  # fmt: skip
