"""Stack values of one replicated service over three hosts, and its router's records."""

from __future__ import annotations

import copy

from tests.support.pipeline import deployment_of

HOSTS = [{"name": f"npu-{i}", "address": f"192.0.2.{10 + i}"} for i in range(1, 4)]


def fleet_of(*services: dict, hosts: list[dict] = HOSTS) -> dict:
    return {"hosts": copy.deepcopy(hosts), "services": list(services)}


def bge(**extra) -> dict:
    return {"name": "bge", "model": "/m/bge", "memoryFraction": 0.1, "replicas": 3, **extra}


def router_of(values: dict):
    deployment = deployment_of(values)
    (rd,) = deployment.routers
    return deployment, rd

