"""Reading a stack's configuration from `Pulumi.<stack>.yaml`, as the Pulumi engine would.

Used by the command line only; the Pulumi program gets the same values from
`pulumi.Config`. Project-level config in `Pulumi.yaml` (beside the stack
file, else at the project root) supplies defaults that the stack file's keys
override, key by key, as in Pulumi.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from allocation.config import NAMESPACE, VERBATIM_KEYS, FleetConfig, parse_fleet, read_top_level
from allocation.errors import ConfigError
from allocation.values import STACK_NAME_RULE, StackName
from cli import yaml12
from cli.pulumi_scalars import top_level_text

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class StackFile:
    stack: str
    path: Path
    guessed: bool = False
    """The stack name was taken from a file name not of the form `Pulumi.<stack>.yaml`, and given by
    no `--stack-name`: the commands say so, since the name reaches every container's labels."""


# Pulumi's own name for a stack's config file (`.yml` too, as this command has always read it).
STACK_FILE_NAME = re.compile(r"Pulumi\.(.+)\.ya?ml\Z")


def locate(stack: str | None, config: str | None, root: Path = PROJECT_ROOT, stack_name: str | None = None) -> StackFile:
    """The stack file meant by `--stack NAME` or `--config PATH` (default: the prod stack); with
    `--config`, planned as stack `stack_name` when given, else as its file name says."""
    if config is not None:
        path = Path(config)
        if not path.is_file():
            raise ConfigError(f"--config {config}: no such file")
        if stack_name is not None:
            if not StackName.fullmatch(stack_name):
                raise ConfigError(f"--stack-name {stack_name!r} is not a stack name: {STACK_NAME_RULE}")
            return StackFile(stack=stack_name, path=path)
        name = path.name
        stem = name.removeprefix("Pulumi.").removesuffix(".yaml").removesuffix(".yml") or name
        guessed = STACK_FILE_NAME.fullmatch(name) is None
        if guessed and not StackName.fullmatch(stem):
            raise ConfigError(
                f"--config {config}: the file is not named Pulumi.<stack>.yaml, and {stem!r}, the stack name its "
                f"name gives, is not a stack name ({STACK_NAME_RULE}): rename the file, or give --stack-name NAME"
            )
        return StackFile(stack=stem, path=path, guessed=guessed)
    stack = stack or "prod"
    path = root / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        known = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in root.glob("Pulumi.*.yaml"))
        raise ConfigError(
            f"--stack {stack}: no stack file {path.name} in {root}; stacks here: {', '.join(known) or 'none'}"
        )
    return StackFile(stack=stack, path=path)


def _read_yaml(path: Path, data: bytes | None = None) -> Any:
    """The file's YAML (read by `cli.yaml12`: libyaml's speed, YAML 1.2's meaning), or that of `data`,
    its bytes as already read; every way it can be unreadable is one ConfigError naming the file,
    and the line where the parser stopped."""
    try:
        return yaml12.load(path.read_text(encoding="utf-8-sig") if data is None else data.decode("utf-8-sig"))
    except yaml12.Located as exc:
        raise ConfigError(f"{path}, line {exc.line}: {exc.problem}") from None
    except yaml12.YAMLError as exc:
        if "maximum nesting depth" in str(exc):  # libyaml stops at 1,000 levels
            raise ConfigError(f"{path}: nested too deeply to be a stack file: {' '.join(str(exc).split())}") from None
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a stack file") from None
    except ValueError as exc:  # e.g. an integer of thousands of digits
        raise ConfigError(f"{path}: a value cannot be read: {' '.join(str(exc).split())[:200]}") from None


def stack_document(path: Path, data: bytes | None = None) -> Any:
    """The whole stack file as YAML values (every namespace, `encryptionsalt` and the like), read as
    `stack_values` reads it; `data`: its bytes when read already (from another git revision, say)."""
    return _read_yaml(path, data)


def _namespaced(key: str) -> str | None:
    """`ascend-fleet:hosts` -> `hosts`; keys of other namespaces (e.g. `docker:host`) -> None."""
    namespace, sep, name = key.partition(":")
    if not sep:
        return key  # a project-level key without namespace belongs to the project
    return name if namespace == NAMESPACE else None


