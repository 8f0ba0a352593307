"""What re-creates a container: each container input, classified as the docker provider classifies it.

A re-created vLLM container is a model reload, minutes of downtime for a 27B model, so a
container's inputs are treated like a public API. terraform-provider-docker v4.5.0 (which
pulumi-docker 5.2.0 wraps) marks every `docker_container` attribute `ForceNew` except a few
(internal/provider/resource_docker_container.go: `restart`, `max_retry_count`, `wait`,
`wait_timeout`, `must_run`, `destroy_grace_seconds`, `healthcheck`, the memory and cpu limits...):
a change to any other attribute deletes the container and creates a new one. The program adds one
rule of its own: a changed health check or init replaces the container (`replace_on_changes`),
because the provider's update never applies either to a running container. `plan --against`, docs/deploying.md's table
and the tests all read this one table. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class Input:
    """One key of a container's plan JSON (`ContainerSpec.to_json`) and what a change to it does."""

    key: str
    provider: tuple[str, ...]
    """The `docker_container` attributes it becomes."""
    recreates: bool
    """A change deletes the container and creates a new one; False: updated in place."""
    absent: Any = None
    """What a plan written before the key existed meant by leaving it out (None: unknown there, so
    not compared), e.g. no init process before `init`."""


INPUTS = (
    Input("name", ("name",), True),
    Input("image", ("image",), True),
    Input("command", ("command",), True),
    Input("entrypoint", ("entrypoint",), True, absent=()),  # only the NPU exporter sets one
    Input("env", ("env",), True),
    Input("privileged", ("privileged",), True),
    Input("deviceFiles", ("devices",), True),
    Input("mounts", ("mounts",), True),
    Input("ipcMode", ("ipc_mode",), True),
    Input("networkMode", ("network_mode",), True),  # only a multi-host service's members set it
    Input("shmSizeMiB", ("shm_size",), True),
    Input("ports", ("ports",), True),
    Input("labels", ("labels",), True),
    Input("sysctls", ("sysctls",), True),
    Input("logDriver", ("log_driver",), True),
    Input("logOpts", ("log_opts",), True),
    Input("stopGraceSeconds", ("stop_timeout", "destroy_grace_seconds"), True),
    Input("healthcheck", ("healthcheck",), True),
    Input("init", ("init",), True, absent=False),  # replaced by the program, as `healthcheck`
    Input("startTimeoutSeconds", ("wait_timeout",), False),
    Input("restart", ("restart",), False),
)
BY_KEY = {i.key: i for i in INPUTS}
# Set on every container and never planned per service: `wait` and `must_run` (in place).
CONSTANT_PROVIDER_INPUTS = ("wait", "must_run")
# Dropped from the record when the start gate moved to card locks; still read in older plans.
RETIRED_KEYS = {"extraHosts": Input("extraHosts", ("host",), True)}


def changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The container keys whose change re-creates the container, and those updated in place. A key
    an older plan did not print is unknown there, not changed, unless its absence had a meaning."""
    recreate, in_place = [], []
    for key in [*old, *(k for k in new if k not in old)]:
        known = BY_KEY.get(key) or RETIRED_KEYS.get(key)
        if known is None or (key not in old and known.absent is None):
            continue
        if old.get(key, known.absent) != new.get(key, known.absent):
            (recreate if known.recreates else in_place).append(key)
    return recreate, in_place


# Service (and `defaults`) keys as operators write them -> the container keys they reach. A
# `defaults` key reaches every container that does not set its own.
CONFIG_KEYS = (
    ("image", ("image",)),
    ("model, args, maxModelLen, maxNumSeqs, servedModelName, memoryFraction, kvCacheGiB", ("command",)),
    ("tensorParallelSize, devices, host", ("command", "env", "deviceFiles", "labels")),
    ("env", ("env",)),
    ("apiPort, hcclNpuSocketPortRange, hcclHostSocketPortRange, hcclIfBasePort, vllmPort", ("env", "ports", "labels", "sysctls")),
    ("mounts", ("mounts",)),
    ("allDevices, cardSharing: privileged", ("privileged", "deviceFiles")),
    ("ipcMode", ("ipcMode",)),
    ("shmSizeMiB", ("shmSizeMiB",)),
    ("logOpts", ("logOpts",)),
    ("stopGraceSeconds", ("stopGraceSeconds",)),
    ("startTimeoutSeconds", ("startTimeoutSeconds", "healthcheck", "env")),
    ("restart", ("restart",)),
    ("healthStartIntervalSeconds, dockerEngine (across version 25)", ("healthcheck",)),
)


def restart_table() -> str:
    """The "What restarts when you change what" table of docs/deploying.md, from `CONFIG_KEYS` and `INPUTS`."""
    rows = ["| you change | reaches the container's | `pulumi up` |", "|---|---|---|"]
    for keys, reached in CONFIG_KEYS:
        recreate = any(BY_KEY[k].recreates for k in reached)
        effect = "re-creates it: down for the model load" if recreate else "updates it in place: no restart"
        rows.append(f"| `{keys}` | {', '.join(f'`{k}`' for k in reached)} | {effect} |")
    return "\n".join(rows) + "\n"
