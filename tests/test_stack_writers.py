"""One writer at a time on a stack file: `pin` and `profile` never lose an edit.

Each command reads the stack file, works out its edit (a `pin` of 20,000 services takes minutes),
and writes. A second command, or a person saving the file, in between must not have its edit
overwritten: the writer re-reads the file under a lock and refuses a file that changed.
"""

from __future__ import annotations

import threading

import pytest

import cli.main
import cli.stack_editor
from allocation.errors import ConfigError
from cli.stack_editor import set_service_keys
from tests.support.stacks import SEED_UNPINNED


def _paused_between_read_and_write(monkeypatch, writers: int) -> None:
    """Every writer works out its edit, then waits until all have: both have read the old file."""
    barrier = threading.Barrier(writers, timeout=60)
    real = cli.stack_editor._set_text

    def paused(*args, **kwargs):
        result = real(*args, **kwargs)
        barrier.wait()
        return result

    monkeypatch.setattr(cli.stack_editor, "_set_text", paused)


def test_of_two_writers_started_together_one_writes_and_the_other_refuses_so_no_edit_is_lost(tmp_path, monkeypatch):
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(SEED_UNPINNED)
    _paused_between_read_and_write(monkeypatch, 2)
    outcomes: dict[str, object] = {}

    def writer(service: str, key: str) -> None:
        try:
            outcomes[key] = set_service_keys(path, {service: {key: 1}}, command=key)
        except ConfigError as exc:
            outcomes[key] = exc

    threads = [threading.Thread(target=writer, args=args) for args in (("qwen", "maxNumSeqs"), ("bge", "maxModelLen"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    refused = {k: v for k, v in outcomes.items() if isinstance(v, ConfigError)}
    assert len(outcomes) == 2 and len(refused) == 1, outcomes
    (loser, error), = refused.items()
    winner = ({"maxNumSeqs", "maxModelLen"} - {loser}).pop()
    text = path.read_text()
    assert f"{winner}: 1" in text and f"{loser}: 1" not in text, text
    assert f"changed since {loser} read it" in str(error) and f"run {loser} again" in str(error), error
    assert f"now '      {winner}: 1'" in str(error), error


def test_a_file_saved_while_pin_works_is_not_overwritten_and_pin_says_what_changed(tmp_path, monkeypatch, capsys):
    """A person saves the file after `pin` read it: the pins, made from the old text, are not written."""
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(SEED_UNPINNED)
    edited = SEED_UNPINNED.replace("memoryFraction: 0.85", "memoryFraction: 0.8")
    real = cli.main.deployment_of

    def plan_then_save(*args):
        deployment = real(*args)
        path.write_text(edited)
        return deployment

    monkeypatch.setattr(cli.main, "deployment_of", plan_then_save)
    assert cli.main.main(["pin", "--config", str(path)]) != 0
    assert path.read_text() == edited
    err = capsys.readouterr().err
    assert "changed since pin read it" in err and "memoryFraction: 0.8'" in err and "run pin again" in err, err


def test_the_lock_is_a_file_beside_the_stack_file_and_the_stack_file_is_replaced(tmp_path):
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(SEED_UNPINNED)
    inode = path.stat().st_ino
    assert set_service_keys(path, {"qwen": {"maxNumSeqs": 1}}) == ["qwen"]
    assert (tmp_path / ".Pulumi.t.yaml.lock").is_file() and path.stat().st_ino != inode


def test_a_writer_waits_for_the_lock_and_gives_up_with_one_paragraph(tmp_path, monkeypatch):
    import fcntl, os

    import cli.safe_write

    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(SEED_UNPINNED)
    fd = os.open(tmp_path / ".Pulumi.t.yaml.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    monkeypatch.setattr(cli.safe_write, "LOCK_WAIT_SECONDS", 0.2)
    try:
        with pytest.raises(ConfigError, match="another command has held .*nothing was written"):
            set_service_keys(path, {"qwen": {"maxNumSeqs": 1}})
    finally:
        os.close(fd)
    assert path.read_text() == SEED_UNPINNED


def test_a_file_saved_while_profile_reads_the_models_is_not_overwritten(tmp_path, monkeypatch, capsys):
    import ops.models
    from tests.support.profiles import QWEN3, model, stack

    root = tmp_path / "copy"
    model(root / "disk2", "qwen", QWEN3, index_total=30 * 2**30)
    path = stack(tmp_path, ["qwen"])
    edited = path.read_text().replace("maxModelLen: 32768", "maxModelLen: 16384")
    real = ops.models.profiles

    def profile_then_save(*args):
        found = real(*args)
        path.write_text(edited)
        return found

    monkeypatch.setattr(ops.models, "profiles", profile_then_save)
    assert cli.main.main(["profile", "--config", str(path), "--models-root", str(root)]) != 0
    assert path.read_text() == edited
    err = capsys.readouterr().err
    assert "changed since profile read it" in err and "run profile again" in err, err
