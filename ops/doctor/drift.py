"""Drift: a planned container's record (`records.containers.ContainerSpec`) against its `docker inspect`. Pure.

`FIELDS` names every field of the record: either the comparison that reads it where Docker keeps
it, or why `docker inspect` cannot show it. tests/test_doctor.py fails on a field that is in
neither, so a field added to the record is compared from its first day.

Where Docker keeps each (Docker Engine API, `GET /containers/{id}/json`; how the docker provider
fills them: kreuzwerker/terraform-provider-docker `internal/provider/resource_docker_container_funcs.go`,
`resourceDockerContainerCreate`):
- image: `Config.Image`, what the container was created with, and `.Image`, the ID it runs. The
  program hands the provider the image's ID (components/model_service.py), which it sends as
  `Config.Image` unchanged (v4.5.0 lines 49 and 69-70: `image := d.Get("image")`,
  `container.Config{Image: image, ...}`), so a container the program made keeps `sha256:...` there;
  `docker run NAME` keeps the name. The plan names its image, so the gather script asks the host
  which ID that name has now (`HostFacts.image_ids`): a container created by that ID, or running
  it, is the plan's; any other ID is drift, shown beside the planned one. A name the host was not
  asked about is compared as a name.
- command: `Config.Cmd`. Entrypoint: `Config.Entrypoint`, compared only when the plan sets one (the
  NPU exporter's); otherwise the image's own shows there and cannot be told from a hand-set one
  without the image.
- env and labels: `Config.Env`, `Config.Labels`, with the image's variables and labels merged in:
  only the keys the plan sets are compared.
- device files: `HostConfig.Devices[].PathOnHost`; mounts: `HostConfig.Mounts` of type bind (the
  provider's `mounts`) and `HostConfig.Binds` (`docker run -v SRC:DST[:ro]`); ports:
  `HostConfig.PortBindings`.
- restart: `HostConfig.RestartPolicy.Name` (an empty name is `no`); shm size: `HostConfig.ShmSize`
  in bytes (the provider sends MiB x 1024 x 1024); stop grace: `Config.StopTimeout` in seconds
  (unset: Docker's default 10 s).
- health check: `Config.Healthcheck`, durations in nanoseconds (the provider parses its Go
  duration strings with `time.ParseDuration`).
- log driver and options: `HostConfig.LogConfig.Type` and `.Config` (dockerd merges `daemon.json`'s
  options into containers of the default driver: that is drift too, the provider replaces them).
- privileged, init, ipc mode, sysctls: `HostConfig.Privileged`, `.Init` (null when not set),
  `.IpcMode`, `.Sysctls`.

Every value shown is bounded and escaped: what a host prints is hostile.
"""

from __future__ import annotations

import dataclasses
import functools
import shlex
from typing import Any, Callable, Iterable, Mapping

from allocation.errors import printable
from records.containers import ContainerSpec, HealthCheck
from ops.doctor.facts import LiveContainer, LiveHealth

Difference = tuple[str, str, str]
"""(what differs, planned, live)."""
Compare = Callable[[ContainerSpec, LiveContainer], list[Difference]]

SHOWN = 200
NANOS = 10**9
DOCKER_STOP_TIMEOUT = 10


def shown(text: str, limit: int = SHOWN) -> str:
    """A value for a message: escaped, and cut at `limit` characters."""
    return printable(text[:limit]) + ("..." if len(text) > limit else "")


def _image_ref(image: str) -> str:
    """`docker.io/library/x:latest` and `x` name the same image."""
    ref = image.removeprefix("docker.io/").removeprefix("library/")
    last = ref.rsplit("/", 1)[-1]
    if ":" not in last and "@" not in last:
        ref += ":latest"
    return ref


