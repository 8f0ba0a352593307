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

from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from pydantic import ValidationError

from allocation.config import ModelProfile, Service
from records.deployment import Deployment, HostDeployment
from allocation.errors import ConfigError, listing
from allocation.vllm_args import read_args
from ops.bounded_json import JsonError, excerpt, loads
from ops.model_files import INDEX, Folder, ModelFileError, gather_script, parse_folders
from ops.ssh import run_script

# model_type of encoder-only models vLLM serves for embeddings and scores: no KV cache.
ENCODERS = frozenset({"bert", "roberta", "xlm-roberta", "modernbert"})


class ProfileError(ValueError):
    """One model cannot be profiled; the message says which file and why."""


def _json(text: str, what: str) -> Any:
    try:
        return loads(text, what)
    except JsonError as exc:
        raise ProfileError(str(exc)) from None


EXPERTS = ".mlp.experts."
"""What names a routed expert's tensor in a mixture-of-experts checkpoint (DeepSeek-V3/R1, Qwen3-MoE:
`model.layers.N.mlp.experts.E.gate_proj.weight`; a shared expert is `.mlp.shared_experts.`)."""


def expert_bytes(folder: Folder) -> int | None:
    """Of the weights, the routed experts' bytes, when the safetensors headers were read (a folder
    without an index); None with an index, whose shards' headers `profile` does not read."""
    if folder.index is not None or not folder.headers:
        return None
    return sum(_tensor_bytes(folder.where, name, text, EXPERTS) for name, text in folder.headers.items())


def weight_bytes(folder: Folder) -> int:
    if folder.index is not None:
        what = f"{folder.where}/{INDEX}"
        index = _json(folder.index, what)
        metadata = index.get("metadata") if isinstance(index, dict) else None
        total = metadata.get("total_size") if isinstance(metadata, dict) else None
        if isinstance(total, bool) or not isinstance(total, int) or total < 1:
            raise ProfileError(f"{what} has no positive whole metadata.total_size (the weights' bytes)")
        return total
    if not folder.headers:
        raise ProfileError(f"no safetensors weights in {folder.where} (no {INDEX}, no *.safetensors file)")
    return sum(_tensor_bytes(folder.where, name, text) for name, text in folder.headers.items())


def _tensor_bytes(where: str, name: str, text: str, within: str = "") -> int:
    """Bytes of the tensors a safetensors header lists: the sum of their `data_offsets` spans; with
    `within`, of those whose name contains it."""
    what = f"the safetensors header of {where}/{name}"
    header = _json(text, what)
    if not isinstance(header, dict):
        raise ProfileError(f"{what} is not a JSON object")
    total = 0
    for key, tensor in header.items():
        if key == "__metadata__":
            continue
        offsets = tensor.get("data_offsets") if isinstance(tensor, dict) else None
        if (
            not isinstance(offsets, list) or len(offsets) != 2
            or any(isinstance(o, bool) or not isinstance(o, int) or o < 0 for o in offsets) or offsets[1] < offsets[0]
        ):  # fmt: skip
            raise ProfileError(f"{what} is malformed: tensor {excerpt(key)} has no [start, end] data_offsets")
        total += offsets[1] - offsets[0] if within in key else 0
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
    return _whole(text, "num_hidden_layers") // _whole(text, "full_attention_interval")


def _gated_delta_net(text: dict[str, Any], dtype: str) -> dict[str, Any] | None:
    """A hybrid's Gated DeltaNet fields (`linear_*` in `config.json`), or None when its other layers
    are not Gated DeltaNet ones (sliding windows, other mamba kinds), which stay "not sized"."""
    layer_types = set(text.get("layer_types") or ())
    if "linear_num_value_heads" not in text or not layer_types <= {"full_attention", "linear_attention"}:
        return None
    heads = _whole(text, "num_attention_heads")
    full = _full_attention_layers(text)
    return {
        "modelType": str(text["model_type"]) if "model_type" in text else None,
        "numFullAttentionLayers": full,
        "numKeyValueHeads": _set_or(text, "num_key_value_heads", heads),
        "headDim": _set_or(text, "head_dim", None) or _divided(text, "hidden_size", heads),
        "linearNumKeyHeads": _whole(text, "linear_num_key_heads"),
        "linearNumValueHeads": _whole(text, "linear_num_value_heads"),
        "linearKeyHeadDim": _whole(text, "linear_key_head_dim"),
        "linearValueHeadDim": _whole(text, "linear_value_head_dim"),
        "linearConvKernelDim": _whole(text, "linear_conv_kernel_dim"),
        "mambaSsmDtype": str(text.get("mamba_ssm_dtype") or dtype),
    }


