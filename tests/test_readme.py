"""The README gives the two commands; the docs it points to keep what other tests cannot check by behaviour."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from allocation.config import FleetConfig, Host, ModelProfile, Ports, Service, Ssh

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
REFERENCE = (ROOT / "docs" / "configuration.md").read_text()
CAPACITY = (ROOT / "docs" / "capacity.md").read_text()


def keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or n for n, f in model.model_fields.items() if not f.exclude]


def test_every_stack_config_key_is_in_the_configuration_reference():
    missing = [
        f"{model.__name__}.{key}"
        for model in (FleetConfig, Host, Service, Ports, Ssh, ModelProfile)
        for key in keys(model)
        if f"`{key}`" not in REFERENCE and f"`ascend-fleet:{key}`" not in REFERENCE
    ]
    assert not missing, f"undocumented config keys: {missing}"


def test_the_readme_gives_the_two_commands():
    assert "make plan" in README and "make test" in README


def test_the_capacity_page_says_encoder_models_keep_no_kv_cache_and_how_auto_sizes_them():
    assert "keeps **no KV cache** at all" in CAPACITY
    assert "smallest fraction that holds its weights and the allowance" in CAPACITY
    assert "vLLM still takes the whole fraction" not in CAPACITY
