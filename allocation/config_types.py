"""The building blocks every config model shares: the strict base model, constrained values (names,
ports, fractions, powers of two) and port ranges with the pins the windows table implies.

Split out of `allocation.config` so that the host, profile and group models can live in modules of
their own without importing the whole stack configuration; `allocation.config` re-exports them. Pure.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WrapValidator, create_model, model_validator
from pydantic.alias_generators import to_camel
from pydantic.json_schema import WithJsonSchema

from allocation.scalars import Number, Whole, digits_between
from allocation.windows import KINDS, MAX_PORT, ROUTER_KINDS, PortWindow, WindowKind, window_text

# Memory fractions are compared in integer units of 1/10000 so that 0.1 + 0.85
# fits a 0.95 budget exactly, with no floating-point surprises.
FRACTION_SCALE = 10_000


def _multiple_of_scale(value: Decimal) -> Decimal:
    """At most 4 decimal places."""
    if (value * FRACTION_SCALE) % 1:
        raise ValueError(f"{value} has more than 4 decimal places")
    return value


def _power_of_two(value: int) -> int:
    if value & (value - 1):
        raise ValueError(f"{value} is not a power of two (1, 2, 4, 8, 16)")
    return value


Name = Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$", max_length=63)]
# A Docker container name as Docker allows it (moby daemon/names: `[a-zA-Z0-9][a-zA-Z0-9_.-]+`).
ContainerName = Annotated[str, Field(pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$")]
Port = Annotated[Whole, Field(ge=1024, le=MAX_PORT)]
AnyPort = Annotated[Whole, Field(ge=1, le=MAX_PORT)]
Fraction = Annotated[Number, Field(gt=0, le=1), AfterValidator(_multiple_of_scale)]
PowerOfTwo = Annotated[
    Whole, Field(ge=1, le=16), AfterValidator(_power_of_two), WithJsonSchema({"type": "integer", "enum": [1, 2, 4, 8, 16]})
]
# `auto` or a Fraction, with a Fraction's own error messages for anything else.
def _fraction_or_auto(value: Any, fraction: Any) -> Any:
    if value == "auto":
        return value
    if isinstance(value, str) and value.strip().lower() == "auto":
        raise ValueError(f"{value!r}: write auto in lowercase")
    return fraction(value)


FractionOrAuto = Annotated[
    Fraction,
    WrapValidator(_fraction_or_auto),
    WithJsonSchema({"anyOf": [{"type": "number", "exclusiveMinimum": 0, "maximum": 1}, {"const": "auto"}]}),
]
PortCount = Annotated[Whole, Field(ge=1, le=1024)]

def units(fraction: Decimal) -> int:
    """A memory fraction in exact integer units of 1/FRACTION_SCALE."""
    return int(fraction * FRACTION_SCALE)

class Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
    )


RANGE_TEXT = re.compile(rf" *({digits_between(1, MAX_PORT)})(?: *- *({digits_between(1, MAX_PORT)}))? *")
"""A port range written as text (`"60000-60031"`, `"22"`): what `PortRange` reads, and its schema states."""


class PortRange(Model):
    """An inclusive port range, written `[first, last]` in YAML."""

    first: AnyPort
    last: AnyPort

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        """Every way a stack file writes a range (`_from_pair`): `[a, b]`, `"a-b"`, one port, or the keys."""
        port = {"type": "integer", "minimum": 1, "maximum": MAX_PORT}
        keys = {"type": "object", "properties": {"first": port, "last": port}, "required": ["first", "last"]}
        return {
            "description": cls.__doc__,
            "anyOf": [
                {"type": "array", "prefixItems": [port, port], "minItems": 2, "maxItems": 2},
                {"title": f'text, "first-last" or one port, each 1-{MAX_PORT}', "type": "string", "pattern": f"^{RANGE_TEXT.pattern}$"},
                port,
                keys | {"additionalProperties": False},
            ],
        }

    @model_validator(mode="before")
    @classmethod
    def _from_pair(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            if len(value) != 2:
                raise ValueError("a port range is [first, last]")
            return {"first": value[0], "last": value[1]}
        if isinstance(value, str):
            match = RANGE_TEXT.fullmatch(value)
            if match is None:
                raise ValueError(f'{value!r} is not a port range: write [first, last], "first-last" or one port, each 1-{MAX_PORT}')
            return {"first": int(match[1]), "last": int(match[2] or match[1])}
        if isinstance(value, (int, float)):  # a boolean too, which the port's type refuses by its name
            return {"first": value, "last": value}
        return value

    @model_validator(mode="after")
    def _ordered(self) -> PortRange:
        """The range does not end before it starts."""
        if self.last < self.first:
            raise ValueError(f"range {self.first}-{self.last} ends before it starts")
        return self

    @property
    def window(self) -> PortWindow:
        return self.first, self.last

    def __str__(self) -> str:
        return window_text(self.window)


def _pin_fields(kinds: tuple[WindowKind, ...]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for k in kinds:
        if k.shape == "range":
            kind: Any = PortRange
        elif k.count_key:  # the size is policy: the planner checks the end against 65535
            kind = Port
        else:
            kind = Annotated[Whole, Field(ge=1024, le=MAX_PORT - k.size + 1)]
        text = f"Pin: {k.doc}" + (f" (`{k.env}`)" if k.env else "") + "."
        fields[k.key] = (kind | None, Field(default=None, description=text))
    return fields


class _Pinned(Model):
    """What pins windows: a service, or one replica of it."""

    def pinned(self, kind: WindowKind, size: int) -> PortWindow | None:
        """The window of `kind` pinned here (`size` ports from a pinned port); None if unpinned."""
        value = getattr(self, kind.key)
        if isinstance(value, PortRange):
            return value.window
        return (value, value + size - 1) if value is not None else None


def card_count_problems(pins: list[Any] | None, tp: int, where: str = "") -> list[str]:
    """Each `replicaPins` entry (under `where`, e.g. `prefill.`) whose `devices` are not `tp` cards, one problem each."""
    return [
        f"{where}replicaPins entry {i}: devices {p.devices} pins {len(p.devices)} cards but {where}tensorParallelSize is {tp}"
        for i, p in enumerate(pins or (), start=1)
        if p.devices is not None and len(p.devices) != tp
    ]


_WindowPins: type[_Pinned] = create_model("_WindowPins", __base__=_Pinned, **_pin_fields(KINDS))
_RouterPins: type[Model] = create_model("_RouterPins", __base__=Model, **_pin_fields(ROUTER_KINDS))

