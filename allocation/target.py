"""Where a stack's plan runs: the `ascend-fleet:target` key and the `ascend-fleet:kubernetes` settings.

The target chooses the runtime, never the plan: cards, windows, the capacity check, `pin` and
`plan --against` read neither key, so `plan` prints the same bytes whichever target a stack names
(tests/test_kubernetes_target.py). The settings are read by the Kubernetes export
(`views/exports/kubernetes.py`) and components (`components/kubernetes/`); docs/kubernetes.md
says what each becomes in the cluster.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from allocation.scalars import Flag

Target = Literal["docker", "kubernetes"]
DEFAULT_TARGET: Target = "docker"

# A label key as Kubernetes validates it (apimachinery validation.IsQualifiedName): an optional DNS
# subdomain prefix and `/`, then a name of at most 63 characters.
LabelKey = Annotated[
    str,
    Field(
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$",
        max_length=316,
    ),
]
# A namespace name (RFC 1123 label) and a DeviceClass name (DNS subdomain), as the API server checks them.
Namespace = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]
Subdomain = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", max_length=253)]

DRA_DRIVER = "npu.huawei.com"
"""MindCluster's DRA driver name (Ascend/mind-cluster component/ascend-dynamic-resource-allocation/
pkg/consts/consts.go `DriverName`), and the name of the DeviceClass its manifest installs
(build/ascend-dra-driver.yaml: `device.driver == 'npu.huawei.com'`)."""


class Kubernetes(BaseModel):
    """`ascend-fleet:kubernetes`: how a stack whose `target` is `kubernetes` runs its plan in a cluster
    ([Running on Kubernetes](kubernetes.md)). Read only by the Kubernetes target: the plan is the same
    with any value."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True
    )

    namespace: Namespace = "default"
    """The namespace every namespaced object goes into. It must exist; the target does not create it."""
    network: Literal["pod", "hostNetwork"] = "pod"
    """`pod`: each model gets its own network namespace, and its ports are reached through a Service;
    `hostNetwork`: pods share the node's network, as containers on a docker host do. The plan's port
    windows are host-wide and disjoint, so both are safe (HCCL's NPU-side ports clash between pods
    on one machine even on pod networking: vllm-ascend issues 4725 and 11968)."""
    dra: Flag = True
    """`true`: each planned card becomes a ResourceClaim of MindCluster's DRA driver (`npu.huawei.com`)
    selecting its `physicId`, so the scheduler accounts for it. `false`, for clusters without the
    driver: pods are pinned to their node and get their cards through `ASCEND_VISIBLE_DEVICES` (the
    Ascend Docker Runtime); the scheduler does not account for those cards, and the export says so."""
    hostname_label: LabelKey = "kubernetes.io/hostname"
    """The node label whose value is a host's `name`: each pod's `nodeSelector`. The default is the
    label every kubelet sets to its node's hostname; another key lets a node keep its own name."""
    taint_key: LabelKey = "ascend-fleet/npu"
    """The key of the taint the planned NPU nodes carry (`KEY=<stack>:NoSchedule`); every planned pod
    tolerates it, so only planned pods land there."""
    device_class: Subdomain = DRA_DRIVER
    """The DeviceClass each ResourceClaim requests (MindCluster's manifest installs `npu.huawei.com`)."""
