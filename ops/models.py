"""Model folders: what `profile` reads from each service's checkpoint, here or over SSH.

What the capacity check needs comes from the checkpoint itself: `config.json` (the language
model's fields under `text_config` for vision-language models; `head_dim` else hidden size /
attention heads; MLA fields; sliding-window or linear-attention layers make the model `hybrid`)
and the weights' bytes as stored (`metadata.total_size` of `model.safetensors.index.json`, else
the tensors of every `*.safetensors` header: quantized checkpoints keep some tensors in bf16, so
bytes are counted, never parameters). Every unreadable model is reported at once, in one
paragraph. The folders are read on each service's host, one SSH round trip per host (a shell
script: `cat` and, for headers, `head`/`tail`/`od`), or on this machine under `--models-root`.
"""

from __future__ import annotations

import json
import shlex
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from allocation.config import Ssh
from allocation.deployment import Deployment, HostDeployment
from allocation.errors import ConfigError, listing
from ops.ssh import run_script

# model_type of encoder-only models vLLM serves for embeddings and scores: no KV cache.
ENCODERS = frozenset({"bert", "roberta", "xlm-roberta", "modernbert"})
HEADER_LIMIT = 100 * 1024 * 1024  # safetensors caps its JSON header at 100 MB
INDEX = "model.safetensors.index.json"


class ProfileError(ValueError):
    """One model cannot be profiled; the message says which file and why."""


@dataclass(frozen=True)
class Folder:
    """A model folder's files that matter, as text: read here or gathered over SSH."""

    where: str
    config: str | None
    index: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    """Safetensors file name -> its JSON header; read only without an index."""

    @classmethod
    def local(cls, path: Path) -> Folder:
        def text(p: Path) -> str | None:
            try:
                return p.read_text(encoding="utf-8")
            except FileNotFoundError:
                return None
            except (OSError, UnicodeDecodeError) as exc:
                raise ProfileError(f"cannot read {p}: {exc}") from None

        index = text(path / INDEX)
        headers = {} if index is not None else {f.name: _local_header(f) for f in sorted(path.glob("*.safetensors"))}
        return cls(str(path), text(path / "config.json"), index, headers)


def _local_header(path: Path) -> str:
    try:
        with path.open("rb") as f:
            raw = f.read(8)
            if len(raw) != 8 or not 0 < (size := struct.unpack("<Q", raw)[0]) <= HEADER_LIMIT:
                raise ProfileError(f"{path} is not a safetensors file (bad header length)")
            return f.read(size).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"cannot read the safetensors header of {path}: {exc}") from None


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{what} is not JSON: {exc}") from None


def weight_bytes(folder: Folder) -> int:
    if folder.index is not None:
        total = (_json(folder.index, f"{folder.where}/{INDEX}").get("metadata") or {}).get("total_size")
        if isinstance(total, int) and total > 0:
            return total
    if not folder.headers:
        raise ProfileError(f"no safetensors weights in {folder.where}")
    total = 0
    for name, text in folder.headers.items():
        header = _json(text, f"the safetensors header of {folder.where}/{name}")
        try:
            total += sum(t["data_offsets"][1] - t["data_offsets"][0] for k, t in header.items() if k != "__metadata__")
        except (AttributeError, KeyError, TypeError, IndexError) as exc:
            raise ProfileError(f"the safetensors header of {folder.where}/{name} is malformed: {exc}") from None
    return total


def _hybrid(text: dict[str, Any]) -> bool:
    """Layers other than full attention: sliding windows, linear attention, mamba."""
    layer_types = text.get("layer_types") or []
    return (
        any(t != "full_attention" for t in layer_types)
        or "full_attention_interval" in text
        or (text.get("sliding_window") is not None and text.get("use_sliding_window", True) is not False)
    )


def _full_attention_layers(text: dict[str, Any]) -> int:
    """Full-attention layers: `full_attention` entries of `layer_types`, else one in every
    `full_attention_interval` layers (vllm `qwen3_next.py`'s layer_types property)."""
    layer_types = text.get("layer_types")
    if layer_types:
        return sum(1 for t in layer_types if t == "full_attention")
    return int(text["num_hidden_layers"]) // int(text["full_attention_interval"])


