"""A service's `vllm serve` arguments read as vLLM reads them: the one reader of the options the plan
looks at (the capacity check, the router policy, the graph pool, `profile` and the diff). Pure.

What vLLM does, read in its source (vllm-project/vllm `vllm/utils/argparse_utils.py` at 00da11e3,
`FlexibleArgumentParser.parse_args`; `vllm/engine/arg_utils.py` at 99d7eb5d, `_compute_kwargs`):

- Every word that starts with `--` has its underscores turned into dashes from the `--` up to the
  first `.` (and, in `--name=value`, only in the name): `--enable_prefix_caching` is
  `--enable-prefix-caching`, `--kv_cache_dtype=fp8` is `--kv-cache-dtype=fp8`. Values are untouched.
- Every boolean field is an `argparse.BooleanOptionalAction`: `--X` sets it, `--no-X` clears it,
  neither takes a value (argparse refuses `--X=true`, and a word after `--X` is left over).
- `--X.key value` (dotted) builds one JSON object per option, added after every other argument,
  so it replaces a `--X '{...}'` wherever that stood; the value is JSON, else a word.
- The rest is argparse: `--X value` or `--X=value`; of a repeated option the last one wins; a word
  that starts with `-` (but not a negative number) is never a value; an unambiguous prefix of an
  option is that option (`allow_abbrev`), which the plan cannot tell apart from vLLM's other options,
  so it refuses prefixes of those it reads.
- A list option (`--cudagraph-capture-sizes 1 2 4`, argparse's `nargs="+"`) takes every word after
  it up to the next option, one value after `=`.
- `--cudagraph-capture-sizes` and `--max-cudagraph-capture-size` are mutually exclusive with the same
  keys of `--compilation-config` (vllm@0.20.2 `engine/arg_utils.py` `create_engine_config`: "...
  are mutually exclusive").
- Whole numbers go through Python's `int()`, which takes any Unicode decimal digit (`١٦` is 16),
  surrounding spaces and `_` between digits (`1_6`), and refuses other digits (`¹⁶`). An optional
  option (`block_size: BlockSize | None`, `speculative_config: SpeculativeConfig | None`) reads
  `None` or an empty value as unset (`optional_type`).

Short options (`-tp`, `-O3`, `-cc`) and `--config FILE` are not read here: the plan owns `-tp`, and the
others set nothing the plan reads (a `--config` file inside the container is out of the plan's sight).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Sequence

BOOLEANS = {
    "--enable-prefix-caching": "prefix_caching",
    "--enable-chunked-prefill": "chunked_prefill",
    "--enforce-eager": "enforce_eager",
}
"""Boolean options the plan reads, and the field of `VllmArgs` each sets."""
VALUED = {
    "--block-size": "block_size",
    "--speculative-config": "speculative_tokens",
    "--dtype": "dtype",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--compilation-config": "compilation",
    "--max-cudagraph-capture-size": "max_capture_size",
}
"""Options with a value the plan reads, and the field of `VllmArgs` each sets."""
LISTS = {"--cudagraph-capture-sizes": "capture_sizes"}
"""Options with one or more values (`nargs="+"`) the plan reads, and the field of `VllmArgs` each sets."""
DOTTED = ("--speculative-config", "--compilation-config")
"""Options that take dotted keys (`--compilation-config.cudagraph_capture_sizes '[1, 2]'`)."""
CAPTURE_KEYS = {"cudagraph_capture_sizes": "capture_sizes", "max_cudagraph_capture_size": "max_capture_size"}
"""The keys of `--compilation-config` the plan reads, and the field of `VllmArgs` each sets."""
MAX_BLOCK_SIZE = 1 << 20
MAX_SPECULATIVE_TOKENS = 64
MAX_CAPTURE_SIZE = 1 << 20
_NEGATIVE_NUMBER = re.compile(r"-\d+|-\d*\.\d+")  # argparse's `_negative_number_matcher`
_NAMES = (*BOOLEANS, *(f"--no-{b[2:]}" for b in BOOLEANS), *VALUED, *LISTS)


class ArgsError(ValueError):
    """vLLM would refuse the arguments, or read them in a way the plan cannot follow; the message
    names the option."""


@dataclass(frozen=True)
class VllmArgs:
    """The options the plan reads, as vLLM would set them; None where the arguments leave vLLM's default."""

    prefix_caching: bool | None = None
    chunked_prefill: bool | None = None
    enforce_eager: bool | None = None
    block_size: int | None = None
    speculative_tokens: int = 0
    """`num_speculative_tokens` of `--speculative-config`; 0 without one."""
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    capture_sizes: tuple[int, ...] | None = None
    """The batch sizes to capture NPU graphs for: `cudagraph_capture_sizes` of `--compilation-config`,
    or `--cudagraph-capture-sizes`."""
    max_capture_size: int | None = None
    """`max_cudagraph_capture_size` of `--compilation-config`, or `--max-cudagraph-capture-size`."""


