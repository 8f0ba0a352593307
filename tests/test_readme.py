"""The README gives the two commands; the docs it points to keep what other tests cannot check by behaviour.
(Every config key in docs/configuration.md: tests/test_schema.py, over the generated reference.)"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
CAPACITY = (ROOT / "docs" / "capacity.md").read_text()


def test_the_readme_gives_the_two_commands():
    assert "make plan" in README and "make test" in README


def test_the_capacity_page_says_encoder_models_keep_no_kv_cache_and_how_auto_sizes_them():
    assert "keeps **no KV cache** at all" in CAPACITY
    assert "smallest fraction that holds its weights and the allowance" in CAPACITY
    assert "vLLM still takes the whole fraction" not in CAPACITY


def test_every_everyday_command_runs_as_pasted_from_the_repository_root():
    """`.venv/bin/python -m allocation ...`, each line one the command line accepts (its flags, its choices)."""
    import shlex

    from cli.main import _parser

    block = README.split("## Everyday commands")[1].split("```sh\n")[1].split("```")[0]
    lines = [shlex.split(line.split("  #")[0]) for line in block.splitlines() if line.strip()]
    assert all(words[:3] == [".venv/bin/python", "-m", "allocation"] for words in lines), lines
    for words in lines:
        _parser().parse_args(words[3:])  # a line it refuses exits here, naming the word
    assert {"status", "logs", "endpoints", "doctor", "plan"} <= {words[3] for words in lines}
