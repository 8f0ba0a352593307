"""The npu-smi parser on recorded screens of an 8 x 910B3 host (tests/data/npu-smi)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ops.npusmi import NpuSmiError, parse_npu_smi, parse_topology

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


# ---- npu-smi info -t topo ----------------------------------------------------

SIM_NPU_SMI = Path(__file__).parent.parent / "sim" / "npu-smi"


def test_the_topology_of_an_8_card_a2_board_is_a_full_hccs_mesh():
    """The recorded screen: modelscope/ms-swift docs/source/BestPractices/NPU-support.md (8 x 910B3)."""
    topo = parse_topology((DATA / "npu-smi-info-t-topo-910b3.txt").read_text())
    assert topo.npus == tuple(range(8))
    assert {topo.link(a, b) for a in range(8) for b in range(8) if a != b} == {"HCCS"}
    assert topo.link(3, 3) == "X" and topo.link(0, 9) is None


def test_a_link_that_is_not_hccs_is_read_as_printed_in_either_direction():
    text = (DATA / "npu-smi-info-t-topo-910b3.txt").read_text()
    rows = text.splitlines()
    rows[3] = rows[3].replace("X          HCCS", "X          PIX ", 1)  # NPU2 -> NPU3
    topo = parse_topology("\n".join(rows))
    assert topo.link(2, 3) == "PIX" and topo.link(3, 2) == "HCCS"


@pytest.mark.parametrize(
    "text",
    ["", "dcmi error -8005\n", "NPU0 NPU1\nNPU0 X\n", "\tNPU0 NPU1\nNPU0 X HCCS " + "A" * 10_000 + "\n",
     "\tNPU0 NPU99999999999\nNPU0 X HCCS\n"],
)  # fmt: skip
def test_text_without_a_readable_topology_matrix_is_an_error_never_a_crash(text):
    try:
        topo = parse_topology(text)
    except NpuSmiError as exc:
        assert len(str(exc)) < 400
    else:
        assert all(len(link) <= 12 for link in topo.links.values())


def sim_topology(tmp_path: Path, missing: str | None = None) -> str:
    env = {"PATH": os.environ["PATH"], "NPU_SIM_TOPOLOGY": str(tmp_path / "topology")}
    if missing is not None:
        (tmp_path / "topology").write_text(missing)
    done = subprocess.run(["sh", str(SIM_NPU_SMI), "info", "-t", "topo"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_simulated_npu_smi_prints_the_a2_board_as_the_real_tool_does(tmp_path):
    assert sim_topology(tmp_path) == (DATA / "npu-smi-info-t-topo-910b3.txt").read_text()


def test_a_link_marked_missing_on_the_simulated_host_shows_both_ways_as_marked(tmp_path):
    topo = parse_topology(sim_topology(tmp_path, "2 3\n5 6 PHB\n# comment\n9 1\n"))
    assert (topo.link(2, 3), topo.link(3, 2), topo.link(5, 6), topo.link(6, 5)) == ("SYS", "SYS", "PHB", "PHB")
    assert topo.link(0, 1) == "HCCS"