def spelled(word: str) -> str:
    """`word` as FlexibleArgumentParser hands it to argparse: underscores of an option's name (up to
    the first `.`) become dashes; anything that is not a `--` word is unchanged."""
    if not word.startswith("--"):
        return word
    key, eq, value = word.partition("=")
    name, dot, path = key.partition(".")
    return name.replace("_", "-") + dot + path + eq + value


def _shown(value: str) -> str:
    return repr(value if len(value) <= 60 else value[:60] + "...")


def _option(name: str, word: str) -> str | None:
    """The option of `_NAMES` that `name` is; None for any other; refuses an abbreviation of one."""
    if name in _NAMES:
        return name
    longer = sorted(n for n in _NAMES if n.startswith(name) and len(name) > 2)
    if longer:
        raise ArgsError(
            f"{_shown(word)} is an abbreviation of {longer[0]}: vLLM (argparse) may read it as that option, "
            "so write the option in full"
        )
    return None


def _value_after(args: Sequence[str], i: int, option: str) -> str:
    if i + 1 < len(args) and (not args[i + 1].startswith("-") or _NEGATIVE_NUMBER.fullmatch(args[i + 1])):
        return args[i + 1]
    raise ArgsError(f"{option} needs a value after it (vLLM: 'expected one argument')")


def read_args(args: Sequence[str]) -> VllmArgs:
    """The options of `args` the plan reads, as vLLM reads them; ArgsError naming the option vLLM
    would refuse (or that the plan cannot read)."""
    found: dict[str, Any] = {}
    dotted: dict[str, dict[str, Any]] = {}
    i = 0
    while i < len(args) and args[i] != "--":  # after `--`, argparse reads no option
        word = args[i]
        i += 1
        if not word.startswith("--"):
            continue  # a value of an option the plan does not read, or a short option: vLLM's to judge
        key, eq, value = spelled(word).partition("=")
        name, dot, path = key.partition(".")
        option = _option(name, word)
        if option is None:
            continue
        if dot:
            if option not in DOTTED:
                raise ArgsError(f"{_shown(word)}: {option} takes no dotted keys")
            value = value if eq else _value_after(args, i - 1, word)
            i += 0 if eq else 1
            dotted.setdefault(option, {})[path] = _dotted_value(option, value)
        elif option in VALUED:
            value = value if eq else _value_after(args, i - 1, option)
            i += 0 if eq else 1
            found[VALUED[option]] = _converted(option, value)
        elif option in LISTS:
            values = [value] if eq else _values_after(args, i, option)
            i += 0 if eq else len(values)
            found[LISTS[option]] = tuple(_capture_size(option, v) for v in values)
        else:
            found.update(_boolean(option, eq, word, args[i] if i < len(args) else None))
    for option, config in dotted.items():  # added after every other argument: it replaces the JSON
        found[VALUED[option]] = _from_json(option, config, f"{option}." + ", ".join(sorted(config)))
    return VllmArgs(**_compilation(found))


def _values_after(args: Sequence[str], i: int, option: str) -> list[str]:
    """The words after a list option, up to the next option (argparse's `nargs="+"`)."""
    values = []
    while i < len(args) and (not args[i].startswith("-") or _NEGATIVE_NUMBER.fullmatch(args[i])):
        values.append(args[i])
        i += 1
    if not values:
        raise ArgsError(f"{option} needs a value after it (vLLM: 'expected at least one argument')")
    return values


