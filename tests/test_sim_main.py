"""`python -m sim --help` says what the command does and starts no simulated host."""

from __future__ import annotations

import pytest

import sim.__main__ as sim_main


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
