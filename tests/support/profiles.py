"""Model directories on disk (a `config.json` and safetensors headers) and the stacks that profile them,
for `python -m allocation profile` and the capacity rules it feeds."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from ruamel.yaml import YAML

from allocation.capacity import GIB
from cli.main import main
from tests.support.stacks import fleet, host, service

QWEN3 = {"model_type": "qwen3", "num_hidden_layers": 64, "num_attention_heads": 64, "num_key_value_heads": 8,
         "hidden_size": 5120, "head_dim": 128, "torch_dtype": "bfloat16", "sliding_window": None,
         "use_sliding_window": False}  # fmt: skip
# The same model as a stack's `profile` holds it (what `profile` prints for QWEN3).
QWEN3_PROFILE = {"numHiddenLayers": 64, "numKeyValueHeads": 8, "headDim": 128}
SMALL_QWEN3_PROFILE = {"weightBytes": 8 * GIB, **QWEN3_PROFILE}
"""QWEN3's shape with 8 GiB of weights: 256 KiB of KV cache a token, 32 MiB a block of 128 tokens on one card."""


def safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> int:
    """A safetensors file as the format defines it: u64 header length, JSON header, data. Its data bytes."""
    sizes = {"BF16": 2, "I8": 1, "F32": 4}
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, (dtype, shape) in tensors.items():
        n = sizes[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)
    return offset


def model(root: Path, name: str, config: dict, index_total: int | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    if index_total is not None:
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": index_total}}))
    return folder


def stack(tmp_path: Path, models: list[str], tp: int = 4, fraction: float = 0.9) -> Path:
    services = "".join(
        f"    - name: {m}  # keep this comment\n      model: /disk2/{m}\n      tensorParallelSize: {tp}\n"
        f"      memoryFraction: {fraction}\n      maxModelLen: 32768\n"
        for m in models
    )
    path = tmp_path / "Pulumi.test.yaml"
    path.write_text(f"config:\n  ascend-fleet:hosts:\n    - name: npu-a\n      address: 192.0.2.1\n  ascend-fleet:services:\n{services}")
    return path


def profile(path: Path, root: Path, capsys) -> tuple[int, str]:
    code = main(["profile", "--config", str(path), "--models-root", str(root)])
    return code, capsys.readouterr().err


def services_of(path: Path) -> dict[str, dict]:
    return {s["name"]: s for s in YAML(typ="safe").load(path.read_text())["config"]["ascend-fleet:services"]}


def replicated_stack(tmp_path: Path, extra: str = "", args: str = "") -> Path:
    path = tmp_path / "Pulumi.test.yaml"
    path.write_text(
        "config:\n  ascend-fleet:hosts:\n    - name: npu-a\n      address: 192.0.2.1\n"
        "  ascend-fleet:services:\n"
        "    - name: qwen\n      model: /disk2/qwen\n      tensorParallelSize: 2\n      replicas: 2\n"
        f"      memoryFraction: auto\n      maxModelLen: 4096\n{extra}{args}"
    )
    return path


def profiled(fraction: float, *, tp: int = 4, max_model_len: int = 32768, max_num_seqs: int | None = None, **extra):
    profile = {"weightBytes": 30 * GIB, **QWEN3_PROFILE}
    svc = service("chat", tp, fraction, profile=profile, maxModelLen=max_model_len, **extra)
    if max_num_seqs is not None:
        svc["maxNumSeqs"] = max_num_seqs
    return fleet([host("npu-a")], [svc])
