"""The fake npu-smi prints the real tool's screen and shows the sim containers' processes."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from sim.host import SimHost

DATA = Path(__file__).resolve().parents[1] / "data" / "npu-smi"

CARD_ROW = re.compile(r"^\| (\d+)\s+(\S+)\s+\| (\S+)\s+\| ([\d.]+)\s+(\d+)\s+(\d+)\s*/ (\d+)\s+\|$")
CHIP_ROW = re.compile(r"^\| (\d+)\s+\| (\S+)\s+\| (\d+)\s+(\d+)\s*/ (\d+)\s+(\d+)\s*/ (\d+)\s+\|$")
PROCESS_ROW = re.compile(r"^\| (\d+)\s+(\d+)\s+\| (\d+)\s+\|(?: (\d+)\s+\|)? (\S+)\s+\| (\d+)\s+\|$")
NO_PROCESS_ROW = re.compile(r"^\| No running processes found in NPU (\d+)\s+\|$")


@dataclass
class Card:
    name: str
    health: str
    hbm_used: int = 0
    hbm_total: int = 0
    processes: list[tuple[int, str, int]] = field(default_factory=list)


def parse_npu_smi_info(text: str) -> dict[int, Card]:
    """Cards of an `npu-smi info` screen; every line must be a known row (tolerates the
    newer `Process id in container` column)."""
    cards: dict[int, Card] = {}
    current: int | None = None
    for line in text.splitlines():
        if m := CARD_ROW.match(line):
            current = int(m[1])
            cards[current] = Card(name=m[2], health=m[3])
        elif (m := CHIP_ROW.match(line)) and current is not None:
            cards[current].hbm_used, cards[current].hbm_total = int(m[6]), int(m[7])
            current = None
        elif m := PROCESS_ROW.match(line):
            cards[int(m[1])].processes.append((int(m[3]), m[5], int(m[6])))
        elif m := NO_PROCESS_ROW.match(line):
            assert int(m[1]) in cards
        else:
            assert line.startswith("+") or "npu-smi" in line or "Name" in line or "Chip" in line, line
        assert len(line) == 98, line
    return cards


def test_the_parser_reads_both_fixture_screens() -> None:
    idle = parse_npu_smi_info((DATA / "npu-smi-info-910b3-idle.txt").read_text())
    seed = parse_npu_smi_info((DATA / "npu-smi-info-910b3-seed.txt").read_text())

    assert sorted(idle) == list(range(8))
    assert all(not c.processes for c in idle.values())
    assert [len(seed[i].processes) for i in range(8)] == [2, 1, 1, 1, 1, 1, 1, 1]


def test_npu_smi_info_on_an_idle_host_prints_the_fixture_screen_exactly(sim_host: SimHost) -> None:
    assert sim_host.npu_smi("info") == (DATA / "npu-smi-info-910b3-idle.txt").read_text()


def test_npu_smi_shows_the_processes_of_running_sim_containers_on_their_cards(sim_host: SimHost) -> None:
    bge = sim_host.make_model("bge-m3")
    qwen = sim_host.make_model("Qwen3.6-27B-W8A8")
    sim_host.start_service(
        "bge-m3", model=bge, cards=[4], port=7007, gpu_memory_utilization=0.1, env={"HCCL_NPU_SOCKET_PORT_RANGE": "16666-16676"}
    )
    sim_host.start_service(
        "qwen-long", model=qwen, cards=[4, 5], port=6006, gpu_memory_utilization=0.8,
        env={"HCCL_NPU_SOCKET_PORT_RANGE": "16677-16687"},
    )  # fmt: skip
    sim_host.wait_healthy("bge-m3")
    sim_host.wait_healthy("qwen-long")

    cards = parse_npu_smi_info(sim_host.npu_smi("info"))

    assert [len(cards[i].processes) for i in range(8)] == [0, 0, 0, 0, 2, 1, 0, 0]
    assert all(name == "python3" for c in cards.values() for _, name, _ in c.processes)
    assert sorted(mem for _, _, mem in cards[4].processes) == [6554, 52429]
    assert cards[4].hbm_used == 3380 + 6554 + 52429
    bge_pids = set(sim_host.docker("top", "bge-m3", "-o", "pid").stdout.split()[1:])
    qwen_pids = set(sim_host.docker("top", "qwen-long", "-o", "pid").stdout.split()[1:])
    card4_pids = {str(pid) for pid, _, _ in cards[4].processes}
    assert len(card4_pids & bge_pids) == 1
    assert len(card4_pids & qwen_pids) == 1
    assert {str(pid) for pid, _, _ in cards[5].processes} <= qwen_pids


def test_npu_smi_inside_a_container_sees_the_cards_in_use(sim_host: SimHost) -> None:
    model = sim_host.make_model("bge-m3")
    sim_host.start_service("bge-m3", model=model, cards=[6], port=7007, gpu_memory_utilization=0.1)
    sim_host.wait_healthy("bge-m3")

    cards = parse_npu_smi_info(sim_host.docker("exec", "bge-m3", "npu-smi", "info").stdout)

    assert [len(cards[i].processes) for i in range(8)] == [0, 0, 0, 0, 0, 0, 1, 0]


def test_a_card_marked_unhealthy_reports_its_health(sim_host: SimHost) -> None:
    sim_host.mark_unhealthy(3, "Critical")
    sim_host.mark_unhealthy(5)

    cards = parse_npu_smi_info(sim_host.npu_smi("info"))

    assert {i: c.health for i, c in cards.items() if c.health != "OK"} == {3: "Critical", 5: "Warning"}
    assert all(c.name == "910B3" for c in cards.values())
