"""`profile`: read each service's model folder and write its `profile:` into the stack file.

What the capacity check needs comes from the checkpoint itself: `config.json` (the language
model's fields under `text_config` for vision-language models; `head_dim` else hidden size /
attention heads; MLA fields; sliding-window or linear-attention layers make the model `hybrid`)
and the weights' bytes as stored (`metadata.total_size` of `model.safetensors.index.json`, else
the tensors of every `*.safetensors` header: quantized checkpoints keep some tensors in bf16, so
bytes are counted, never parameters). Every unreadable model is reported at once, in one
paragraph, and then nothing is written. Models are read from this machine: at their path, or
under `--models-root` (a copy of the hosts' folders).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from allocation.config import FleetConfig
from allocation.errors import ConfigError, listing

# model_type of encoder-only models vLLM serves for embeddings and scores: no KV cache.
ENCODERS = frozenset({"bert", "roberta", "xlm-roberta", "modernbert"})
HEADER_LIMIT = 100 * 1024 * 1024  # safetensors caps its JSON header at 100 MB


class ProfileError(ValueError):
    """One model cannot be profiled; the message says which file and why."""


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProfileError(f"no {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProfileError(f"cannot read {path}: {exc}") from None


def _header_bytes(path: Path) -> int:
    """Bytes of the tensors a safetensors file holds, from its header alone."""
    try:
        with path.open("rb") as f:
            raw = f.read(8)
            if len(raw) != 8 or not 0 < (size := struct.unpack("<Q", raw)[0]) <= HEADER_LIMIT:
                raise ProfileError(f"{path} is not a safetensors file (bad header length)")
            header = json.loads(f.read(size))
        return sum(t["data_offsets"][1] - t["data_offsets"][0] for k, t in header.items() if k != "__metadata__")
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        if isinstance(exc, ProfileError):
            raise
        raise ProfileError(f"cannot read the safetensors header of {path}: {exc}") from None


def weight_bytes(model: Path) -> int:
    index = model / "model.safetensors.index.json"
    if index.exists():
        total = (_json(index).get("metadata") or {}).get("total_size")
        if isinstance(total, int) and total > 0:
            return total
    files = sorted(model.glob("*.safetensors"))
    if not files:
        raise ProfileError(f"no safetensors weights in {model}")
    return sum(_header_bytes(f) for f in files)


def _hybrid(text: dict[str, Any]) -> bool:
    """Layers other than full attention: sliding windows, linear attention, mamba."""
    layer_types = text.get("layer_types") or []
    return (
        any(t != "full_attention" for t in layer_types)
        or "full_attention_interval" in text
        or (text.get("sliding_window") is not None and text.get("use_sliding_window", True) is not False)
    )


def read_profile(model: Path) -> dict[str, Any]:
    """The `profile:` keys of one model folder."""
    config = _json(model / "config.json")
    text = config.get("text_config") or config
    try:
        profile: dict[str, Any] = {"weightBytes": weight_bytes(model), "numHiddenLayers": int(text["num_hidden_layers"])}
        if text.get("model_type", config.get("model_type")) in ENCODERS:
            return profile | {"attention": "encoder"}
        if _hybrid(text):
            return profile | {"attention": "hybrid"}
        if "kv_lora_rank" in text:
            return profile | {"attention": "mla", "kvLoraRank": int(text["kv_lora_rank"]),
                              "qkRopeHeadDim": int(text["qk_rope_head_dim"])}  # fmt: skip
        heads = int(text["num_attention_heads"])
        head_dim = text.get("head_dim") or int(text["hidden_size"]) // heads
        profile |= {"numKeyValueHeads": int(text.get("num_key_value_heads") or heads), "headDim": int(head_dim)}
    except (KeyError, TypeError, ValueError) as exc:
        raise ProfileError(f"{model / 'config.json'} lacks or garbles {exc}") from None
    if str(text.get("torch_dtype", config.get("torch_dtype"))) == "float16":
        profile["kvCacheDtype"] = "float16"
    return profile


def profiles(fleet: FleetConfig, models_root: Path | None) -> dict[str, dict[str, Any]]:
    """Service name -> `{"profile": ...}` for every service; ConfigError listing every failure."""
    found, problems = {}, []
    for s in fleet.services:
        folder = models_root / s.model.lstrip("/") if models_root else Path(s.model)
        try:
            found[s.name] = {"profile": read_profile(folder)}
        except ProfileError as exc:
            problems.append(f"service {s.name}: {exc}")
    if problems:
        raise ConfigError(f"stack {fleet.stack}: cannot profile: {listing(problems)}; nothing was written")
    return found