def _gated_delta_net(text: dict[str, Any], dtype: str) -> dict[str, Any] | None:
    """A hybrid's Gated DeltaNet fields (`linear_*` in `config.json`), or None when its other layers
    are not Gated DeltaNet ones (sliding windows, other mamba kinds), which stay "not sized"."""
    layer_types = set(text.get("layer_types") or ())
    if "linear_num_value_heads" not in text or not layer_types <= {"full_attention", "linear_attention"}:
        return None
    heads = int(text["num_attention_heads"])
    full = _full_attention_layers(text)
    return {
        "modelType": str(text["model_type"]) if "model_type" in text else None,
        "numFullAttentionLayers": full,
        "numKeyValueHeads": int(text.get("num_key_value_heads") or heads),
        "headDim": int(text.get("head_dim") or int(text["hidden_size"]) // heads),
        "linearNumKeyHeads": int(text["linear_num_key_heads"]),
        "linearNumValueHeads": int(text["linear_num_value_heads"]),
        "linearKeyHeadDim": int(text["linear_key_head_dim"]),
        "linearValueHeadDim": int(text["linear_value_head_dim"]),
        "linearConvKernelDim": int(text["linear_conv_kernel_dim"]),
        "mambaSsmDtype": str(text.get("mamba_ssm_dtype") or dtype),
    }


def _dtype(config: dict[str, Any], text: dict[str, Any]) -> str:
    """The model's dtype: `dtype` (newer transformers) or `torch_dtype`, the text model's first."""
    for source in (text, config):
        for key in ("dtype", "torch_dtype"):
            if source.get(key):
                return str(source[key])
    return "bfloat16"


def read_profile(model: Path | Folder) -> dict[str, Any]:
    """The `profile:` keys of one model folder."""
    folder = Folder.local(model) if isinstance(model, Path) else model
    if folder.config is None:
        raise ProfileError(f"no {folder.where}/config.json")
    config = _json(folder.config, f"{folder.where}/config.json")
    text = config.get("text_config") or config
    try:
        profile: dict[str, Any] = {"weightBytes": weight_bytes(folder), "numHiddenLayers": int(text["num_hidden_layers"])}
        if _dtype(config, text) == "float32":
            profile["torchDtype"] = "float32"
        if text.get("model_type", config.get("model_type")) in ENCODERS:
            return profile | {"attention": "encoder"}
        if _hybrid(text):
            linear = _gated_delta_net(text, _dtype(config, text))
            if linear is None:
                return profile | {"attention": "hybrid"}
            profile |= {"attention": "hybrid", **{k: v for k, v in linear.items() if v is not None}}
            return profile | ({"kvCacheDtype": "float16"} if _dtype(config, text) == "float16" else {})
        if "kv_lora_rank" in text:
            return profile | {"attention": "mla", "kvLoraRank": int(text["kv_lora_rank"]),
                              "qkRopeHeadDim": int(text["qk_rope_head_dim"])}  # fmt: skip
        heads = int(text["num_attention_heads"])
        head_dim = text.get("head_dim") or int(text["hidden_size"]) // heads
        profile |= {"numKeyValueHeads": int(text.get("num_key_value_heads") or heads), "headDim": int(head_dim)}
    except (KeyError, TypeError, ValueError) as exc:
        raise ProfileError(f"{folder.where}/config.json lacks or garbles {exc}") from None
    if _dtype(config, text) == "float16":
        profile["kvCacheDtype"] = "float16"
    return profile


MARK = "@@ascend-fleet-model@@"


def gather_script(paths: list[str]) -> str:
    """POSIX sh printing, per model folder, its config.json, its index, or (without an index) every
    safetensors header: the 8-byte little-endian length, then that many bytes of JSON."""
    lines = ["exec </dev/null", f"m() {{ printf '\\n%s %s\\n' {shlex.quote(MARK)} \"$*\"; }}"]
    for path in paths:
        q = shlex.quote(path)
        lines += [
            f"m folder {q}",
            f'[ -r {q}/config.json ] && {{ m config; cat {q}/config.json; }}',
            f"if [ -r {q}/{INDEX} ]; then m index; cat {q}/{INDEX}",
            f'else for f in {q}/*.safetensors; do [ -f "$f" ] || continue',
            "  n=$(head -c 8 \"$f\" | od -An -tu8 | tr -d ' ')",
            '  m header "${f##*/}"; tail -c +9 "$f" | head -c "$n"; done',
            "fi",
        ]
    return "\n".join([*lines, "m end"]) + "\n"


def parse_folders(text: str, where: str) -> dict[str, Folder]:
    """Folders from `gather_script`'s output; `where` names the host in messages."""
    folders: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    section: list[str] | None = None
    for line in text.split("\n"):
        if line.startswith(MARK + " "):
            kind, _, arg = line[len(MARK) + 1 :].partition(" ")
            if kind == "folder":
                current = folders.setdefault(arg, {"headers": {}})
                section = None
            elif kind == "end":
                break
            elif current is not None:
                section = []
                if kind == "header":
                    current["headers"][arg] = section
                else:
                    current[kind] = section
            continue
        if section is not None:
            section.append(line)
    out = {}
    for path, parts in folders.items():
        joined = {k: "\n".join(v).strip("\n") for k, v in parts.items() if k != "headers"}
        headers = {k: "\n".join(v).strip("\n") for k, v in parts["headers"].items()}
        out[path] = Folder(f"{where}:{path}", joined.get("config"), joined.get("index"), headers)
    return out


def _remote_folders(ssh: Ssh, hd: HostDeployment, paths: list[str]) -> dict[str, Folder] | str:
    """The host's model folders in one round trip, or why they could not be read."""
    result = run_script(ssh, hd, gather_script(paths))
    if not result.reachable:
        return f"host {hd.name} is unreachable: {result.error}"
    if result.returncode != 0:
        return f"host {hd.name}: reading the models exited {result.returncode}: {' '.join(result.stderr.split())[:200]}"
    return parse_folders(result.stdout, hd.name)


def profiles(deployment: Deployment, models_root: Path | None) -> dict[str, dict[str, Any]]:
    """Service name -> `{"profile": ...}` for every service, read under `models_root` on this machine or
    on each service's host (one SSH round trip per host); ConfigError listing every failure."""
    found, problems = {}, []
    for hd in (h for h in deployment.hosts if h.services):
        paths = sorted({sd.planned.service.model for sd in hd.services})
        remote = None if models_root or hd.host.is_local() else _remote_folders(deployment.ssh, hd, paths)
        if isinstance(remote, str):
            problems.append(remote)
            continue
        for sd in hd.services:
            model = sd.planned.service.model
            try:
                if remote is not None:
                    folder = remote.get(model) or Folder(f"{hd.name}:{model}", None)
                else:
                    folder = Folder.local(models_root / model.lstrip("/") if models_root else Path(model))
                found[sd.name] = {"profile": read_profile(folder)}
            except ProfileError as exc:
                problems.append(f"service {sd.name}: {exc}")
    if problems:
        raise ConfigError(f"stack {deployment.stack}: cannot profile: {listing(problems)}; nothing was written")
    return found