def _compilation(found: dict[str, Any]) -> dict[str, Any]:
    """`found` with `--compilation-config`'s capture keys moved to their fields; vLLM refuses a key set
    both there and by its own option."""
    config = found.pop("compilation", None) or {}
    for field, value in config.items():
        if field in found:
            option = next(o for o, f in {**VALUED, **LISTS}.items() if f == field)
            key = next(k for k, f in CAPTURE_KEYS.items() if f == field)
            raise ArgsError(f"{option} and --compilation-config's {key} are mutually exclusive (vLLM refuses both)")
        found[field] = value
    return found


def _boolean(option: str, eq: str, word: str, following: str | None) -> dict[str, bool]:
    if eq:
        raise ArgsError(f"{_shown(word)}: {option} takes no value (vLLM: 'ignored explicit argument')")
    if following is not None and not following.startswith("-"):
        raise ArgsError(
            f"{option} takes no value, so vLLM would refuse the word {_shown(following)} after it "
            "('unrecognized arguments')"
        )
    name = option.replace("--no-", "--", 1)
    return {BOOLEANS[name]: name == option}


def _converted(option: str, value: str) -> Any:
    if option == "--block-size":
        return _block_size(value)
    if option in DOTTED:
        if value in ("", "None"):
            return _from_json(option, {}, option)
        return _from_json(option, _json_object(option, value), option)
    if option == "--max-cudagraph-capture-size":
        return _capture_size(option, value)
    return value


def _from_json(option: str, config: dict[str, Any], where: str) -> Any:
    """What the plan reads of a JSON option's object: the speculative tokens, or the capture keys."""
    if option == "--speculative-config":
        return _speculative_tokens(config, where)
    sizes, top = config.get("cudagraph_capture_sizes"), config.get("max_cudagraph_capture_size")
    if sizes is not None and not isinstance(sizes, list):
        raise ArgsError(f"{where}: cudagraph_capture_sizes is a JSON {type(sizes).__name__}, not a list of batch sizes")
    read = {"capture_sizes": None if sizes is None else tuple(_capture_size(where, s) for s in sizes),
            "max_capture_size": None if top is None else _capture_size(where, top)}  # fmt: skip
    return {field: value for field, value in read.items() if value is not None}


def _capture_size(where: str, value: Any) -> int:
    """A batch size to capture graphs for: a whole number as vLLM's `int()` reads it, 1 or more."""
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise ArgsError(f"{where}: {_shown(value)} is not a batch size: vLLM reads it with int(), which refuses it") from None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_CAPTURE_SIZE:
        shown = repr(value) if isinstance(value, (int, float)) else f"a JSON {type(value).__name__}"
        raise ArgsError(f"{where}: {shown[:60]} is not a batch size (1 to {MAX_CAPTURE_SIZE})")
    return value


def _block_size(value: str) -> int | None:
    if value in ("", "None"):
        return None
    try:
        size = int(value)
    except ValueError:
        raise ArgsError(f"--block-size {_shown(value)} is not a block size: vLLM reads it with int(), which refuses it") from None
    if not 0 < size <= MAX_BLOCK_SIZE:
        raise ArgsError(f"--block-size {_shown(value)} is not a block size (1 to {MAX_BLOCK_SIZE} tokens)")
    return size


def _json_object(option: str, value: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value)
    except RecursionError:
        raise ArgsError(f"{option} {_shown(value)} nests deeper than a JSON reader follows") from None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise ArgsError(f"{option} {_shown(value)} is not a JSON object")
    return parsed


def _dotted_value(option: str, value: str) -> Any:
    """A dotted option's value: JSON, else the word (vLLM also reads `1k`-style numbers; a count has none)."""
    try:
        return json.loads(value)
    except RecursionError:
        raise ArgsError(f"{option}. value {_shown(value)} nests deeper than a JSON reader follows") from None
    except ValueError:
        return value


def _speculative_tokens(config: dict[str, Any], where: str) -> int:
    tokens = config.get("num_speculative_tokens", 0)
    if not isinstance(tokens, int) or isinstance(tokens, bool) or not 0 <= tokens <= MAX_SPECULATIVE_TOKENS:
        # repr, not str: never a deep structure's text (a JSON value may nest as deep as the reader allowed)
        shown = repr(tokens) if isinstance(tokens, (int, float)) else f"a JSON {type(tokens).__name__}"
        raise ArgsError(f"{where}: num_speculative_tokens {shown[:60]} is not a count (0 to {MAX_SPECULATIVE_TOKENS})")
    return tokens
