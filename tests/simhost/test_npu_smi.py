"""The fake npu-smi prints the real tool's screen, shows the sim containers' processes and sets device-share."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sim.host import CLAIMS_DIR, SimHost

# The simulator's own test: `make test` leaves it out (pytest.ini, marker `simulator`).
pytestmark = pytest.mark.simulator

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
    sim_host.set_device_share(4)  # two non-privileged containers on card 4
    sim_host.start_service(
        "bge-m3", model=bge, cards=[4], port=7007, gpu_memory_utilization=0.1, env={"HCCL_NPU_SOCKET_PORT_RANGE": "16666-16676"}
    )
    sim_host.wait_healthy("bge-m3")  # one after another: a card shared while loading has no memory to spare
    sim_host.start_service(
        "qwen-long", model=qwen, cards=[4, 5], port=6006, gpu_memory_utilization=0.8,
        env={"HCCL_NPU_SOCKET_PORT_RANGE": "16677-16687"},
    )  # fmt: skip
    sim_host.wait_healthy("qwen-long")

    cards = parse_npu_smi_info(sim_host.npu_smi("info"))

    assert [len(cards[i].processes) for i in range(8)] == [0, 0, 0, 0, 2, 1, 0, 0]
    assert all(name == "python3" for c in cards.values() for _, name, _ in c.processes)
    # The fraction of the runtime's 65452113920 bytes (62420 MiB), not of npu-smi's 65536 MB.
    assert sorted(mem for _, _, mem in cards[4].processes) == [6242, 49936]
    assert cards[4].hbm_used == 3380 + 6242 + 49936
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


# ---- device-share (npu-smi command reference "set container sharing mode"; texts and exit
# codes from npu-smi's open sources, HAMi ascend-device-plugin device_share.go and issue 131)

PROMPT = (
    "There are security risks when opening device sharing,\n"
    "Please ensure that only a single user uses the chip.\n"
    "Are you sure you want to continue setting?(Y/N)\n"
)


def card_block(card: int, status: str) -> str:
    return (
        f"\tNPU ID                         : {card}\n"
        "\tChip Count                     : 1\n"
        "\n"
        f"\tDevice-share Status            : {status}\n"
        "\tChip ID                        : 0\n"
        "\n"
    )


def npu_smi_set(sim_host: SimHost, card: int, value: int, answer: str | None = "Y", chip: bool = True):
    """`npu-smi set -t device-share` on the host; `answer` is its stdin (None: closed)."""
    stdin = "< /dev/null" if answer is None else f"<<'EOF'\n{answer}\nEOF"
    chip_arg = "-c 0 " if chip else ""
    return sim_host.run(f"npu-smi set -t device-share -i {card} {chip_arg}-d {value} {stdin}", check=False)


def test_device_share_is_reported_per_card_and_per_chip_in_the_real_layout(sim_host: SimHost) -> None:
    assert sim_host.npu_smi("info -t device-share -i 4") == card_block(4, "False")
    assert sim_host.npu_smi("info -t device-share -i 4 -c 0") == "\tDevice-share Status            : False\n"

    sim_host.set_device_share(4)

    assert sim_host.npu_smi("info -t device-share -i 4") == card_block(4, "True")
    assert sim_host.npu_smi("info -t device-share -i 4 -c 0") == "\tDevice-share Status            : True\n"
    assert sim_host.npu_smi("info -t device-share") == "".join(card_block(c, "True" if c == 4 else "False") for c in range(8))
    assert sim_host.device_shared_cards() == [4]


def test_enabling_device_share_asks_first_and_anything_but_yes_aborts_with_200(sim_host: SimHost) -> None:
    for answer in (None, "n", "yes", ""):
        aborted = npu_smi_set(sim_host, 2, 1, answer)
        assert (aborted.returncode, aborted.stdout) == (200, PROMPT), answer
    assert sim_host.device_shared_cards() == []

    enabled = npu_smi_set(sim_host, 2, 1, "Y")
    again = npu_smi_set(sim_host, 2, 1, "y")  # a redundant set succeeds too

    ok = PROMPT + "\tStatus                         : OK\n\tMessage                        : Set chip device-share successfully\n"
    assert (enabled.returncode, enabled.stdout) == (0, ok)
    assert (again.returncode, again.stdout) == (0, ok)
    assert sim_host.device_shared_cards() == [2]
    disabled = npu_smi_set(sim_host, 2, 0, answer=None, chip=False)  # -d 0 asks nothing
    assert disabled.returncode == 0
    assert disabled.stdout == (
        "\tStatus                         : OK\n\tMessage                        : The device-share is set successfully.\n"
    )
    assert sim_host.device_shared_cards() == []


def test_device_share_cannot_change_while_a_container_uses_the_card(sim_host: SimHost) -> None:
    model = sim_host.make_model("bge-m3")
    sim_host.start_service("bge-m3", model=model, cards=[3], port=7007, gpu_memory_utilization=0.1)
    sim_host.wait_healthy("bge-m3")

    refused = npu_smi_set(sim_host, 3, 1, "Y")

    assert refused.returncode == 203
    assert refused.stdout.startswith(PROMPT)
    assert "\tStatus                         : Fail\n" in refused.stdout
    assert "\tMessage                        : " in refused.stdout
    assert sim_host.device_shared_cards() == []
    sim_host.docker("stop", "bge-m3")
    assert npu_smi_set(sim_host, 3, 1, "Y").returncode == 0


def test_only_root_on_the_host_or_in_a_privileged_container_may_set_device_share(sim_host: SimHost) -> None:
    model = sim_host.make_model("bge-m3")
    sim_host.start_service("bge-m3", model=model, cards=[6], port=7007, gpu_memory_utilization=0.1)
    sim_host.wait_healthy("bge-m3")

    as_nobody = sim_host.run(
        "echo Y | setpriv --reuid=65534 --regid=65534 --clear-groups npu-smi set -t device-share -i 7 -c 0 -d 1",
        check=False,
    )
    in_container = sim_host.docker(
        "exec", "bge-m3", "sh", "-c", "echo Y | npu-smi set -t device-share -i 7 -c 0 -d 1", check=False
    )

    assert (as_nobody.returncode, as_nobody.stdout) == (214, "This command can be executed only by the root user.\n")
    assert in_container.returncode == 214
    assert "Operation not permitted, only root user on physical machine or on physical privilege container" in in_container.stdout
    assert sim_host.device_shared_cards() == []


def test_an_invalid_card_and_a_board_without_device_share_are_refused(sim_host: SimHost) -> None:
    invalid = sim_host.run("npu-smi info -t device-share -i 8", check=False)
    assert (invalid.returncode, invalid.stdout) == (215, "Invalid card id.\n")

    sim_host.mark_no_device_share(5)

    query = sim_host.run("npu-smi info -t device-share -i 5 -c 0", check=False)
    assert (query.returncode, query.stdout) == (0, "This device does not support querying device-share.\n")
    setting = npu_smi_set(sim_host, 5, 1, "Y")
    assert (setting.returncode, setting.stdout) == (217, "This device does not support setting device-share.\n")
    assert not (CLAIMS_DIR / "device-share" / "card5").exists()


def test_an_a3_layout_shows_sixteen_chips_by_npu_and_chip_and_shares_per_npu(sim_host: SimHost) -> None:
    from ops.npusmi import parse_npu_smi

    sim_host.set_layout("a3", hbm_mb=32768)
    info = parse_npu_smi(sim_host.npu_smi("info"))
    assert [(n.index, n.npu_id, n.chip, n.hbm_total_mb) for n in info.npus][2:4] == [(2, 1, 0, 32768), (3, 1, 1, 32768)]
    assert len(info.npus) == 16 and Path("/dev/davinci15").exists()
    assert sim_host.npu_smi("info", "-m").splitlines()[:2] == [
        "NPU ID  Chip ID  Chip Logic ID  Chip Phy-ID  Chip Name",
        "0       0        0              0            Ascend910",
    ]
    single = sim_host.run("printf 'Y\\n' | npu-smi set -t device-share -i 1 -c 0 -d 1", check=False)
    assert single.returncode == 217 and "single chip is not allowed" in single.stdout
    sim_host.run("printf 'Y\\n' | npu-smi set -t device-share -i 1 -d 1")
    assert sim_host.device_shared_cards() == [2, 3]
    sim_host.reset()
    assert len(parse_npu_smi(sim_host.npu_smi("info")).npus) == 8, "reset goes back to the A2 board"