def _dtype(config: dict[str, Any], text: dict[str, Any]) -> str:
    """The model's dtype: `dtype` (newer transformers) or `torch_dtype`, the text model's first."""
    for source in (text, config):
        for key in ("dtype", "torch_dtype"):
            if source.get(key):
                return str(source[key])
    return "bfloat16"


def _config(folder: Folder) -> tuple[dict[str, Any], dict[str, Any]]:
    """config.json as an object, and the language model's part of it (`text_config`, else itself)."""
    if folder.problem is not None:
        raise ProfileError(folder.problem)
    if folder.config is None:
        raise ProfileError(f"no {folder.where}/config.json")
    config = _json(folder.config, f"{folder.where}/config.json")
    if not isinstance(config, dict):
        raise ProfileError(f"{folder.where}/config.json holds a {type(config).__name__}, not an object")
    text = config.get("text_config") or config
    if not isinstance(text, dict):
        raise ProfileError(f"{folder.where}/config.json: text_config is a {type(text).__name__}, not an object")
    return config, text


def _whole(fields: dict[str, Any], key: str) -> int:
    """A positive whole number of config.json: `true`, `1.9`, `"12"` and `-5` are refused, not converted."""
    value = fields[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} is {excerpt(str(value))}, not a positive whole number")
    return value


def _set_or(fields: dict[str, Any], key: str, default: int | None) -> int | None:
    """The field as a positive whole number if config.json sets it (`null` is unset, as transformers
    writes it), else `default`: `0`, `false` and `-4` are refused by name, never taken for absent."""
    return default if fields.get(key) is None else _whole(fields, key)


def _divided(fields: dict[str, Any], key: str, by: int) -> int:
    """`hidden_size / num_attention_heads`, which must divide evenly."""
    total = _whole(fields, key)
    if total % by:
        raise ValueError(f"{key} {total} is not a multiple of num_attention_heads {by}")
    return total // by


def read_profile(model: Path | Folder) -> dict[str, Any]:
    """The `profile:` keys of one model folder."""
    folder = Folder.local(model) if isinstance(model, Path) else model
    config, text = _config(folder)
    try:
        profile: dict[str, Any] = {"weightBytes": weight_bytes(folder), "numHiddenLayers": _whole(text, "num_hidden_layers")}
        if _dtype(config, text) == "float32":
            profile["torchDtype"] = "float32"
        if experts := expert_bytes(folder):
            profile["expertWeightBytes"] = experts
        if text.get("model_type", config.get("model_type")) in ENCODERS:
            return profile | {"attention": "encoder"}
        if _hybrid(text):
            linear = _gated_delta_net(text, _dtype(config, text))
            if linear is None:
                return profile | {"attention": "hybrid"}
            profile |= {"attention": "hybrid", **{k: v for k, v in linear.items() if v is not None}}
            return profile | ({"kvCacheDtype": "float16"} if _dtype(config, text) == "float16" else {})
        if "kv_lora_rank" in text:
            return profile | {"attention": "mla", "kvLoraRank": _whole(text, "kv_lora_rank"),
                              "qkRopeHeadDim": _whole(text, "qk_rope_head_dim")}  # fmt: skip
        heads = _whole(text, "num_attention_heads")
        head_dim = _set_or(text, "head_dim", None) or _divided(text, "hidden_size", heads)
        kv_heads = _set_or(text, "num_key_value_heads", heads)
        profile |= {"numKeyValueHeads": kv_heads, "headDim": head_dim}
    except KeyError as exc:
        raise ProfileError(f"{folder.where}/config.json lacks {exc}") from None
    except (TypeError, ValueError) as exc:
        raise ProfileError(f"{folder.where}/config.json: {exc}") from None
    if _dtype(config, text) == "float16":
        profile["kvCacheDtype"] = "float16"
    return profile


def _remote_folders(hd: HostDeployment, paths: list[str]) -> dict[str, Folder] | str:
    """The host's model folders in one round trip, or why they could not be read."""
    result = run_script(hd, gather_script(paths))
    if not result.reachable:
        return f"host {hd.name} is unreachable: {result.error}"
    if result.returncode != 0:
        return f"host {hd.name}: reading the models exited {result.returncode}: {excerpt(' '.join(result.stderr.split()), 200)}"
    try:
        return parse_folders(result.stdout, hd.name)
    except ModelFileError as exc:
        return str(exc)


