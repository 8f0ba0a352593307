"""Where a stack's plan runs: the `ascend-fleet:target` key and the `ascend-fleet:kubernetes` settings.

The target chooses the runtime, never the plan: cards, windows, the capacity check, `pin` and
`plan --against` read neither key, so `plan` prints the same bytes whichever target a stack names
(tests/test_kubernetes_target.py). The settings are read by the Kubernetes export
(`views/exports/kubernetes.py`) and components (`components/kubernetes/`); docs/kubernetes.md
says what each becomes in the cluster.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.json_schema import WithJsonSchema

from allocation.config_errors import shown

from allocation.scalars import Flag

Target = Literal["docker", "kubernetes"]
DEFAULT_TARGET: Target = "docker"

# Kubernetes' names, as k8s.io/apimachinery checks them (pkg/api/validate/content/dns.go and kube.go, which
# pkg/util/validation/validation.go's IsDNS1123Subdomain and IsQualifiedName forward to).
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"
SUBDOMAIN_MAX = 253
_KEY_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
KEY_NAME_MAX = 63
LABEL_KEY_RULE = (
    "a label key is [PREFIX/]NAME, PREFIX a DNS subdomain (at most 253 lowercase letters, digits, '-' and '.') and "
    "NAME at most 63 letters, digits, '-', '_' and '.', each part between dots or slash starting and ending with a "
    "letter or digit"
)


def _label_key(value: str) -> str:
    """A Kubernetes label key, as the API server checks label and taint keys (k8s.io/apimachinery
    `IsQualifiedName`, now `content.IsLabelKey` in pkg/api/validate/content/kube.go; kubernetes
    pkg/apis/core/validation `validateTaints`): an optional prefix, a DNS subdomain of at most 253
    characters, and `/`, then a name of at most 63."""
    parts = value.split("/")
    if len(parts) > 2:
        problems = [f"it holds {len(parts) - 1} '/', where one at most separates the prefix from the name"]
    else:
        problems = (_problems("prefix", parts[0]) if len(parts) == 2 else []) + _problems("name", parts[-1])
    if problems:
        raise ValueError(f"{shown(value)} is not a Kubernetes label key: {', and '.join(problems)}; {LABEL_KEY_RULE}")
    return value


# part -> (its longest, its pattern, the characters it may hold, those in words, how its ends are wrong)
_PARTS = {
    "prefix": (SUBDOMAIN_MAX, _SUBDOMAIN, r"[-a-z0-9.]*", "lowercase letters, digits, '-' and '.'",
               "has a part between dots that does not start and end with a letter or digit"),
    "name": (KEY_NAME_MAX, _KEY_NAME, r"[-A-Za-z0-9_.]*", "letters, digits, '-', '_' and '.'",
             "does not start and end with a letter or digit"),
}  # fmt: skip


def _problems(part: str, text: str) -> list[str]:
    """What is wrong with the prefix or the name of a label key, as apimachinery finds it, in words."""
    longest, pattern, characters, words, wrong_ends = _PARTS[part]
    if not text:
        return [f"its {part} is empty"]
    problems = [f"its {part} is {len(text)} characters, more than {longest}"] if len(text) > longest else []
    if not re.fullmatch(characters, text):
        problems.append(f"its {part} {shown(text)} holds characters other than {words}")
    elif not re.fullmatch(pattern, text):
        problems.append(f"its {part} {shown(text)} {wrong_ends}")
    return problems


LabelKey = Annotated[
    str,
    AfterValidator(_label_key),
    # The prefix's bound is the lookahead: JSON Schema patterns are ECMA-262 regular expressions, which have it.
    WithJsonSchema({
        "type": "string",
        "maxLength": SUBDOMAIN_MAX + 1 + KEY_NAME_MAX,
        "pattern": rf"^((?=[^/]{{1,{SUBDOMAIN_MAX}}}/){_SUBDOMAIN}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{{0,{KEY_NAME_MAX - 2}}}[A-Za-z0-9])?$",
    }),
]  # fmt: skip
# A namespace name (RFC 1123 label) and a DeviceClass name (DNS subdomain), as the API server checks them.
Namespace = Annotated[str, Field(pattern=rf"^{_DNS_LABEL}$", max_length=63)]
Subdomain = Annotated[str, Field(pattern=rf"^{_SUBDOMAIN}$", max_length=SUBDOMAIN_MAX)]

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
