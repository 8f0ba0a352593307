"""What a prefill or decode instance and its proxy run with: the engine id of an instance's
`--kv-transfer-config`, and the instances a proxy sends requests to, read from their commands as the
programs read them. Pure.

An instance's `--kv-transfer-config` is one JSON word (vllm v0.20.2 `engine/arg_utils.py` reads a
config-typed flag from a JSON string), the last one counting, with vLLM's `_`-for-`-` spelling
(`allocation.vllm_args.spelled`); its `engine_id` is the top-level key (with the KV pool too: vLLM's
`MultiConnector` hands the outer one to each child). Without one vLLM draws a random id
(`config/kv_transfer.py` `KVTransferConfig`: `engine_id` None becomes `str(uuid.uuid4())` after init),
which collides with none. The
dotted form (`--kv-transfer-config.engine_id X`) is not read here; it shows as the command's drift.

The proxy is vllm-ascend@v0.20.2rc1's `examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py`,
a plain argparse parser: `--prefiller-hosts`, `--prefiller-ports`, `--decoder-hosts` and `--decoder-ports` each
take every word up to the next option (`nargs="+"`), the last time given counting; left out, they are its
defaults (`localhost`, 8001 and `localhost`, 8002); it pairs hosts and ports in order (`zip`). Abbreviations
(argparse's `allow_abbrev`) are not read here; they show as the command's drift.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

from allocation.vllm_args import spelled
from records.command import parse_command

KV_TRANSFER_CONFIG = "--kv-transfer-config"
PROXY_DEFAULTS = {
    "--prefiller-hosts": ("localhost",),
    "--prefiller-ports": ("8001",),
    "--decoder-hosts": ("localhost",),
    "--decoder-ports": ("8002",),
}
"""The example's defaults of the flags that name its instances (`parse_args`, v0.20.2rc1)."""


def engine_id(command: Sequence[str]) -> str | None:
    """The `engine_id` of a command's last `--kv-transfer-config`; None without one, or when that is no JSON
    object with a string `engine_id`."""
    values = parse_command(command, spelled).options.get(KV_TRANSFER_CONFIG, ())
    text = next((v for v in reversed(values) if v is not None), None)
    try:
        config = json.loads(text) if text is not None else None
    except ValueError:
        return None
    found = config.get("engine_id") if isinstance(config, dict) else None
    return found if isinstance(found, str) else None


@dataclass(frozen=True)
class ProxyTargets:
    """The `host:port` of each prefiller and each decoder a proxy sends requests to, in its order."""

    prefill: tuple[str, ...]
    decode: tuple[str, ...]

    def text(self) -> str:
        return f"prefillers {', '.join(self.prefill) or '(none)'} and decoders {', '.join(self.decode) or '(none)'}"


def proxy_targets(command: Sequence[str]) -> ProxyTargets:
    """The instances a proxy's command names, read as its argparse reads them. The plan's is
    `proxy_targets(ProxyDeployment.spec.command)`, read the same way."""
    values = {flag: _last(command, flag) or default for flag, default in PROXY_DEFAULTS.items()}
    pairs = [
        tuple(f"{host}:{port}" for host, port in zip(values[f"--{role}-hosts"], values[f"--{role}-ports"]))
        for role in ("prefiller", "decoder")
    ]
    return ProxyTargets(*pairs)


def _last(command: Sequence[str], flag: str) -> tuple[str, ...]:
    """The words after the last `flag` (or its `=value`) up to the next option."""
    out: tuple[str, ...] = ()
    for i, word in enumerate(command):
        if word == flag:
            rest = command[i + 1 :]
            out = tuple(rest[: next((k for k, w in enumerate(rest) if w.startswith("-")), len(rest))])
        elif word.startswith(flag + "="):
            out = (word.partition("=")[2],)
    return out
