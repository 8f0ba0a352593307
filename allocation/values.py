"""Constrained types for every config value that reaches another program.

A stack file's values end up in ssh's argv, `docker run`'s argv, a shell
script, a compose file and a markdown comment. Each is validated here, once,
when the config is parsed, with a message that names the rule; the exporters
then only quote (shlex, the YAML library, markdown escapes), never re-check.
"""

from __future__ import annotations

import ipaddress
import re
from decimal import Decimal
from typing import Annotated, Any, Union

from pydantic import AfterValidator, BeforeValidator, Field

from allocation.vllm_args import spelled
from allocation.windows import API

# vLLM's `serve` flags the plan sets, and the config key that sets each one.
# vLLM reads `_` as `-` in flags and knows `-tp` (vllm/engine/arg_utils.py).
OWNED_FLAGS = {
    "--model": "model",
    "--served-model-name": "servedModelName",
    "--host": "(the plan: 0.0.0.0 inside the container)",
    "--port": API.key,
    "--tensor-parallel-size": "tensorParallelSize",
    "-tp": "tensorParallelSize",
    "--gpu-memory-utilization": "memoryFraction",
    # `--kv-cache-memory=N`, as vllm-ascend's startup log suggests it, is argparse's abbreviation of it.
    "--kv-cache-memory-bytes": "kvCacheGiB",
    "--max-model-len": "maxModelLen",
    "--max-num-seqs": "maxNumSeqs",
    # A multi-host service's launch (vllm@0.20.2 `engine/arg_utils.py` `add_cli_args`,
    # `entrypoints/openai/cli_args.py` `--headless`): the plan's, from `dataParallel` and the hosts.
    **dict.fromkeys(("--data-parallel-size", "-dp", "--data-parallel-size-local", "-dpl", "--data-parallel-rank", "-dpn",
                     "--data-parallel-start-rank", "-dpr", "--data-parallel-address", "-dpa", "--data-parallel-rpc-port",
                     "-dpp", "--data-parallel-backend", "-dpb", "--data-parallel-hybrid-lb", "-dph",
                     "--data-parallel-external-lb", "-dpe", "--headless", "--enable-expert-parallel", "-ep"),
                    "dataParallel"),
    **dict.fromkeys(("--nnodes", "-n", "--node-rank", "-r", "--master-addr", "--master-port"),
                    "dataParallel (one model over several hosts is planned as data parallel)"),
}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Docker's reference grammar (distribution/reference/regexp.go), anchored at both ends (`\Z`).
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_IMAGE = re.compile(
    rf"^(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[\w][\w.-]{{0,127}})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{{32,}})?\Z"
)
_HOSTNAME = re.compile(r"^(?=.{1,253}\Z)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?\Z")


def _plain(value: str) -> str:
    """No control character (newline, tab, NUL...): each value reaches argv, scripts and files whole."""
    if _CONTROL.search(value):
        raise ValueError(f"{value!r} contains a control character (newline, tab, NUL...)")
    return value


def _word(value: str) -> str:
    """No control character, and no leading `-`, which a command would read as an option."""
    if value.startswith("-"):
        raise ValueError(f"{value!r} starts with '-', so a command would read it as an option")
    return _plain(value)


def _path(value: str) -> str:
    """An absolute path, without control characters or `:`, which `docker run --volume` reads as a separator."""
    _plain(value)
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path (it must start with '/')")
    if ":" in value:
        raise ValueError(f"{value!r} contains ':', which `docker run --volume` reads as a separator")
    return value


def _image(value: str) -> str:
    """A Docker image reference (Docker's reference grammar, e.g. `quay.io/ascend/vllm-ascend:v0.20.2rc1`), at
    most 512 characters."""
    if not _IMAGE.fullmatch(value) or len(value) > 512:
        raise ValueError(f"{value!r} is not a Docker image reference such as quay.io/ascend/vllm-ascend:v0.20.2rc1")
    return value


def _address(value: str) -> str:
    """An IP address or a host name; an IPv6 address without brackets."""
    if value.startswith("[") and value.endswith("]"):
        raise ValueError(f"{value!r}: write an IPv6 address without brackets ({value[1:-1]})")
    try:
        ipaddress.ip_address(value)
    except ValueError:
        if not _HOSTNAME.fullmatch(value):
            raise ValueError(f"{value!r} is neither an IP address nor a host name") from None
    return value


def _arg(value: str) -> str:
    """No control character, and none of the flags the plan sets (`--port`, `--host`,
    `--tensor-parallel-size` or `-tp`, `--gpu-memory-utilization`, `--kv-cache-memory-bytes`, `--max-model-len`,
    `--max-num-seqs`, `--served-model-name`, `--model`, the data-parallel and multi-node flags such as
    `--data-parallel-size`, `--headless`, `--enable-expert-parallel` or `--nnodes`, also as `--flag=value`, with
    `_` or abbreviated): set their keys instead."""
    _plain(value)
    flag = spelled(value).partition("=")[0].partition(".")[0]
    if flag.startswith("-"):
        owned = [f for f in OWNED_FLAGS if f == flag or (len(flag) > 4 and flag.startswith("--") and f.startswith(flag))]
        if owned:
            raise ValueError(f"{value!r} sets {owned[0]}, which the plan owns: set {OWNED_FLAGS[owned[0]]} instead")
    return value


# No docstring: the schema generator would add it to `env` as a rule `plan` checks beyond the schema,
# which states this one itself (a number or a boolean is a value of `env`).
def _as_text(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, Decimal)):
        return str(value)
    return value  # left for pydantic to refuse with a clear type error


# A public key as sshd prints it (`ssh-keyscan`, `/etc/ssh/ssh_host_*_key.pub`), comment optional.
HostKey = Annotated[
    str,
    Field(pattern=r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com) [A-Za-z0-9+/]+={0,3}( [\x20-\x7e]*)?$"),
]
Text = Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(_plain)]
Word = Annotated[str, Field(min_length=1, max_length=255), AfterValidator(_word)]
AbsPath = Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(_path)]
Image = Annotated[str, AfterValidator(_image)]
Address = Annotated[str, AfterValidator(_address)]
UserName = Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_.-]{0,31}$")]
EnvKey = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=255)]
_EnvText = Annotated[str, Field(max_length=65536, pattern=r"^[^\x00]*$")]
EnvValue = Annotated[_EnvText, BeforeValidator(_as_text, json_schema_input_type=Union[_EnvText, float, bool])]
"""An environment variable's value: text, or a number or boolean taken as its text (`1` is `"1"`)."""
Arg = Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(_arg)]
StackName = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}\Z")
r"""Python's `$` matches before a final newline too, so every `re` validator here ends in `\Z` and is
called with `fullmatch`. pydantic's `pattern=` runs the Rust regex crate, whose `$` is the end of the
text (tests/test_hostile_config.py proves both)."""
STACK_NAME_RULE = "letters, digits, '_', '.', '-', at most 100"
"""What StackName accepts, in words, for every message refusing a stack name."""
