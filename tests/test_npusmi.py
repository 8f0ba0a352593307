"""The npu-smi parser on recorded screens of an 8 x 910B3 host (tests/data/npu-smi)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ops.npusmi import NpuSmiError, parse_npu_smi

DATA = Path(__file__).parent / "data" / "npu-smi"


def screen(name: str) -> str:
    return (DATA / f"npu-smi-info-910b3-{name}.txt").read_text()


def test_an_idle_host_has_eight_healthy_cards_and_no_processes():
    info = parse_npu_smi(screen("idle"))
    assert info.version == "24.1.rc2"
    assert [n.index for n in info.npus] == list(range(8))
    assert all(n.healthy and n.name == "910B3" for n in info.npus)
    assert info.processes == ()
    assert info.npu(0).bus_id == "0000:C1:00.0"
    assert (info.npu(0).hbm_used_mb, info.npu(0).hbm_total_mb) == (3380, 65536)


def test_the_seed_host_shows_two_processes_on_card_0_and_one_on_each_other_card():
    info = parse_npu_smi(screen("seed"))
    assert [(p.pid, p.memory_mb) for p in info.processes_on(0)] == [(21873, 6554), (22410, 53248)]
    for card in range(1, 8):
        assert len(info.processes_on(card)) == 1
    assert info.processes_on(4)[0].pid == 23001
    assert all(p.name == "python3" and p.container_pid is None for p in info.processes)
    assert info.npu(0).hbm_used_mb == 61120


def test_the_process_id_in_container_column_of_newer_npu_smi_is_read_by_its_header():
    info = parse_npu_smi(screen("container-column"))
    assert [(p.npu, p.pid, p.container_pid, p.name, p.memory_mb) for p in info.processes_on(0)] == [
        (0, 21873, 120, "python3", 6554),
        (0, 22410, 131, "python3", 53248),
    ]
    assert [p.pid for p in info.processes] == [p.pid for p in parse_npu_smi(screen("seed")).processes]


def test_a_card_in_warning_is_reported_unhealthy():
    text = screen("idle").replace("| 3     910B3               | OK      ", "| 3     910B3               | Warning ")
    info = parse_npu_smi(text)
    assert [n.index for n in info.npus if not n.healthy] == [3]
    assert info.npu(3).health == "Warning"


def test_text_without_a_device_table_is_an_error_that_quotes_it():
    with pytest.raises(NpuSmiError, match="dcmi error -8005"):
        parse_npu_smi("dcmi error -8005: the device is busy\n")
