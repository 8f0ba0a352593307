"""What MindCluster's DRA driver would put in the cluster for an 8-card 910B node, built here because
no kubelet or driver runs in the lane.

Read from github:Ascend/mind-cluster, component/ascend-dynamic-resource-allocation:
- driver name `npu.huawei.com` (pkg/consts/consts.go `DriverName`);
- the DeviceClass its manifest installs: name `npu.huawei.com`, selector
  `device.driver == 'npu.huawei.com'` (build/ascend-dra-driver.yaml);
- one pool per node, named after the node, one slice holding every device (internal/driver/driver.go
  `buildDriverResources`);
- per device the attributes `deviceType` (a string, the device manager's type, `Ascend910B` on a 910B
  host: component/ascend-common/devmanager/common/constants.go) and `physicId` (an int)
  (internal/device/generation_common.go, generation_910.go `DeviceAttributes`).

Device names: the snapshot read here (2026-08-21) names a device `Ascend910-<physicId>`
(generation_910.go `buildNpuDevice`), which the API server refuses (a device name must be a lowercase
RFC 1123 label: test_apiserver.py shows it); a later revision of the same files names it
`npu-<physicId>` (consts.go `NPUNamePrefix`) and adds `type`, `chipName` and `deviceKind`. The lane
publishes `npu-<physicId>` with `deviceType` and `physicId`: claims select on `physicId` alone, which
every revision publishes.
"""

from __future__ import annotations

from typing import Any

DRIVER = "npu.huawei.com"
DEVICE_TYPE = "Ascend910B"
CARDS = 8


def device_name(physic_id: int) -> str:
    return f"npu-{physic_id}"


def device_class() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
    }


def resource_slice(node: str, cards: int = CARDS, *, name_of=device_name) -> dict[str, Any]:
    """The slice the driver's kubelet plugin publishes for `node` (pool = node name, all cards in one slice)."""
    devices = [
        {"name": name_of(i), "attributes": {"deviceType": {"string": DEVICE_TYPE}, "physicId": {"int": i}}}
        for i in range(cards)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def node(name: str, hostname_label: str = "kubernetes.io/hostname") -> dict[str, Any]:
    """A Node object as a kubelet would register it (no kubelet runs: it stays NotReady, which the
    lane does not need)."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {hostname_label: name}}}
