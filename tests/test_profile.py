"""`profile`: model folders written here (config.json and tiny safetensors files with real headers)."""

from __future__ import annotations

import json

import pytest

from cli.main import main
from ops.models import ProfileError, read_profile
from tests.support.profiles import QWEN3, model, safetensors, stack


def test_a_dense_model_without_an_index_sums_its_safetensors_headers_int8_and_bf16_alike(tmp_path):
    folder = model(tmp_path, "qwen", QWEN3)
    a = safetensors(folder / "model-00001-of-00002.safetensors", {"w": ("I8", [64, 64]), "scale": ("BF16", [64])})
    b = safetensors(folder / "model-00002-of-00002.safetensors", {"embed": ("BF16", [100, 64])})
    assert read_profile(folder) == {"weightBytes": a + b, "numHiddenLayers": 64, "numKeyValueHeads": 8, "headDim": 128}


def test_the_index_total_size_wins_head_dim_falls_back_and_text_config_is_read(tmp_path):
    text = {k: v for k, v in QWEN3.items() if k != "head_dim"} | {"num_key_value_heads": 4, "hidden_size": 4096, "num_attention_heads": 32}
    folder = model(tmp_path, "vl", {"model_type": "qwen2_5_vl", "text_config": text}, index_total=12345)
    assert read_profile(folder) == {"weightBytes": 12345, "numHiddenLayers": 64, "numKeyValueHeads": 4, "headDim": 128}


def test_mla_encoder_and_hybrid_models_are_told_apart(tmp_path):
    mla = model(tmp_path, "ds", {"model_type": "deepseek_v3", "num_hidden_layers": 61, "kv_lora_rank": 512,
                                  "qk_rope_head_dim": 64}, index_total=10)  # fmt: skip
    assert read_profile(mla) == {"weightBytes": 10, "numHiddenLayers": 61, "attention": "mla", "kvLoraRank": 512, "qkRopeHeadDim": 64}
    bge = model(tmp_path, "bge", {"model_type": "xlm-roberta", "num_hidden_layers": 24}, index_total=10)
    assert read_profile(bge)["attention"] == "encoder"
    gdn = {**QWEN3, "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"]}
    assert read_profile(model(tmp_path, "next", gdn, index_total=10))["attention"] == "hybrid"
    mistral = {**QWEN3, "sliding_window": 4096, "use_sliding_window": True}
    assert read_profile(model(tmp_path, "swa", mistral, index_total=10))["attention"] == "hybrid"


def test_an_unreadable_model_says_which_file_and_why(tmp_path):
    with pytest.raises(ProfileError, match="no .*/gone/config.json"):
        read_profile(tmp_path / "gone")
    folder = model(tmp_path, "noweights", QWEN3)
    with pytest.raises(ProfileError, match="no safetensors weights in"):
        read_profile(folder)
    (folder / "model.safetensors").write_bytes(b"\xff" * 8)
    with pytest.raises(ProfileError, match="is not a safetensors file"):
        read_profile(folder)


def test_the_command_writes_every_profile_keeping_the_file_and_then_the_plan_shows_capacity(tmp_path, capsys):
    root = tmp_path / "copy"
    model(root / "disk2", "qwen", QWEN3, index_total=30 * 2**30)
    path = stack(tmp_path, ["qwen"])
    assert main(["profile", "--config", str(path), "--models-root", str(root)]) == 0
    text = path.read_text()
    assert "# keep this comment" in text
    assert f"profile: {{weightBytes: {30 * 2**30}, numHiddenLayers: 64, numKeyValueHeads: 8, headDim: 128}}" in text
    capsys.readouterr()
    assert main(["plan", "--config", str(path), "--format", "json"]) == 0
    [svc] = json.loads(capsys.readouterr().out)["hosts"][0]["services"]
    assert svc["capacity"]["fits"] is True and svc["capacity"]["weightsGiBPerCard"] == 7.5


