"""`profile` on hostile model folders: bounded reads, strict values, the stack file's own model
validating what is written, and the services the documented workflow needs profiled."""

from __future__ import annotations

import json

import pytest

from cli.main import main
from tests.support.profiles import QWEN3, model, safetensors, stack
from tests.support.profiles import profile, replicated_stack, services_of


BAD_CONFIGS = {
    "infinity": '{"num_hidden_layers": Infinity}',
    "1e400": '{"num_hidden_layers": 1e400}',
    "5000 digits": '{"num_hidden_layers": ' + "9" * 5000 + "}",
    "deep": "[" * 100_000 + "]" * 100_000,
    "a list": "[1, 2]",
    "null": "null",
    "zero heads": json.dumps({**QWEN3, "num_attention_heads": 0, "head_dim": None}),
    "text_config a list": json.dumps({"text_config": [1]}),
    "minus five layers": json.dumps({**QWEN3, "num_hidden_layers": -5}),
    "1.9 head dim": json.dumps({**QWEN3, "head_dim": 1.9}),
    "true layers": json.dumps({**QWEN3, "num_hidden_layers": True}),
    "layers as text": json.dumps({**QWEN3, "num_hidden_layers": "64"}),
    "absurd layers": json.dumps({**QWEN3, "num_hidden_layers": 10**12}),
    "not utf-8": b"\xff\xfe{}",
}


@pytest.mark.parametrize("content", BAD_CONFIGS.values(), ids=BAD_CONFIGS.keys())
def test_a_hostile_config_json_is_one_paragraph_and_nothing_is_written(tmp_path, capsys, content):
    root = tmp_path / "copy"
    folder = model(root / "disk2", "qwen", QWEN3, index_total=10)
    (folder / "config.json").write_bytes(content if isinstance(content, bytes) else content.encode())
    path = stack(tmp_path, ["qwen"])
    before = path.read_text()
    code, err = profile(path, root, capsys)
    assert code == 1 and "service qwen:" in err and "nothing was written" in err, err
    assert "bug" not in err and len(err.strip().splitlines()) == 1 and len(err) < 1000
    assert path.read_text() == before


@pytest.mark.parametrize("total", [0, -3, 2**80, True, "12", 1.5], ids=str)
def test_weight_bytes_out_of_range_or_of_the_wrong_type_are_refused_before_writing(tmp_path, capsys, total):
    root = tmp_path / "copy"
    folder = model(root / "disk2", "qwen", QWEN3)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total}}))
    path = stack(tmp_path, ["qwen"])
    before = path.read_text()
    code, err = profile(path, root, capsys)
    assert code == 1 and "service qwen:" in err and ("total_size" in err or "weightBytes" in err), err
    assert path.read_text() == before


def test_a_model_path_climbing_out_of_the_models_root_is_refused(tmp_path, capsys):
    root = tmp_path / "copy"
    (root / "disk2").mkdir(parents=True)
    model(tmp_path, "outside", QWEN3, index_total=10)
    path = stack(tmp_path, ["qwen"])
    path.write_text(path.read_text().replace("/disk2/qwen", "/disk2/../../outside"))
    code, err = profile(path, root, capsys)
    assert code == 1 and "outside --models-root" in err


def test_a_link_inside_the_models_root_to_a_file_outside_it_is_refused(tmp_path, capsys):
    root = tmp_path / "copy"
    folder = model(root / "disk2", "qwen", QWEN3, index_total=10)
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps(QWEN3))
    (folder / "config.json").unlink()
    (folder / "config.json").symlink_to(secret)
    code, err = profile(stack(tmp_path, ["qwen"]), root, capsys)
    assert code == 1 and "outside --models-root" in err


def test_values_read_from_files_are_never_echoed_beyond_a_short_escaped_excerpt(tmp_path, capsys):
    root = tmp_path / "copy"
    secret = "sk-" + "S3CRET" * 30
    model(root / "disk2", "qwen", {**QWEN3, "num_hidden_layers": secret + "\x1b[2J"}, index_total=10)
    code, err = profile(stack(tmp_path, ["qwen"]), root, capsys)
    assert code == 1 and "num_hidden_layers" in err
    assert secret not in err and "\x1b" not in err


def test_a_directory_named_config_json_is_named_as_not_a_regular_file(tmp_path, capsys):
    root = tmp_path / "copy"
    folder = model(root / "disk2", "qwen", QWEN3, index_total=10)
    (folder / "config.json").unlink()
    (folder / "config.json").mkdir()
    code, err = profile(stack(tmp_path, ["qwen"]), root, capsys)
    assert code == 1 and "config.json is not a regular file" in err


def test_an_index_without_total_size_says_so_instead_of_claiming_there_are_no_weights(tmp_path, capsys):
    root = tmp_path / "copy"
    folder = model(root / "disk2", "qwen", QWEN3)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))
    safetensors(folder / "model-00001-of-00001.safetensors", {"w": ("BF16", [8, 8])})
    code, err = profile(stack(tmp_path, ["qwen"]), root, capsys)
    assert code == 1 and "has no positive whole metadata.total_size" in err and "no safetensors weights" not in err


def test_a_replicated_auto_service_without_a_profile_is_profiled_under_its_own_name(tmp_path, capsys):
    root = tmp_path / "copy"
    model(root / "disk2", "qwen", QWEN3, index_total=2**30)
    path = replicated_stack(tmp_path)
    code, err = profile(path, root, capsys)
    assert code == 0, err
    assert services_of(path)["qwen"]["profile"] == {"weightBytes": 2**30, "numHiddenLayers": 64, "numKeyValueHeads": 8, "headDim": 128}
    assert main(["plan", "--config", str(path)]) == 0


def test_a_hand_set_kv_cache_dtype_is_kept(tmp_path, capsys):
    root = tmp_path / "copy"
    model(root / "disk2", "qwen", QWEN3, index_total=2**30)
    hand = "      profile: {weightBytes: 1, numHiddenLayers: 1, numKeyValueHeads: 1, headDim: 1, kvCacheDtype: int8}\n"
    path = replicated_stack(tmp_path, hand)
    assert profile(path, root, capsys)[0] == 0
    assert services_of(path)["qwen"]["profile"]["kvCacheDtype"] == "int8"
    assert services_of(path)["qwen"]["profile"]["weightBytes"] == 2**30


@pytest.mark.parametrize(("args", "dtype"), [('["--kv-cache-dtype", "fp8"]', "float8"), ('["--kv-cache-dtype=int8"]', "int8")])
def test_the_kv_cache_dtype_is_read_from_the_services_args(tmp_path, capsys, args, dtype):
    root = tmp_path / "copy"
    model(root / "disk2", "qwen", QWEN3, index_total=2**30)
    path = replicated_stack(tmp_path, args=f"      args: {args}\n")
    assert profile(path, root, capsys)[0] == 0
    assert services_of(path)["qwen"]["profile"]["kvCacheDtype"] == dtype


def test_a_file_name_with_terminal_escapes_reaches_the_error_escaped(tmp_path, capsys):
    root = tmp_path / "copy"
    folder = model(root / "disk2", "qwen", QWEN3)
    (folder / "x\x1b]0;pwned\x07.safetensors").write_bytes(b"\xff" * 8)
    code, err = profile(stack(tmp_path, ["qwen"]), root, capsys)
    assert code == 1 and "\\x1b]0;pwned\\x07" in err and "\x1b" not in err and "\x07" not in err
