"""`render --format kubernetes`: the stack's Kubernetes objects as YAML, for `kubectl apply` or review.

The objects come from `views.exports.kubernetes.manifests`, the ones the Kubernetes components
create. The YAML reads as a person writes it: bare keys, scripts and other multi-line text as literal
blocks (`|`), and quotes only on a string that a YAML reader would otherwise take for something else.
`kubectl` reads YAML 1.1 (sigs.k8s.io/yaml, over go-yaml v2), where `on`, `yes`, `y` or `1:30` are
not strings, and YAML 1.2 readers take `0o17` or `1e3` for numbers: a string that either version's
implicit types would resolve to anything but a string is double-quoted (ruamel.yaml's resolver
tables of both versions), so every reader gets the same objects. Keys stay in the order they were
built (`apiVersion`, `kind`, `metadata`, `spec`). A stack without DRA (`kubernetes.dra: false`) says
at the top of the stream, and on each pod's annotation, that the scheduler does not account for its
cards.
"""

from __future__ import annotations

import io
from typing import Any, Iterable

from ruamel.yaml import YAML
from ruamel.yaml.nodes import ScalarNode
from ruamel.yaml.representer import SafeRepresenter
from ruamel.yaml.resolver import VersionedResolver

from records.deployment import Deployment
from views.exports.kubernetes import UNACCOUNTED, Manifest, manifests


_STR = "tag:yaml.org,2002:str"
_READERS = (VersionedResolver(version=(1, 1)), VersionedResolver(version=(1, 2)))


def _read_as_text(value: str) -> bool:
    """Whether both YAML 1.1 and 1.2 read `value`, written plain, as the string it is."""
    return all(str(r.resolve(ScalarNode, value, (True, False))) == _STR for r in _READERS)


class _Readable(SafeRepresenter):
    """Mappings in the order they were built; strings as `_text` writes them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sort_base_mapping_type_on_output = False


def _text(representer: SafeRepresenter, data: str) -> Any:
    """Scripts as literal blocks: text with a line break or a double quote (a shell script, the start
    gate's `sh -c` argument), which a quoted scalar would have to escape; a string another reading
    would change, double-quoted; any other left to the emitter: plain, or quoted where plain YAML
    cannot hold it (a leading `*`, a `: `). The emitter quotes a block it cannot write (trailing
    spaces, control characters) instead."""
    style = "|" if "\n" in data or '"' in data else None if _read_as_text(data) else '"'
    return representer.represent_scalar(_STR, data, style=style)


_Readable.add_representer(str, _text)


def document(obj: Any) -> str:
    """One object as a YAML document (without the `---` that starts it in a stream)."""
    yaml = YAML(typ="safe", pure=True)
    yaml.Representer = _Readable
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
    return _header(deployment, objects) + "".join(f"---\n{document(dict(m.obj))}" for m in objects)


def files(deployment: Deployment) -> dict[str, str]:
    """One file per object, named `NNN-kind-name.yaml`: `kubectl apply -f DIR` reads a folder's files
    in name order, so the numbers keep the stream's order."""
    objects = manifests(deployment)
    width = max(3, len(str(len(objects))))
    return {
        f"{i:0{width}d}-{m.kind.lower()}-{m.name}.yaml": _header(deployment, (m,)) + document(dict(m.obj))
        for i, m in enumerate(objects, start=1)
    }