def _config_block(path: Path, doc: Any) -> dict[str, Any]:
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    block = doc.get("config") or {}
    if not isinstance(block, dict):
        raise ConfigError(f"{path}: 'config' must be a mapping of keys to values")
    return block


def _misspelt(path: Path, key: str) -> None:
    """A namespace that looks like ours but is not (`ascend-flet:services`) would leave the stack
    silently empty; Pulumi would pass it on under its own namespace, which the program never reads."""
    namespace = key.partition(":")[0]
    folded = namespace.lower().replace("_", "-")
    if namespace != NAMESPACE and difflib.SequenceMatcher(None, folded, NAMESPACE).ratio() >= 0.8:
        raise ConfigError(
            f"{path}: config key '{key}': the namespace '{namespace}' is not '{NAMESPACE}' (a misspelling?), so "
            f"neither `plan` nor the program would read it; write '{NAMESPACE}:{key.partition(':')[2]}'"
        )


def _env_as_text(path: Path, values: dict[str, Any]) -> None:
    """Env values become text; a number whose text the program reads otherwise (`1.0`: `1`) is refused."""
    services = values.get("services")
    holders = [values.get("defaults")] + (services if isinstance(services, list) else [])
    for holder in holders:
        env = holder.get("env") if isinstance(holder, dict) else None
        for key, value in env.items() if isinstance(env, dict) else ():
            if isinstance(value, yaml12.Respelled):
                raise ConfigError(
                    f"{path}, line {value.line}: env {key}: the number is read as {value} by `plan` but as "
                    f"{value.pulumi} by the Pulumi CLI (what `pulumi up` hands the program), and an env value "
                    f"is text: quote it (\"{value}\") or write {value.pulumi}"
                )


def project_values(path: Path) -> dict[str, Any]:
    """Project-level config of Pulumi.yaml; objects sit under `value:`, as Pulumi requires."""
    out = {}
    for key, entry in _config_block(path, _read_yaml(path)).items():
        name = _namespaced(str(key))
        if name is None:
            continue
        if isinstance(entry, dict) and "value" in entry:
            entry = entry["value"]
        elif isinstance(entry, dict) and "default" in entry:
            entry = entry["default"]
        out[name] = entry
    return out


def stack_values(stack_file: StackFile, root: Path = PROJECT_ROOT, data: bytes | None = None) -> dict[str, Any]:
    """The `ascend-fleet:` values of a stack, namespace stripped, project defaults applied; `data`:
    the stack file's bytes when the caller has read them (to write the file back from them)."""
    project = stack_file.path.parent / "Pulumi.yaml"
    if not project.is_file():
        project = root / "Pulumi.yaml"
    values = project_values(project) if project.is_file() else {}
    for key, value in _config_block(stack_file.path, _read_yaml(stack_file.path, data)).items():
        key = str(key)
        if ":" not in key:
            raise ConfigError(
                f"{stack_file.path}: config key '{key}' has no namespace; write '{NAMESPACE}:{key}'"
            )
        _misspelt(stack_file.path, key)
        name = _namespaced(key)
        if name is not None:
            values[name] = value
    _env_as_text(stack_file.path, values)
    return {name: top_level_reading(name, value) for name, value in values.items()}


def top_level_reading(name: str, value: Any) -> Any:
    """A top-level value as the program reads it: Pulumi hands over a scalar as text (`90` and
    `"90"` alike, docs/stack-files.md), read back by `read_top_level`. A version stays as written,
    so that `plan` can refuse the number YAML makes of `20.10`, which the program cannot see."""
    if isinstance(value, (dict, list)) or name in VERBATIM_KEYS:
        return value
    return read_top_level(name, top_level_text(value))


def load_fleet(stack: str | None = None, config: str | None = None) -> tuple[FleetConfig, StackFile]:
    stack_file = locate(stack, config)
    return parse_fleet(stack_file.stack, stack_values(stack_file)), stack_file
