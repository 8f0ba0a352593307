"""`python -m sim --help` says what the command does and starts no simulated host; a simulated host that
waits for the machine's lock says so."""

from __future__ import annotations

import fcntl
import os

import pytest

import sim.__main__ as sim_main
import sim.host as sim_host
from sim.host import SimHost, SimHostError


def test_help_describes_the_dev_host_and_starts_nothing(monkeypatch, capsys):
    def no_host(*args, **kwargs):
        raise AssertionError("--help started a simulated host")

    monkeypatch.setattr(sim_main, "SimHost", no_host)
    monkeypatch.setattr(sim_main, "load_fleet", no_host)
    with pytest.raises(SystemExit) as exit_:
        sim_main.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m sim")
    assert "simulated Ascend 910B host" in out
    assert "Ctrl-C" in out


def test_a_simulated_host_waiting_for_another_ones_lock_says_so_once_and_gives_up_in_one_line(
    monkeypatch, capsys, tmp_path
):
    """`python -m sim` beside a test run waits for the machine's lock: silence there looked like a hang."""
    lock = tmp_path / "simhost.lock"
    monkeypatch.setattr(sim_host, "LOCK_FILE", lock)
    monkeypatch.setattr(sim_host, "unavailable_reason", lambda: "")
    held = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        with pytest.raises(SimHostError, match=f"another simulated host holds {lock}"):
            SimHost(tmp_path / "host", lock_timeout=0.3).start()
    finally:
        os.close(held)
    assert capsys.readouterr().err.splitlines() == [
        f"waiting for {lock}: another simulated host holds it (a test run on this machine?); giving up after 0 s"
    ]
