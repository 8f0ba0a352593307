"""The JSON Schema of a stack file's `ascend-fleet:` keys, made from the config model that validates them.

One source, three uses: editors check a stack file while it is written (the `# yaml-language-server:
$schema=` line atop every committed stack), the suite validates every committed stack with a real
validator, and `docs/configuration.md` is rendered from this schema (`views/reference.py`), so the
reference, the schema and the validation cannot drift apart: the field docstrings of
`allocation/config.py` are their one text. What a JSON Schema cannot say (a rule across keys, a
Docker image reference's grammar) is said in the descriptions as what `plan` checks, from the
docstrings of the validators that check it. The shape is Pulumi's stack file: a top-level `config:`
mapping whose keys are `<namespace>:<key>`; keys of other namespaces are Pulumi's or other
providers' and are left alone, a misspelt `ascend-fleet:` key is refused. Pure.
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, WrapValidator
from pydantic.json_schema import GenerateJsonSchema

from allocation.config import NAMESPACE, QUOTED_NUMBER_KEYS, FleetConfig
from allocation.scalars import digits_between

DIALECT = "https://json-schema.org/draft/2020-12/schema"
PLAN_CHECKS = "`plan` also checks"
SECRET = {
    "description": "A value `pulumi config set --secret` wrote: the ciphertext, readable only by Pulumi.",
    "type": "object",
    "properties": {"secure": {"description": "The ciphertext, as Pulumi wrote it.", "type": "string"}},
    "required": ["secure"],
    "additionalProperties": False,
}
PROGRAM_ONLY = {
    "sshPrivateKey": {
        "description": "The private key the host checks use over SSH (else `ssh.identityFile`, else the ssh-agent). "
        "Set it as a secret: `pulumi config set --secret ascend-fleet:sshPrivateKey < KEY`; it stays a secret in "
        "state and outputs. Read by the Pulumi program only, never by `plan`.",
        "anyOf": [{"$ref": "#/$defs/Secret"}, {"type": "string"}],
    }
}
"""Keys the Pulumi program reads that the config model does not (allocation.config.PROGRAM_ONLY_KEYS)."""


class _Generator(GenerateJsonSchema):
    """pydantic's generator, with what a YAML file holds: numbers as numbers (a Decimal field also
    takes a string in Python, which a stack file never needs), and no titles made from field names."""

    def decimal_schema(self, schema: Any) -> dict[str, Any]:
        generated = super().decimal_schema(schema)
        numbers = [s for s in generated.get("anyOf", [generated]) if s.get("type") == "number"]
        return numbers[0] if numbers else generated

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def _validator_docs(annotation: Any, metadata: tuple[Any, ...] = ()) -> list[str]:
    """The docstrings of the validators of a field: in its own `metadata` (where pydantic keeps those of
    its outermost `Annotated`) and inside its type (`Annotated` metadata, at any depth)."""
    if typing.get_origin(annotation) is typing.Annotated:
        metadata = (*metadata, *annotation.__metadata__)
    found: list[str] = []
    for meta in metadata:
        if isinstance(meta, (AfterValidator, BeforeValidator, WrapValidator)) and meta.func.__doc__:
            found.append(" ".join(meta.func.__doc__.split()))
    for arg in typing.get_args(annotation):
        found += [d for d in _validator_docs(arg) if d not in found]
    return found


def _models(model: type[BaseModel], seen: dict[str, type[BaseModel]]) -> dict[str, type[BaseModel]]:
    """Every model reachable from `model`'s fields, by the name its `$defs` entry has."""
    seen.setdefault(model.__name__, model)
    for field in model.model_fields.values():
        stack = [field.annotation]
        while stack:
            t = stack.pop()
            if isinstance(t, type) and issubclass(t, BaseModel) and t.__name__ not in seen:
                _models(t, seen)
            stack += list(typing.get_args(t))
    return seen


def _checks(model: type[BaseModel]) -> tuple[list[str], dict[str, list[str]]]:
    """What `plan` checks beyond the schema: across the model's keys, and per key (by alias)."""
    decorators = model.__pydantic_decorators__
    across = [
        " ".join(d.func.__doc__.split())
        for d in decorators.model_validators.values()
        if d.info.mode == "after" and d.func.__doc__
    ]
    per_key: dict[str, list[str]] = {}
    for name, field in model.model_fields.items():
        docs = _validator_docs(field.annotation, tuple(field.metadata)) + [
            " ".join(d.func.__doc__.split())
            for d in decorators.field_validators.values()
            if name in d.info.fields and d.func.__doc__
        ]
        if docs:
            per_key[field.alias or name] = docs
    return across, per_key


def _with_checks(description: str | None, checks: list[str]) -> str:
    text = "\n".join(line.strip() for line in (description or "").splitlines())
    said = " ".join(c[0].lower() + c[1:] if c[:2].istitle() else c for c in checks)  # not "YAML", "A3"
    return (text + ("\n\n" if text else "") + f"{PLAN_CHECKS}: {said}") if checks else text


