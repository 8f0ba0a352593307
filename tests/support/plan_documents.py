"""Plan documents written by hand, as `plan --format json` prints them, for the `plan --against`
diff (`views.diff.diff_plans`) and its renderings: no git, no planner, two dicts per test."""

from __future__ import annotations

from typing import Any

IMAGE = "quay.io/ascend/vllm-ascend:v0.20.2rc1"


def service(
    name: str,
    host: str = "npu-a",
    devices: list[int] | None = None,
    api_port: int = 8000,
    slot: int = 0,
    max_model_len: int = 8192,
    env: dict[str, str] | None = None,
    image: str = IMAGE,
) -> dict[str, Any]:
    """A planned service as `plan --format json` prints it; `slot` picks its port windows."""
    devices = [0] if devices is None else devices
    npu = [16666 + 16 * slot, 16681 + 16 * slot]
    host_range = [60032 + 16 * slot, 60047 + 16 * slot]
    return {
        "name": name,
        "host": host,
        "devices": devices,
        "tensorParallelSize": len(devices),
        "memoryFraction": 0.4,
        "apiPort": api_port,
        "hcclNpuSocketPortRange": npu,
        "hcclHostSocketPortRange": host_range,
        "hcclIfBasePort": 61000 + 32 * slot,
        "vllmPort": 62000 + 16 * slot,
        "container": {
            "image": image,
            "command": [
                "vllm", "serve", f"/models/{name}",
                "--port", str(api_port),
                "--tensor-parallel-size", str(len(devices)),
                "--gpu-memory-utilization", "0.4",
                "--max-model-len", str(max_model_len),
                "--trust-remote-code",
            ],  # fmt: skip
            "env": {
                "ASCEND_RT_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(devices))),
                "HCCL_NPU_SOCKET_PORT_RANGE": f"{npu[0]}-{npu[1]}",
                "HCCL_HOST_SOCKET_PORT_RANGE": f"{host_range[0]}-{host_range[1]}",
                "HCCL_IF_BASE_PORT": str(61000 + 32 * slot),
                "VLLM_PORT": str(62000 + 16 * slot),
                "HCCL_BUFFSIZE": "512",
                **(env or {}),
            },
        },
    }


def plan(*services: dict[str, Any], stack: str = "prod") -> dict[str, Any]:
    """A plan document with the hosts the services name (npu-a always present)."""
    names = sorted({"npu-a", *(s["host"] for s in services)})
    return {
        "stack": stack,
        "hosts": [
            {
                "name": h,
                "address": f"192.0.2.{10 + i}",
                "npus": 8,
                "memoryBudget": 0.95,
                "services": sorted((s for s in services if s["host"] == h), key=lambda s: s["name"]),
            }
            for i, h in enumerate(names)
        ],
    }


def fleet() -> dict[str, Any]:
    return plan(
        service("bge-m3", devices=[0], api_port=7007, slot=0),
        service("qwen-long", devices=[4, 5, 6, 7], api_port=6006, slot=1, max_model_len=100000),
        service("qwen-vl", devices=[0, 1, 2, 3], api_port=9009, slot=2, max_model_len=25000),
    )


def by_name(diff) -> dict[str, Any]:
    return {s.name: s for s in diff.services}
