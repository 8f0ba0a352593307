"""One Kubernetes object of `views.exports.kubernetes` as one pulumi-kubernetes resource.

Typed resources, one per object, rather than a `yaml.v2.ConfigGroup` over the stream: the engine
then diffs each object on its own (a changed pod template updates only its Deployment, whose
`Recreate` strategy stops the old pod before the new one takes the cards), the options below apply
per kind, and Pulumi's mocks see every object (a ConfigGroup's children are made by the provider).

- Deployment: updated in place when its template changes (the rollout is Kubernetes'); replaced,
  old one deleted first, when its immutable `spec.selector` changes, since its name is fixed. The
  provider waits for it to be ready (pulumi-kubernetes' await logic for apps/v1 Deployment), for at
  most the container's create timeout: a model that loads for half an hour must not time out at 10 min.
- ResourceClaim: its spec is immutable (kubernetes/kubernetes staging/src/k8s.io/api/resource/v1/
  types.go: "The spec is immutable"), so any change replaces it, deleting the old one first (its
  name is fixed). pulumi-kubernetes 4.25 has no typed `resource.k8s.io/v1` class; its
  `apiextensions.CustomResource` takes any apiVersion and kind.
- LeaderWorkerSet (a multi-host service): a custom resource of LWS's CRD (`apiextensions.CustomResource`),
  updated in place: a changed template is LWS's rollout, which with `maxSurge: 0` deletes the group before the
  new one starts; replaced, old one deleted first, when it must be (its name is fixed). pulumi-kubernetes
  awaits no custom resource: `pulumi up` returns once the API server holds it.
- Service, ConfigMap: updated in place.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import pulumi
import pulumi_kubernetes as k8s

from views.exports.kubernetes import LWS_API, RESOURCE_API, Manifest


def resource_name(m: Manifest) -> str:
    """The object's Pulumi name: its kind and its Kubernetes name, unique in a stack."""
    return f"{m.kind.lower()}-{m.name}"


def _options(parent: pulumi.Resource, depends_on: Sequence[pulumi.Resource], **more: object) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on), **more)


def create(
    m: Manifest, parent: pulumi.Resource, depends_on: Sequence[pulumi.Resource] = (), timeout_seconds: int | None = None
) -> pulumi.CustomResource:
    """The resource of `m`, a child of `parent`, created after `depends_on`."""
    name, obj = resource_name(m), m.obj
    meta: Mapping = obj["metadata"]
    if m.kind == "ResourceClaim":
        assert obj["apiVersion"] == RESOURCE_API
        opts = _options(parent, depends_on, delete_before_replace=True, replace_on_changes=["spec"])
        return k8s.apiextensions.CustomResource(name, api_version=RESOURCE_API, kind=m.kind, metadata=meta, spec=obj["spec"], opts=opts)
    if m.kind == "LeaderWorkerSet":
        assert obj["apiVersion"] == LWS_API
        opts = _options(parent, depends_on, delete_before_replace=True)
        return k8s.apiextensions.CustomResource(name, api_version=LWS_API, kind=m.kind, metadata=meta, spec=obj["spec"], opts=opts)
    if m.kind == "Deployment":
        timeouts = None if timeout_seconds is None else pulumi.CustomTimeouts(create=f"{timeout_seconds}s", update=f"{timeout_seconds}s")
        opts = _options(parent, depends_on, delete_before_replace=True, custom_timeouts=timeouts)
        return k8s.apps.v1.Deployment(name, metadata=meta, spec=obj["spec"], opts=opts)
    if m.kind == "Service":
        return k8s.core.v1.Service(name, metadata=meta, spec=obj["spec"], opts=_options(parent, depends_on))
    if m.kind == "ConfigMap":
        return k8s.core.v1.ConfigMap(name, metadata=meta, data=obj["data"], opts=_options(parent, depends_on))
    raise ValueError(f"no resource for kind {m.kind}")  # every kind the export makes is above
