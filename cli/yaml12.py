"""Reading stack files fast, with the meaning ruamel.yaml gives them.

Every `plan` reads the whole stack file, and a fleet of 1,300 hosts and 5,333 services is a
file of some 25,000 lines: ruamel's pure-Python loader took about 4 s of a 5-7 s `plan`.
PyYAML's `CParser` parses with libyaml, in C, and only builds the Python values in Python.

But PyYAML resolves plain scalars as YAML 1.1 does, and ruamel (which read stack files before)
as YAML 1.2's core schema does. Read by PyYAML's own `SafeLoader`, `yes`, `no`, `on` and `off`
would become booleans, `017` the octal 15, `1:30` the sexagesimal 90, and a key written twice
would silently keep its last value. So `load` uses libyaml's parser with the 1.2 core schema's
resolvers and constructors below and refuses duplicate keys, as ruamel does: `tests/test_yaml12.py`
checks that the two readers agree, value for value, on the scalars where YAML 1.1 and 1.2 differ
and on every committed stack file. `pin` and `profile` read (and check what they write) with it too.

The program under `pulumi up` reads the file otherwise: through the Pulumi CLI (gopkg.in/yaml.v3)
and JSON (`cli.pulumi_scalars`). A plain scalar the two read differently is refused with its line
and both readings (`_check`; a plain integer with a leading zero, `0X1F`, `1e400`, `.inf`, dates such
as `2001-1-1`), as are the tags `!!set`, `!!binary`, `!!omap` and `!!pairs`; a number both read alike
but print differently (`1.0`, which the program gets as `1`) comes back as a `Respelled` float, which
`cli.stackfile` refuses where it becomes text (env values). Aliases may not grow the document past
ten times its size (an alias bomb), nor values nest deeper than `MAX_DEPTH`. `load_other` reads other YAML
(a kubeconfig) as `yaml.safe_load` does, within the same bounds.

Errors are PyYAML's `YAMLError`s, with the line and column where the parser stopped.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml
from yaml.cyaml import CParser  # libyaml, which the PyYAML wheels of requirements.txt ship
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, ScalarNode
from yaml.resolver import BaseResolver, Resolver

from cli.pulumi_scalars import Refused, Timestamp, program_value

YAMLError = yaml.YAMLError


class Located(YAMLError):
    """Valid YAML refused at a line (counted from 1), with why."""

    def __init__(self, problem: str, line: int) -> None:
        super().__init__(problem)
        self.problem, self.line = problem, line


class Ambiguous(Located):
    """Valid YAML that another reader of the same file reads otherwise."""


MAX_DEPTH = 64
"""Levels of nesting a stack file may use: its services sit 4 levels down and their values 2 or 3 more (a
kubeconfig's deepest, an exec plugin's env, 7). Deeper text is refused with its line (`plan`, `pin`, `profile`
and `doctor`'s kubeconfig alike) rather than recursed into."""
TAG = "tag:yaml.org,2002:"
PLAIN_STR = "tag:ascend-fleet,2026:plain-str"


_NUMERIC_START = frozenset("+-.0123456789")


class Respelled(float):
    """A number both readers agree on whose text differs: `1.0` is `1.0` to `plan` but `1` to the
    program. Harmless where a number is wanted; `cli.stackfile` refuses it where it becomes text (env)."""

    pulumi: str
    line: int


class Resolver12(BaseResolver):
    """YAML 1.2's core schema, with ruamel's spelling of it (`ruamel/yaml/resolver.py`): no
    yes/no/on/off booleans, no sexagesimals, `0o` octals, and 1.1's `=`, `<<` and timestamps kept."""

    yaml_implicit_resolvers: dict[str, list[tuple[str, re.Pattern[str]]]] = {}

    def resolve(self, kind: Any, value: str, implicit: Any) -> str:
        """BaseResolver's, except that a plain scalar read as text gets a tag of its own, so its
        constructor can check Pulumi's reading (called once a scalar: kept short)."""
        if kind is ScalarNode and implicit[0]:
            for tag, regexp in self.yaml_implicit_resolvers.get(value[:1], ()):
                if regexp.match(value):
                    return tag
            return PLAIN_STR
        return super().resolve(kind, value, implicit)


for _tag, _pattern, _first in [
    ("bool", r"true|True|TRUE|false|False|FALSE", "tTfF"),
    (
        "float",
        r"[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)"
        r"|[-+]?\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
        "-+0123456789.",
    ),
    ("int", r"[-+]?0b[0-1_]+|[-+]?0o?[0-7_]+|[-+]?[0-9_]+|[-+]?0x[0-9a-fA-F_]+", "-+0123456789"),
    ("merge", r"<<", "<"),
    ("null", r"~|null|Null|NULL|", ["~", "n", "N", ""]),
    (
        "timestamp",
        r"[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?"
        r"(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?",
        "0123456789",
    ),
]:
    Resolver12.add_implicit_resolver(TAG + _tag, re.compile(f"^(?:{_pattern})$"), list(_first))


class BoundedConstructor(SafeConstructor):
    """PyYAML's safe constructor, refusing duplicate keys and values nested past `MAX_DEPTH` (`build`)."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == TAG + "merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                continue  # an unhashable key: the base class says so, with its place
            if duplicate:
                raise ConstructorError(
                    "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)

    def build(self, node: Any, built: dict[int, Any], depth: int = 0) -> Any:
        """The value of `node`, as `construct_document` makes it but without its generic machinery (a
        third of a `pin` at 4,000 services): plain maps, lists and scalars here; merge keys and other
        tags by the base class. `built`: collections already made, so an alias shares its object."""
        done = built.get(id(node))
        if done is not None:
            return done
        if depth > MAX_DEPTH:
            raise Located(f"nested more than {MAX_DEPTH} levels deep; a stack file or kubeconfig needs a handful: "
                          "flatten that value", node.start_mark.line + 1)  # fmt: skip
        tag = node.tag
        if isinstance(node, ScalarNode):
            make = self.yaml_constructors.get(tag)
            return make(self, node) if make is not None else self.construct_object(node, deep=True)
        if tag == TAG + "seq":
            built[id(node)] = out = []
            for child in node.value:
                out.append(self.build(child, built, depth + 1))
            return out
        if tag != TAG + "map" or any(key.tag == TAG + "merge" for key, _ in node.value):
            return self.construct_object(node, deep=True)
        built[id(node)] = mapping = {}
        for key_node, value_node in node.value:
            key = self.build(key_node, built, depth + 1)
            try:
                duplicate = key in mapping
            except TypeError:
                raise ConstructorError("while constructing a mapping", node.start_mark,
                                       "found unhashable key", key_node.start_mark) from None  # fmt: skip
            if duplicate:
                raise ConstructorError(
                    "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
                )
            mapping[key] = self.build(value_node, built, depth + 1)
        return mapping


class Constructor12(BoundedConstructor):
    """The bounded constructor with 1.2's integers, floats and booleans, and the Pulumi CLI's readings checked."""

    def construct_plain_str(self, node: Any) -> str:
        text = self.construct_scalar(node)
        if text[:1] in _NUMERIC_START:  # only these can be something else to the Pulumi CLI (`.inf`, `0X1F`, `2001-1-1`)
            _check(text, text, node)
        return text

    def construct_yaml_bool(self, node: Any) -> bool:
        return self.construct_scalar(node).lower() == "true"

    def construct_yaml_int(self, node: Any) -> int:
        scalar = node.value
        if scalar.isascii() and scalar.isdigit() and len(scalar) < 19 and (scalar[0] != "0" or scalar == "0"):
            return int(scalar)  # a plain decimal in int64's range: every reader reads it alike
        text = self.construct_scalar(node).replace("_", "")
        sign = -1 if text[:1] == "-" else 1
        text = text[1:] if text[:1] in ("-", "+") else text
        if not text:  # `_`: the core schema's pattern matches it, and it is no number
            raise ConstructorError(None, None, "an integer without digits", node.start_mark)
        for prefix, base in (("0b", 2), ("0x", 16), ("0o", 8)):
            if text.startswith(prefix):
                return sign * int(text[2:], base)
        if len(text) > 1 and text.startswith("0"):
            raise Ambiguous(_leading_zero(self.construct_scalar(node), sign, text), node.start_mark.line + 1)
        return _check(sign * int(text), self.construct_scalar(node), node)

    def construct_yaml_float(self, node: Any) -> float:
        text = self.construct_scalar(node).replace("_", "").lower()
        sign = -1 if text[:1] == "-" else 1
        text = text[1:] if text[:1] in ("-", "+") else text
        if text == ".inf":
            value = sign * math.inf
        else:
            value = math.nan if text == ".nan" else sign * float(text)
        return _check(value, self.construct_scalar(node), node)

    def refuse_tag(self, node: Any) -> Any:
        tag = node.tag.replace(TAG, "!!")
        raise Ambiguous(
            f"the tag {tag} is read one way by `plan` (a Python {tag[2:]}) and another by the Pulumi CLI "
            "(gopkg.in/yaml.v3: a set becomes a mapping of keys to null, binary its decoded text, a timestamp "
            "Go's time text); write the plain list, text or quoted date that is meant",
            node.start_mark.line + 1,
        )


def _text(value: Any) -> str:
    """A reading as an env value's text, or as words for a message."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Timestamp):
        return f"a timestamp ({value.text})" if value.text != "a timestamp" else value.text
    return "null" if value is None else str(value)


def _check(ours: Any, scalar: str, node: Any) -> Any:
    """`ours`, if the program under `pulumi up` reads the plain scalar as the same value (a `Respelled`
    float when only the text differs), else Ambiguous with the line and both readings."""
    if node.style:  # quoted (libyaml gives a plain scalar the style ""): text to both readers
        return ours
    theirs = program_value(scalar)
    line = node.start_mark.line + 1
    if isinstance(theirs, Refused):
        raise Ambiguous(f"{scalar} cannot be passed on by the Pulumi CLI: {theirs.why}; quote it or remove it", line)
    same_kind = isinstance(ours, str) == isinstance(theirs, str) and isinstance(ours, bool) == isinstance(theirs, bool)
    if same_kind and ours == theirs and not isinstance(theirs, Timestamp):
        if _text(ours) == _text(theirs):
            return ours
        respelled = Respelled(ours)
        respelled.pulumi, respelled.line = _text(theirs), line
        return respelled
    raise Ambiguous(
        f"the plain value {scalar} is read as {_text(ours)!r} by `plan` but as {_text(theirs)!r} by the Pulumi CLI "
        "(gopkg.in/yaml.v3, what `pulumi up` hands the program), so the plan and `pulumi up` would disagree; "
        f"quote it (\"{scalar}\") to mean the text"
        + (f", or write the number as {_text(theirs)}" if isinstance(theirs, (int, float)) else ""),
        line,
    )


def _leading_zero(scalar: str, sign: int, digits: str) -> str:
    """Why a plain number written with a leading zero is refused: the two readers of a stack file
    disagree on it. YAML 1.2 (and `plan`) reads `017` as 17; the Pulumi CLI, which hands `pulumi up`
    its config, reads it with gopkg.in/yaml.v3 (`resolve.go`: `strconv.ParseInt(plain, 0, 64)`) as
    octal 15 (checked with pulumi v3.274.0's `pulumi config --json`; `08` stays 8 there)."""
    octal = all(c in "01234567" for c in digits)
    pulumi = sign * int(digits, 8 if octal else 10)
    return (
        f"the number {scalar} is written with a leading zero: `plan` reads it as {sign * int(digits)} but the "
        f"Pulumi CLI as {pulumi}{' (octal)' if octal and pulumi != sign * int(digits) else ''}, so the plan and "
        "`pulumi up` could disagree; write it without the leading zero (or 0o... for octal, or quote it as text)"
    )


Constructor12.add_constructor(TAG + "bool", Constructor12.construct_yaml_bool)
Constructor12.add_constructor(TAG + "int", Constructor12.construct_yaml_int)
Constructor12.add_constructor(TAG + "float", Constructor12.construct_yaml_float)
Constructor12.add_constructor(PLAIN_STR, Constructor12.construct_plain_str)
Constructor12.add_constructor(TAG + "timestamp", Constructor12.construct_plain_str)  # always refused: see _check
for _tag in ("set", "binary", "omap", "pairs"):
    Constructor12.add_constructor(TAG + _tag, Constructor12.refuse_tag)


class Loader12(CParser, Constructor12, Resolver12):
    def __init__(self, stream: str) -> None:
        CParser.__init__(self, stream)
        Constructor12.__init__(self)
        Resolver12.__init__(self)


class BoundedLoader(CParser, BoundedConstructor, Resolver):
    """PyYAML's `CSafeLoader` (YAML 1.1, the types of `yaml.safe_load`) with a stack file's bounds, for
    YAML that is not a stack file: a kubeconfig (`ops.kube_api`)."""

    def __init__(self, stream: str) -> None:
        CParser.__init__(self, stream)
        BoundedConstructor.__init__(self)
        Resolver.__init__(self)


MAX_EXPANDED = 100_000
"""Nodes a document may grow to by its aliases beyond ten times its own: a billion-laughs of 684 bytes grows
to 10**9. The Pulumi CLI refuses such a file too (gopkg.in/yaml.v3 `decode.go`: "document contains excessive
aliasing"), and so does kubectl a kubeconfig (sigs.k8s.io/yaml reads with gopkg.in/yaml.v2, whose `decode.go` has
the same check since v2.2.4, the fix of CVE-2019-11253, kubernetes/kubernetes#83253); a stack file or kubeconfig
without aliases never comes near."""


def _expanded(root: Any) -> tuple[int, int]:
    """The nodes of the graph under `root`, and how many it holds once every alias is followed
    (each node counted once per path to it), without following any: memoised, iterative."""
    size: dict[int, int] = {}
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in size and not done:
            continue
        children = [c for pair in node.value for c in pair] if isinstance(node, MappingNode) else node.value
        children = [] if isinstance(node, ScalarNode) else children
        if done:
            size[id(node)] = 1 + sum(size.get(id(c), 1) for c in children)  # 1: a node on a cycle
        else:
            size[id(node)] = 1  # while open: a cycle back to it counts once
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in size)
    return len(size), size[id(root)]


