"""The NPU exporter in the plan diff: each host's exporter container (the plan JSON's `npuExporter`,
present only where `metrics.npuExporter` deploys one) compared like a service without cards, so a
new image or port restarts the exporter, and only it, and turning the setting on or off adds or
removes one per host. Pure.

Its port is reported as `npuExporterPort` (the stack setting), and the command and health check
that only render it (records/exporter.py: `-port P`, the probe of port P) as that port change.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

PORT_KEY = "npuExporterPort"
"""The key the exporter's port is reported under: the stack setting that sets it."""


def exporters(plan: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Host -> the host's exporter as a service without cards (name, host, port, container)."""
    out = {}
    for host in plan.get("hosts", ()):
        container = host.get("npuExporter")
        if container is None:
            continue
        port = (container.get("ports") or [None])[0]
        out[host["name"]] = {
            "name": container.get("name"),
            "host": host["name"],
            "devices": [],
            PORT_KEY: port,
            "container": _without_port(container, port),
        }
    return out


def _without_port(container: Mapping[str, Any], port: int | None) -> dict[str, Any]:
    """The container with its port's number taken out of the command (`-port P`), so that a new
    port reads as the port change it is, and any other change to the command still shows."""
    if port is None:
        return dict(container)
    flag = re.compile(rf"(?<!\S)-port {port}(?!\S)")
    return {**container, "command": [flag.sub(f"-port <{PORT_KEY}>", word) for word in container.get("command") or ()]}
