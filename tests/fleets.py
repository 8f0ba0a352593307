"""Small builders of stack config values shared by the planner tests and benchmarks."""

from __future__ import annotations

from typing import Any

from allocation.config import FleetConfig, parse_fleet


def host(name: str = "npu-a", **extra: Any) -> dict[str, Any]:
    return {"name": name, "address": f"{name}.example", **extra}


def service(name: str, tp: int = 1, fraction: float = 0.5, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "model": f"/models/{name}",
        "tensorParallelSize": tp,
        "memoryFraction": fraction,
        **extra,
    }


def fleet(hosts: list[dict], services: list[dict], stack: str = "test", **extra: Any) -> FleetConfig:
    return parse_fleet(stack, {"hosts": hosts, "services": services, **extra})


def seed_values() -> dict[str, Any]:
    """The seed deployment without any pins: the allocator chooses everything."""
    return {
        "hosts": [host("npu-a")],
        "services": [
            service("bge-m3", 1, 0.1, apiPort=7007, maxModelLen=8192),
            service("qwen-vl", 4, 0.85, apiPort=9009, maxModelLen=25000, maxNumSeqs=10),
            service("qwen-long", 4, 0.90, apiPort=6006, maxModelLen=100000, maxNumSeqs=2),
        ],
    }