_BOUNDS = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum"}
"""pydantic 2.14 writes a bound it checks after a validator (a `Whole`'s, allocation.scalars) under
its own name, not JSON Schema's (pydantic/_internal/_known_annotated_metadata.py `apply_known_metadata`:
`pydantic_js_updates` keyed by the constraint)."""


def _tidy(node: Any) -> Any:
    """Descriptions as paragraphs (the docstrings' line breaks dropped), Decimal defaults as numbers,
    bounds by JSON Schema's names, and no `default` that repeats a whole nested object (its keys
    state their own)."""
    if isinstance(node, list):
        return [_tidy(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _tidy(v) for k, v in node.items()}
    if isinstance(out.get("description"), str):
        out["description"] = "\n\n".join(" ".join(p.split()) for p in out["description"].split("\n\n"))
    if out.get("type") in ("integer", "number"):
        out |= {key: out.pop(raw) for raw, key in _BOUNDS.items() if raw in out}
    default = out.get("default")
    if isinstance(default, dict) and "$ref" in out:
        del out["default"]
    elif isinstance(default, str) and _numeric(out):
        out["default"] = int(default) if default.isdigit() else float(default)
    return out


def _numeric(node: dict[str, Any]) -> bool:
    return node.get("type") == "number" or any(s.get("type") == "number" for s in node.get("anyOf", []))


def _annotate(schema: dict[str, Any]) -> None:
    """Each model's and each key's description gains what `plan` checks beyond the schema."""
    defs = schema["$defs"]
    for name, model in _models(FleetConfig, {}).items():
        node = schema if model is FleetConfig else defs.get(name)
        if node is None:
            continue
        across, per_key = _checks(model)
        node["description"] = _with_checks(node.get("description") or model.__doc__, across)
        for key, docs in per_key.items():
            prop = node["properties"][key]
            prop["description"] = _with_checks(prop.get("description"), docs)


def _top_level(key: str, node: dict[str, Any]) -> None:
    """A top-level key as Pulumi hands it to the program, as text (allocation.scalars): no null, which
    reaches the program as the empty text, and a number also written as text, within its bounds."""
    if "anyOf" in node:
        kept = [n for n in node.pop("anyOf") if n.get("type") != "null"]
        node.update(kept[0] if len(kept) == 1 else {"anyOf": kept})
        if node.get("default", "") is None:
            del node["default"]
    if key not in QUOTED_NUMBER_KEYS:
        return
    number = {k: node.pop(k) for k in ("type", "minimum", "exclusiveMinimum", "maximum") if k in node}
    node["anyOf"] = [number, {"title": "the same number as text", "type": "string", "pattern": f"^(?:{_digits(number)})$"}]


def _digits(number: dict[str, Any]) -> str:
    """The spellings `QUOTED_NUMBER` reads of the numbers `number` bounds (at least 0, whole bounds):
    for an integer, its digits (`8.0` too, which the program reads as 8); for a number, a decimal part too."""
    low = int(number.get("minimum", number.get("exclusiveMinimum", 0)))
    high = int(number["maximum"])
    if number["type"] == "integer":
        return f"(?:{digits_between(low, high)})(?:\\.0+)?"
    parts = [f"{low}\\.[0-9]*[1-9][0-9]*"] if "exclusiveMinimum" in number else []
    first = low + 1 if "exclusiveMinimum" in number else low
    parts += [f"(?:{digits_between(first, high - 1)})(?:\\.[0-9]+)?"] if first < high else []
    return "|".join([*parts, f"{high}(?:\\.0+)?"])


def config_schema() -> dict[str, Any]:
    """FleetConfig's JSON Schema, keys by their stack-file names, `plan`'s extra checks in the text."""
    schema = FleetConfig.model_json_schema(by_alias=True, schema_generator=_Generator)
    _annotate(schema)
    del schema["properties"]["stack"]  # the stack's name comes from the file's, never from a key
    schema["required"] = [k for k in schema.get("required", []) if k != "stack"]
    schema = _tidy(schema)
    for key, node in schema["properties"].items():
        _top_level(key, node)
    return schema


def stack_schema() -> dict[str, Any]:
    """The schema of a whole `Pulumi.<stack>.yaml`: its `config:` keys in the `ascend-fleet:` namespace.

    No key is required: a stack file may leave any of them, `hosts` included, to `Pulumi.yaml`'s project
    config (which has Pulumi's own shape, `value:` under each key, and is not checked here)."""
    fleet = config_schema()
    keys = {f"{NAMESPACE}:{k}": v for k, v in fleet["properties"].items()}
    keys |= {f"{NAMESPACE}:{k}": v for k, v in PROGRAM_ONLY.items()}
    return {
        "$schema": DIALECT,
        "title": "ascend-fleet stack file (Pulumi.<stack>.yaml)",
        "description": "The configuration of one stack. Reference: docs/configuration.md, written from the same model "
        "by `python -m allocation schema`.",
        "type": "object",
        "properties": {
            "config": {
                "description": fleet["description"],
                "type": "object",
                "properties": keys,
                "patternProperties": {f"^(?!{NAMESPACE}:)[^:]+:": {}},
                "additionalProperties": False,
            }
        },
        "$defs": fleet["$defs"] | {"Secret": SECRET},
    }
