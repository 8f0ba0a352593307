"""`profile --help` says what the command reads and what it writes: an operator runs it against
production hosts and a committed stack file."""

from __future__ import annotations

import pytest

from allocation.config import ModelProfile
from allocation.config_errors import field_aliases
from cli.main import main


@pytest.fixture
def help_text(capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(["profile", "--help"])
    assert exit_.value.code == 0
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    "read",
    ["config.json", "text_config", "model.safetensors.index.json", "*.safetensors", "over SSH", "--models-root DIR"],
)
def test_it_says_which_files_of_each_model_folder_it_reads_and_where(help_text, read):
    assert read in help_text, help_text


@pytest.mark.parametrize("key", [k for k in field_aliases(ModelProfile) if k != "unverified"])
def test_it_names_every_profile_key_it_can_write(help_text, key):
    assert f" {key}," in help_text or f" {key} " in help_text or f" {key};" in help_text or f" {key})" in help_text, help_text


def test_it_says_it_replaces_the_profile_key_of_each_service_and_writes_nothing_on_any_failure(help_text):
    assert "replaces the profile: key of every service in the stack file" in help_text, help_text
    assert "unverified" in help_text and "nothing is written" in help_text, help_text