def test_the_command_lists_every_unreadable_model_and_writes_nothing(tmp_path, capsys):
    root = tmp_path / "copy"
    model(root / "disk2", "qwen", QWEN3, index_total=10)
    path = stack(tmp_path, ["qwen", "gone", "lost"], tp=1, fraction=0.3)
    before = path.read_text()
    assert main(["profile", "--config", str(path), "--models-root", str(root)]) == 1
    err = capsys.readouterr().err
    assert "service gone: no" in err and "service lost: no" in err and "nothing was written" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert path.read_text() == before


def test_the_remote_script_reads_the_same_folder_as_a_local_read(tmp_path):
    """The script `profile` runs over SSH (cat, head, tail, od), run here with sh."""
    import subprocess

    from ops.models import gather_script, parse_folders

    folder = model(tmp_path, "qwen", QWEN3)
    safetensors(folder / "model-00001-of-00002.safetensors", {"w": ("I8", [300, 64]), "s": ("BF16", [64])})
    safetensors(folder / "model-00002-of-00002.safetensors", {"e": ("BF16", [10, 64])})
    indexed = model(tmp_path, "indexed", QWEN3, index_total=777)
    out = subprocess.run(["sh", "-s"], input=gather_script([str(folder), str(indexed), str(tmp_path / "gone")]),
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    folders = parse_folders(out, "npu-a")
    assert read_profile(folders[str(folder)]) == read_profile(folder)
    assert read_profile(folders[str(indexed)])["weightBytes"] == 777
    with pytest.raises(ProfileError, match=f"no npu-a:{tmp_path}/gone/config.json"):
        read_profile(folders[str(tmp_path / "gone")])


def test_a_gated_delta_net_hybrid_counts_its_full_attention_layers_from_layer_types_or_the_interval(tmp_path):
    linear = {"linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
              "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4}  # fmt: skip
    halves = {**QWEN3, **linear, "num_hidden_layers": 16, "layer_types": ["linear_attention", "full_attention"] * 8}
    profile = read_profile(model(tmp_path, "halves", {"model_type": "x_vl", "text_config": halves}, index_total=10))
    assert profile["numFullAttentionLayers"] == 8 and profile["mambaSsmDtype"] == "bfloat16"
    interval = {**QWEN3, **linear, "model_type": "qwen3_next", "num_hidden_layers": 48, "full_attention_interval": 4}
    profile = read_profile(model(tmp_path, "next", interval, index_total=10))
    assert profile["numFullAttentionLayers"] == 12 and profile["modelType"] == "qwen3_next"
    swa = {**QWEN3, **linear, "layer_types": ["sliding_attention", "full_attention"] * 32}
    assert "linearNumKeyHeads" not in read_profile(model(tmp_path, "swa", swa, index_total=10)), "not sized"


def test_the_routed_experts_bytes_are_summed_from_the_headers_and_left_unset_with_an_index(tmp_path):
    moe = {"model_type": "deepseek_v3", "num_hidden_layers": 2, "kv_lora_rank": 512, "qk_rope_head_dim": 64}
    folder = model(tmp_path, "moe", moe)
    dense = safetensors(folder / "a.safetensors", {"model.layers.0.self_attn.w": ("BF16", [64, 64]),
                                                   "model.layers.0.mlp.shared_experts.w": ("I8", [64, 64])})  # fmt: skip
    experts = safetensors(folder / "b.safetensors", {f"model.layers.0.mlp.experts.{e}.w": ("I8", [64, 64]) for e in range(4)})
    profile = read_profile(folder)
    assert profile["weightBytes"] == dense + experts and profile["expertWeightBytes"] == experts == 4 * 64 * 64
    assert "expertWeightBytes" not in read_profile(model(tmp_path, "indexed", moe, index_total=10))
    dense_folder = model(tmp_path, "dense", QWEN3)
    safetensors(dense_folder / "model.safetensors", {"model.layers.0.mlp.up_proj.w": ("BF16", [64, 64])})
    assert "expertWeightBytes" not in read_profile(dense_folder)  # a dense model has no experts to split