def _image(spec: ContainerSpec, live: LiveContainer, image_ids: Mapping[str, str | None] | None = None) -> list[Difference]:
    """The image the container was created with or runs, against the ID the plan's image name has
    on the host (`image_ids`); by name, when the host was not asked or has no such image."""
    image_ids = image_ids or {}
    planned_id = image_ids.get(spec.image)
    if planned_id is not None and planned_id in (live.image, live.image_id):
        return []
    if planned_id is None and _image_ref(spec.image) == _image_ref(live.image):
        return []
    if spec.image not in image_ids:
        planned = spec.image
    else:
        planned = f"{spec.image} = {planned_id}" if planned_id else f"{spec.image} (no such image on the host)"
    runs = live.image if live.image_id in ("", live.image) else f"{live.image} = {live.image_id}"
    return [("image", shown(planned), shown(runs))]


def _one(key: str, planned: Any, live: Any, show: Callable[[Any], str] = str) -> list[Difference]:
    return [] if planned == live else [(key, shown(show(planned)), shown(show(live)))]


def _keys(what: str, planned: Mapping[str, str], live: Mapping[str, str], exact: bool = False) -> list[Difference]:
    """Each key the plan sets (and, if `exact`, each key it does not) whose live value differs."""
    keys = sorted(set(planned) | (set(live) if exact else set()))
    return [
        (f"{what} {shown(k, 80)}", shown(planned.get(k, "(unset)") or '""'), shown(live.get(k, "(unset)") or '""'))
        for k in keys
        if planned.get(k) != live.get(k)
    ]


def _sets(key: str, planned: Iterable[str], live: Iterable[str]) -> list[Difference]:
    """Two sets of items; the live side says what is extra and what is lacking."""
    planned, live = set(planned), set(live)
    if planned == live:
        return []
    extra, lacking = sorted(live - planned), sorted(planned - live)
    what = "; ".join(filter(None, (extra and f"extra {', '.join(extra)}", lacking and f"lacking {', '.join(lacking)}")))
    return [(key, shown(",".join(sorted(planned))), f"{shown(','.join(sorted(live))) or '(none)'} ({shown(what)})")]


def _command(spec: ContainerSpec, live: LiveContainer) -> list[Difference]:
    """The arguments that differ, after the common head and before the common tail: a hand edit of
    `--max-model-len 25000` shows as `25000` against the live value, after `--max-model-len`."""
    a, b = spec.command, live.command
    if a == b:
        return []
    head = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    tail = 0
    while tail < min(len(a), len(b)) - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    after = f" after {shown(a[head - 1], 80)}" if head else ""
    key = f"command (argument {head + 1}{after})"
    return [(key, shown(shlex.join(a[head : len(a) - tail]) or "(nothing)"), shown(shlex.join(b[head : len(b) - tail]) or "(nothing)"))]


def _mounts(spec: ContainerSpec, live: LiveContainer) -> list[Difference]:
    planned = (_mount_text((m.source, m.target, m.read_only)) for m in spec.mounts)
    return _sets("mounts", planned, map(_mount_text, live.mounts))


def _mount_text(mount: tuple[str, str, bool]) -> str:
    """`SOURCE:TARGET[:ro]`, as `docker run -v` writes a bind mount."""
    source, target, read_only = mount
    return f"{source}:{target}{':ro' if read_only else ''}"


def _ports(spec: ContainerSpec, live: LiveContainer) -> list[Difference]:
    return _one("published ports", {(p, p) for p in spec.ports}, set(live.published), _port_list)


def _stop(spec: ContainerSpec, live: LiveContainer) -> list[Difference]:
    seconds = live.stop_timeout_seconds
    shown_live = f"{seconds}s" if seconds is not None else f"(unset: Docker's default {DOCKER_STOP_TIMEOUT}s)"
    return [] if spec.stop_grace_seconds == seconds else [("stop timeout", f"{spec.stop_grace_seconds}s", shown_live)]


def _log_opts(spec: ContainerSpec, live: LiveContainer) -> list[Difference]:
    return _one("log options", dict(spec.log_opts), dict(live.log_opts), _options)


def _port_list(ports: set[tuple[int, int]]) -> str:
    return ", ".join(f"{h}->{c}" for h, c in sorted(ports)) or "(none)"


def _options(opts: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(opts.items())) or "(none)"


def _seconds(ns: int) -> str:
    return f"{ns / NANOS:g}s"


