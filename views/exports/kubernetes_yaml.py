"""`render --format kubernetes`: the stack's Kubernetes objects as YAML, for `kubectl apply` or review.

The objects come from `views.exports.kubernetes.manifests`, the ones the Kubernetes components
create. Every string is double-quoted, so `kubectl` (sigs.k8s.io/yaml, a YAML 1.1 reader) and YAML
1.2 readers agree that `on`, `yes` or `0,1` are strings; keys stay in the order they were built
(`apiVersion`, `kind`, `metadata`, `spec`). A stack without DRA (`kubernetes.dra: false`) says at
the top of the stream, and on each pod's annotation, that the scheduler does not account for its cards.
"""

from __future__ import annotations

import io
from typing import Any, Iterable

from ruamel.yaml import YAML
from ruamel.yaml.representer import SafeRepresenter

from records.deployment import Deployment
from views.exports.kubernetes import UNACCOUNTED, Manifest, manifests


class _Quoted(SafeRepresenter):
    """Strings double-quoted, mappings in the order they were built."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sort_base_mapping_type_on_output = False


_Quoted.add_representer(str, lambda r, data: r.represent_scalar("tag:yaml.org,2002:str", data, style='"'))


def _yaml(obj: Any) -> str:
    yaml = YAML(typ="safe", pure=True)
    yaml.Representer = _Quoted
    yaml.default_flow_style = False
    yaml.width = 4096
    out = io.StringIO()
    yaml.dump(obj, out)
    return out.getvalue()


def unaccounted(objects: Iterable[Manifest]) -> list[str]:
    """The lines that say which cards the scheduler does not account for (no DRA), one per pod."""
    found = []
    for m in objects:
        if m.kind == "Deployment" and UNACCOUNTED in m.obj["metadata"].get("annotations", {}):
            found.append(f"{m.name}: {m.obj['metadata']['annotations'][UNACCOUNTED]}")
    return found


def _header(deployment: Deployment, objects: tuple[Manifest, ...]) -> str:
    k8s = deployment.plan.fleet.kubernetes
    lines = [
        f"ascend-fleet stack {deployment.stack}: {len(objects)} object(s) for namespace {k8s.namespace}, "
        f"network {k8s.network}, DRA {'on' if k8s.dra else 'off'}; apply in this order (docs/kubernetes.md)",
        *(f"UNACCOUNTED by the scheduler: {line}" for line in unaccounted(objects)),
    ]
    return "".join(f"# {line}\n" for line in lines)


def stream(deployment: Deployment) -> str:
    """Every object, one YAML document each, in the order to apply them."""
    objects = manifests(deployment)
    return _header(deployment, objects) + "".join(f"---\n{_yaml(dict(m.obj))}" for m in objects)


def files(deployment: Deployment) -> dict[str, str]:
    """One file per object, named `NNN-kind-name.yaml`: `kubectl apply -f DIR` reads a folder's files
    in name order, so the numbers keep the stream's order."""
    objects = manifests(deployment)
    width = max(3, len(str(len(objects))))
    return {
        f"{i:0{width}d}-{m.kind.lower()}-{m.name}.yaml": _header(deployment, (m,)) + _yaml(dict(m.obj))
        for i, m in enumerate(objects, start=1)
    }