def load(text: str) -> Any:
    """The one YAML document in `text`, as YAML 1.2 (and ruamel) reads it; an alias bomb is refused
    before anything is built from it. The last text read is remembered (`pin` and `profile` read the
    stack file for the plan, then again to edit it): callers must not change what they are given."""
    global _last
    if _last is not None and _last[0] == text:
        return _last[1]
    doc = _load(text, Loader12)
    _last = (text, doc)
    return doc


_last: tuple[str, Any] | None = None


def load_other(text: str) -> Any:
    """The one YAML document in `text`, a file other than a stack file (a kubeconfig), read as
    `yaml.safe_load` reads it but with the bounds of `load`: an alias bomb and nesting past `MAX_DEPTH`
    are refused before anything is built from them, and a key written twice too."""
    return _load(text, BoundedLoader)


def _load(text: str, reader: type[Loader12] | type[BoundedLoader]) -> Any:
    loader = reader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        own, grown = _expanded(node) if "*" in text else (0, 0)  # no `*`, no alias
        if grown > max(MAX_EXPANDED, 10 * own):
            raise YAMLError(
                f"its aliases expand {own:,} nodes to more than {max(MAX_EXPANDED, 10 * own):,} (an alias bomb?); "
                "Go's YAML readers refuse it too (gopkg.in/yaml's 'excessive aliasing', in the Pulumi CLI and kubectl): "
                "write the values out"
            )
        return loader.build(node, {})
    finally:
        loader.dispose()
