"""`profile` refuses a checkpoint whose `config.json` gives a field the capacity arithmetic needs as zero,
a negative, a boolean or nothing, naming the field: none of them is "absent", and a broken checkpoint
must not be called healthy. A `null` field is absent, as transformers writes an unset `head_dim`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ops.models import Folder, ProfileError, read_profile
from tests.support.profiles import QWEN3

DATA = Path(__file__).parent / "data"
INDEX = json.dumps({"metadata": {"total_size": 10**9}})


def read(config: dict) -> dict:
    return read_profile(Folder("m", json.dumps(config), INDEX))


def qwen36(**text) -> dict:
    config = json.loads((DATA / "qwen3.6-27b" / "config.json").read_text())
    config["text_config"] |= text
    return config


@pytest.mark.parametrize("field", ["num_key_value_heads", "head_dim"])
@pytest.mark.parametrize("value", [0, -4, False, True], ids=repr)
@pytest.mark.parametrize("config", [lambda **t: {**QWEN3, **t}, qwen36], ids=["dense", "gated delta net"])
def test_a_zero_negative_or_boolean_field_of_the_arithmetic_is_refused_by_name(config, field, value):
    with pytest.raises(ProfileError) as caught:
        read(config(**{field: value}))
    assert f"{field} is '{value}', not a positive whole number" in str(caught.value), str(caught.value)


def test_a_null_head_dim_or_kv_heads_is_absent_and_falls_back_as_transformers_does():
    profile = read({**QWEN3, "head_dim": None, "num_key_value_heads": None})
    assert (profile["numKeyValueHeads"], profile["headDim"]) == (64, 5120 // 64)


def test_a_head_dim_absent_with_no_hidden_size_to_derive_it_from_is_refused_by_name():
    config = {k: v for k, v in QWEN3.items() if k not in ("head_dim", "hidden_size")}
    with pytest.raises(ProfileError, match="lacks 'hidden_size'"):
        read(config)