HEALTHCHECK: dict[str, Callable[[HealthCheck, LiveHealth], list[Difference]]] = {
    "test": lambda hc, live: _one("healthcheck test", hc.test, live.test, shlex.join),
    "interval_seconds": lambda hc, live: _one("healthcheck interval", hc.interval_seconds * NANOS, live.interval_ns, _seconds),
    "timeout_seconds": lambda hc, live: _one("healthcheck timeout", hc.timeout_seconds * NANOS, live.timeout_ns, _seconds),
    "start_period_seconds": lambda hc, live: _one(
        "healthcheck start period", hc.start_period_seconds * NANOS, live.start_period_ns, _seconds
    ),
    "retries": lambda hc, live: _one("healthcheck retries", hc.retries, live.retries),
    # Not sent to engines before 25 (None), which keep none: 0 either way.
    "start_interval_seconds": lambda hc, live: _one(
        "healthcheck start interval", (hc.start_interval_seconds or 0) * NANOS, live.start_interval_ns, _seconds
    ),
}
"""Every field of `HealthCheck`, read from `Config.Healthcheck`."""


def _healthcheck(spec: ContainerSpec, live: LiveContainer) -> list[Difference]:
    if live.healthcheck is None:
        return [("healthcheck", shown(shlex.join(spec.healthcheck.test)), "(none)")]
    return [d for compare in HEALTHCHECK.values() for d in compare(spec.healthcheck, live.healthcheck)]


FIELDS: dict[str, Compare | str] = {
    "name": "the container is found by it: under another name it is `missing`",
    "image": _image,
    "command": _command,
    "entrypoint": lambda s, c: [] if s.entrypoint is None else _one("entrypoint", s.entrypoint, c.entrypoint, shlex.join),
    "env": lambda s, c: _keys("env", s.env, c.env),
    "device_files": lambda s, c: _sets("devices", s.device_files, c.device_files),
    "mounts": _mounts,
    "api_port": _ports,
    "metrics_port": _ports,
    "labels": lambda s, c: _keys("label", s.labels, c.labels),
    "healthcheck": _healthcheck,
    "privileged": lambda s, c: _one("privileged", s.privileged, c.privileged, lambda b: str(b).lower()),
    "init": lambda s, c: _one("init", s.init, c.init, lambda b: str(b).lower()),
    "restart": lambda s, c: _one("restart policy", s.restart, c.restart),
    "shm_size_mib": lambda s, c: _one("shm size", s.shm_size_mib * 1024 * 1024, c.shm_size_bytes, lambda b: f"{b} bytes"),
    "start_timeout_seconds": "the deployment's wait for `healthy` (the provider's `wait_timeout`): Docker does not keep it",
    "ipc_mode": lambda s, c: _one("ipc mode", s.ipc_mode, c.ipc_mode or "(unset)"),
    "stop_grace_seconds": _stop,
    "sysctls": lambda s, c: _keys("sysctl", s.sysctls, c.sysctls, exact=True),
    "log_opts": _log_opts,
    "log_driver": lambda s, c: _one("log driver", s.log_driver, c.log_driver or "(unset)"),
    # Only where the plan sets one (a member of a multi-host service, a prefill or decode instance, a proxy):
    # Docker names the default network by its own words (`bridge`, `default`), which the plan never spells.
    "network_mode": lambda s, c: [] if s.network_mode is None else _one("network mode", s.network_mode, c.network_mode or "(unset)"),
}
"""Each field of ContainerSpec: how it is compared, or why it is not."""


def differences(
    spec: ContainerSpec, live: LiveContainer, image_ids: Mapping[str, str | None] | None = None
) -> list[Difference]:
    """(key, planned, live) of everything that differs, in the record's field order (a comparison
    two fields share, the ports, once). `image_ids`: the host's IDs of the plan's image names
    (`HostFacts.image_ids`)."""
    table: dict[str, Compare | str] = {**FIELDS, "image": functools.partial(_image, image_ids=image_ids)}
    seen: list[Compare] = []
    for field in dataclasses.fields(spec):
        compare = table[field.name]
        if not isinstance(compare, str) and compare not in seen:
            seen.append(compare)
    return [d for compare in seen for d in compare(spec, live)]
