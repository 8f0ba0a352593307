"""Every file the tools write goes through `cli.safe_write`: never through a link, never half a set,
mode and owner kept, no temporary file left behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

import cli.safe_write
from allocation.errors import ConfigError
from cli.safe_write import write_file, write_set

FILES = ["grafana-dashboard.json", "prometheus.yml", "rules.yml", "targets-npu-exporter.json",
         "targets-router.json", "targets-vllm.json"]  # fmt: skip


def render(cli, out: Path | str, fmt: str = "prometheus"):
    return cli("render", "--stack", "staging", "--format", fmt, "--output", str(out))


def test_a_link_planted_at_an_output_name_is_refused_and_its_target_untouched(tmp_path, cli):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / "rules.yml").symlink_to(victim)
    result = render(cli, out)
    assert result.returncode == 1 and "rules.yml is a symbolic link" in result.stderr
    assert victim.read_text() == "precious" and (out / "rules.yml").is_symlink()
    assert sorted(p.name for p in out.iterdir()) == ["rules.yml"]


def test_links_planted_at_the_old_predictable_temporary_names_are_never_followed(tmp_path, cli):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    for name in FILES:
        (out / f".{name}.tmp").symlink_to(victim)
    assert render(cli, out).returncode == 0
    assert victim.read_text() == "precious"
    assert all((out / name).is_file() and not (out / name).is_symlink() for name in FILES)


def test_an_output_name_that_is_a_directory_leaves_the_old_set_whole_and_names_that_path(tmp_path, cli):
    out = tmp_path / "out"
    assert render(cli, out).returncode == 0
    before = {n: (out / n).read_bytes() for n in FILES if n != "rules.yml"}
    (out / "rules.yml").unlink()
    (out / "rules.yml").mkdir()
    (out / "prometheus.yml").write_text("old")
    before["prometheus.yml"] = b"old"
    result = render(cli, out)
    assert result.returncode == 1 and f"{out / 'rules.yml'} is not a regular file" in result.stderr
    assert {n: (out / n).read_bytes() for n in before} == before
    assert sorted(p.name for p in out.iterdir()) == FILES


def test_a_rename_failing_half_way_puts_the_old_files_back_and_leaves_no_temporaries(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    for name in ("a", "b", "c"):
        (out / name).write_text(f"old {name}")
    real, calls = os.replace, []

    def flaky(src, dst):
        if Path(dst).parent == out:
            calls.append(dst)
            if len(calls) == 2:
                raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(cli.safe_write.os, "replace", flaky)
    with pytest.raises(ConfigError, match=r"out/b: cannot write: No space left on device; the old files"):
        write_set(out, {"a": "new a", "b": "new b", "c": "new c", "d": "new d"})
    monkeypatch.undo()
    assert {p.name: p.read_text() for p in out.iterdir()} == {"a": "old a", "b": "old b", "c": "old c"}


def test_a_rewritten_file_keeps_its_mode_and_a_new_file_follows_the_umask(tmp_path):
    old = tmp_path / "Pulumi.t.yaml"
    old.write_text("x")
    old.chmod(0o640)
    write_file(old, b"y")
    assert stat.S_IMODE(old.stat().st_mode) == 0o640 and old.read_text() == "y"
    mask = os.umask(0o022)
    os.umask(mask)
    write_set(tmp_path / "out", {"a": "1"})
    assert stat.S_IMODE((tmp_path / "out" / "a").stat().st_mode) == 0o666 & ~mask


def test_write_file_refuses_a_link_and_writes_nothing(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "link").symlink_to(victim)
    with pytest.raises(ConfigError, match="is a symbolic link"):
        write_file(tmp_path / "link", b"evil")
    assert victim.read_text() == "precious" and sorted(p.name for p in tmp_path.iterdir()) == ["link", "victim"]


def test_an_empty_output_name_is_refused_not_the_current_directory(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = render(cli, "")
    assert result.returncode == 1 and "--output DIR" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_output_for_docker_run_is_refused_not_silently_ignored(tmp_path, cli):
    result = render(cli, tmp_path / "out", "docker-run")
    assert result.returncode == 1 and "--output is for --format compose or prometheus" in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "out").exists()


def test_a_link_planted_at_the_temporary_name_is_neither_followed_nor_replaced(tmp_path, monkeypatch):
    """The temporary names are random; should one be guessed, O_EXCL|O_NOFOLLOW refuse it and the next is tried."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    target = tmp_path / "Pulumi.t.yaml"
    target.write_text("old")
    names = iter(["guessed", "fresh"])
    monkeypatch.setattr(cli.safe_write.secrets, "token_hex", lambda n: next(names))
    (tmp_path / ".Pulumi.t.yaml.guessed.tmp").symlink_to(victim)
    write_file(target, b"new")
    assert victim.read_text() == "precious" and target.read_text() == "new"
    assert (tmp_path / ".Pulumi.t.yaml.guessed.tmp").is_symlink()