# vLLM's `--kv-cache-dtype` values (vllm/config/cache.py `CacheDType`) as the profile's kvCacheDtype;
# `auto` keeps the model's own dtype.
KV_CACHE_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "int8": "int8", "fp8": "float8",
                   "fp8_e4m3": "float8", "fp8_e5m2": "float8", "fp8_inc": "float8"}  # fmt: skip


def _kv_cache_dtype(service: Service, args: Sequence[str]) -> str | None:
    """The kvCacheDtype the stack fixes: set by hand in the profile, else from `--kv-cache-dtype` in
    `args`, read as vLLM reads them (`allocation.vllm_args`)."""
    if service.profile is not None and "kv_cache_dtype" in service.profile.model_fields_set:
        return service.profile.kv_cache_dtype
    value = read_args(args).kv_cache_dtype
    if value is None or value == "auto":
        return None
    if value not in KV_CACHE_DTYPES:
        raise ProfileError(f"args: --kv-cache-dtype {excerpt(value)} is none of auto, {', '.join(KV_CACHE_DTYPES)}")
    return KV_CACHE_DTYPES[value]


def validated(profile: dict[str, Any], where: str) -> dict[str, Any]:
    """The profile checked by the model the stack file uses, so what is written loads again."""
    try:
        ModelProfile.model_validate(profile)
    except ValidationError as exc:
        wrong = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'profile'}: {e['msg']}" for e in exc.errors())
        raise ProfileError(f"{where}: the profile read would not load ({wrong})") from None
    return profile


LEAST_FRACTION = Decimal("0.0001")


def unsized_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """The stack's values with `memoryFraction: auto` and `kvCacheGiB` of every service without a profile
    replaced by the least fraction: `profile` needs a plan to know where each model is, and neither can be
    planned before the profile it is being asked to write."""
    services = values.get("services")
    if not isinstance(services, list):
        return dict(values)
    patched = [
        {**{k: v for k, v in s.items() if k != "kvCacheGiB"}, "memoryFraction": LEAST_FRACTION}
        if isinstance(s, dict) and (s.get("memoryFraction") == "auto" or "kvCacheGiB" in s) and s.get("profile") is None
        else s
        for s in services
    ]
    return {**values, "services": patched}


def _local_folder(model: str, models_root: Path | None) -> Folder:
    if models_root is None:
        return Folder.local(Path(model))
    return Folder.local(models_root / model.lstrip("/"), models_root)


def _read_once(
    read: dict[tuple[str, str], Any], key: tuple[str, str], profile: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """`profile()`, or what it gave (or raised) the first time for `key`: services that share a model
    folder share its reading (4,000 services of one model read it once, not 4,000 times)."""
    if key not in read:
        try:
            read[key] = profile()
        except ProfileError as exc:
            read[key] = exc
    done = read[key]
    if isinstance(done, ProfileError):
        raise done
    return dict(done)


def profiles(deployment: Deployment, models_root: Path | None) -> dict[str, dict[str, Any]]:
    """Configured service name -> `{"profile": ...}` for every service (a replicated service once, read on
    its first replica's host), read under `models_root` on this machine or on each service's host (one
    SSH round trip per host); ConfigError listing every failure."""
    found: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    read: dict[tuple[str, str], dict[str, Any] | ProfileError] = {}  # (host or "", model): each folder read once
    for hd in (h for h in deployment.hosts if h.services):
        wanted = [sd for sd in hd.services if sd.plan.replica_of not in found]
        paths = sorted({sd.plan.service.model for sd in wanted})
        remote = None if models_root or hd.host.is_local() or not paths else _remote_folders(hd, paths)
        if isinstance(remote, str):
            problems.append(remote)
            continue
        for sd in wanted:
            name, service = sd.plan.replica_of, sd.plan.service
            if name in found:
                continue
            model = service.model
            try:
                folder = remote.get(model, Folder(f"{hd.name}:{model}", None)) if remote is not None else None
                profile = _read_once(read, (hd.name if remote is not None else "", model),
                                     lambda: read_profile(folder or _local_folder(model, models_root)))  # fmt: skip
                dtype = _kv_cache_dtype(service, sd.plan.resolved.args)
                if dtype is not None:
                    profile = {k: v for k, v in profile.items() if k != "kvCacheDtype"}
                    profile["kvCacheDtype"] = dtype
                found[name] = {"profile": validated(profile, (folder or Folder(model, None)).where)}
            except ProfileError as exc:
                found[name] = {}
                problems.append(f"service {name}: {exc}")
    if problems:
        raise ConfigError(f"stack {deployment.stack}: cannot profile: {listing(problems)}; nothing was written")
    return found
