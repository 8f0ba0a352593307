"""The README's config reference stays complete: every config key is documented."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from allocation.config import FleetConfig, Host, ModelProfile, Ports, Service, Ssh

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or n for n, f in model.model_fields.items() if not f.exclude]


def test_every_stack_config_key_is_in_the_readme_reference():
    missing = [
        f"{model.__name__}.{key}"
        for model in (FleetConfig, Host, Service, Ports, Ssh, ModelProfile)
        for key in keys(model)
        if f"`{key}`" not in README and f"`ascend-fleet:{key}`" not in README
    ]
    assert not missing, f"undocumented config keys: {missing}"


def test_the_readme_gives_the_two_commands():
    assert "make plan" in README and "make test" in README


def test_the_readme_says_encoder_models_keep_no_kv_cache_and_how_auto_sizes_them():
    assert "keeps **no KV cache** at all" in README
    assert "smallest fraction that holds its weights and the allowance" in README
    assert "vLLM still takes the whole fraction" not in README
