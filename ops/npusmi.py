"""A parser of `npu-smi info`: per-NPU health and the processes holding each card.

`doctor` runs `npu-smi info` on a host and needs two things from it: which cards
are unhealthy, and which processes (host PIDs) hold which card. The screen is a
box-drawn table meant for people; this parser reads it by column headers rather
than by character positions, so both layouts seen in the field are understood:
the 24.x layout (`Process id | Process name | Process memory(MB)`), newer
versions that add a `Process id in container` column, and the A3 layout, whose
chip row adds a `Phy-ID` (two chips per NPU id; vllm-ascend issue 6245). Numbers
are ASCII digits only. Pure: text in, data out.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Mapping

HEALTHY = "OK"

_CARD_ROW = re.compile(r"^(?P<npu>[0-9]+)\s+(?P<name>\S.*)$")
_BUS_ID = re.compile(r"[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]\Z")
_NO_PROCESS = re.compile(r"No running processes found in NPU\s+(?P<npu>[0-9]+)", re.IGNORECASE)
_VERSION = re.compile(r"Version:\s*(?P<version>\S+)")
_USED_TOTAL = re.compile(r"([0-9]{1,9})\s*/\s*([0-9]{1,9})\s*$")
_NUMBER = re.compile(r"[0-9]{1,9}")


class NpuSmiError(ValueError):
    """The text is not an `npu-smi info` screen this parser understands."""


@dataclass(frozen=True)
class Npu:
    """One NPU (chip) of the device table."""

    index: int
    """The card index doctor compares with `/dev/davinciN`: the NPU id on A2 (one chip per NPU); the
    `Phy-ID` of the chip on A3, where one NPU id holds two chips (the "Chip Phy-ID" column)."""
    name: str
    health: str
    """`OK`, `Warning`, `Alarm`, `Critical`, ... as npu-smi prints it."""
    npu_id: int | None = None
    """The npu-smi NPU id (`-i` of npu-smi commands)."""
    chip: int = 0
    bus_id: str = ""
    hbm_used_mb: int | None = None
    hbm_total_mb: int | None = None

    @property
    def healthy(self) -> bool:
        return self.health.upper() == HEALTHY


@dataclass(frozen=True)
class NpuProcess:
    """One row of the process table: a process holding memory on a card."""

    npu: int
    """The card index (as `Npu.index`): on A3 the Phy-ID of the (NPU id, chip) the row names."""
    pid: int
    """Host PID (the `Process id` column)."""
    name: str
    memory_mb: int
    chip: int = 0
    container_pid: int | None = None
    """`Process id in container`, printed by newer npu-smi versions only."""


@dataclass(frozen=True)
class NpuSmiInfo:
    version: str | None
    npus: tuple[Npu, ...]
    processes: tuple[NpuProcess, ...]

    def npu(self, index: int) -> Npu | None:
        return next((n for n in self.npus if n.index == index), None)

    def processes_on(self, index: int) -> list[NpuProcess]:
        return [p for p in self.processes if p.npu == index]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def number(text: str) -> int | None:
    """A whole number written in ASCII digits (at most 9), else None: `²` or `١` are digits to
    `str.isdigit`, not to a card index or a PID."""
    text = text.strip()
    return int(text) if _NUMBER.fullmatch(text) else None


def _process_columns(header: list[str]) -> dict[str, int]:
    """Column index of each process-table field, from the header row's cell names."""
    columns = {}
    for i, cell in enumerate(header):
        name = " ".join(cell.lower().split())
        if name.startswith("npu"):
            columns["npu"] = i
        elif name.startswith("process id in container"):
            columns["container_pid"] = i
        elif name == "process id" or name.startswith("process id "):
            columns["pid"] = i
        elif name.startswith("process name"):
            columns["name"] = i
        elif name.startswith("process memory"):
            columns["memory"] = i
    return columns


def _process_row(line: str, cells: list[str], columns: dict[str, int]) -> NpuProcess | None:
    """A row of the process table; None for a "no running processes" row or one that does not fit."""
    if _NO_PROCESS.search(line):
        return None
    if not all(k in columns for k in ("npu", "pid", "name", "memory")) or len(cells) <= max(columns.values()):
        return None
    npu_chip = cells[columns["npu"]].split()
    pid = number(cells[columns["pid"]])
    if not npu_chip or number(npu_chip[0]) is None or pid is None:
        return None
    return NpuProcess(
        npu=int(npu_chip[0]),
        chip=(number(npu_chip[1]) or 0) if len(npu_chip) > 1 else 0,
        pid=pid,
        name=cells[columns["name"]],
        memory_mb=number(cells[columns["memory"]]) or 0,
        container_pid=number(cells[columns["container_pid"]]) if "container_pid" in columns else None,
    )


def parse_npu_smi(text: str) -> NpuSmiInfo:
    """Parse the screen of `npu-smi info`; raise NpuSmiError when it has no device table."""
    version = None
    npus: list[Npu] = []
    processes: list[NpuProcess] = []
    section = None  # "devices" | "processes"
    columns: dict[str, int] = {}
    pending: dict | None = None  # the first row of a device, waiting for its chip row
    card_of: dict[tuple[int, int], int] = {}  # (NPU id, chip) -> card index

    for line in text.splitlines():
        line = line.rstrip()
        if not line.startswith("|"):
            continue
        cells = _cells(line)
        lowered = line.lower()
        if version is None and (m := _VERSION.search(line)) and "npu-smi" in lowered:
            version = m.group("version")
            continue
        if "health" in lowered and "name" in lowered and cells[0].lower().startswith("npu"):
            section = "devices"
            continue
        if "process id" in lowered and cells[0].lower().startswith("npu"):
            section, columns = "processes", _process_columns(cells)
            continue
        if section == "devices" and cells[0].lower().startswith("chip"):
            continue  # second header row
        if section == "devices" and len(cells) >= 2:
            first = _CARD_ROW.match(cells[0])
            if first and not _BUS_ID.fullmatch(cells[1]):
                pending = {"index": int(first.group("npu")), "name": first.group("name").strip(), "health": cells[1]}
                continue
            chip_phy = [number(c) for c in cells[0].split()]
            if pending is not None and len(chip_phy) in (1, 2) and None not in chip_phy:
                used = total = None
                if len(cells) >= 3 and (m := _USED_TOTAL.search(cells[2])):
                    used, total = int(m.group(1)), int(m.group(2))
                chip, phy = chip_phy[0], chip_phy[-1] if len(chip_phy) == 2 else None
                npu_id = pending.pop("index")
                index = phy if phy is not None else npu_id
                card_of[(npu_id, chip)] = index
                npus.append(
                    Npu(index=index, npu_id=npu_id, chip=chip, bus_id=cells[1], hbm_used_mb=used, hbm_total_mb=total, **pending)
                )
                pending = None
            continue
        if section == "processes" and (process := _process_row(line, cells, columns)) is not None:
            card = card_of.get((process.npu, process.chip), process.npu)
            processes.append(dataclasses.replace(process, npu=card))
    if not npus:
        raise NpuSmiError("no NPU table in the npu-smi output: " + (" ".join(text.split())[:200] or "(empty)"))
    return NpuSmiInfo(version=version, npus=tuple(npus), processes=tuple(processes))


# `npu-smi info -t topo`: a matrix of the links between NPUs, as in modelscope/ms-swift
# docs/source/BestPractices/NPU-support.md (8 x 910B3, every pair `HCCS`):
#
#   <TAB>   NPU0       NPU1   ...    NPU7       CPU Affinity
#   NPU0       X          HCCS  ...  HCCS       144-167
#   ...
#   Legend:
#     X    = Self
#     SYS  = Path traversing PCIe and NUMA nodes. ...
#     PHB  = Path traversing PCIe and the PCIe host bridge of a CPU.
#     PIX  = Path traversing a single PCIe switch
#     PXB  = Path traversing multiple PCIe switches
#     HCCS = Connection traversing HCCS.
#     NA   = Unknown relationship.
#
# Readers of the same screen: vllm-ascend `vllm_ascend/cpu_binding.py` (`parse_topo_affinity`: rows
# that start with `NPU`, the CPU list last) and MindIE's `is_support_hccs` (HCCS anywhere before
# `Legend`). The runtime's own kinds (CANN `aclrtGetDevicesTopo`): HCCS, PIX, PHB, SYS, SIO, HCCS_SW.
_TOPO_NPU = re.compile(r"NPU([0-9]{1,3})")
_TOPO_LINK = re.compile(r"[A-Za-z_]{1,12}")
MAX_TOPO_NPUS = 64


@dataclass(frozen=True)
class Topology:
    """The links between NPUs, by npu-smi NPU id (the `/dev/davinciN` index on A2 boards)."""

    npus: tuple[int, ...]
    """The NPUs of the matrix's header, in its order."""
    links: Mapping[tuple[int, int], str]
    """(row NPU, column NPU) -> the link as printed (`HCCS`, `PIX`, `SYS`, `X` for itself...)."""

    def link(self, a: int, b: int) -> str | None:
        return self.links.get((a, b))


def _topology_header(fields: list[str]) -> tuple[int, ...] | None:
    """The NPU ids of a header row (`NPU0 NPU1 ... CPU Affinity`): at least two NPU columns."""
    ids = []
    for field in fields:
        if not (m := _TOPO_NPU.fullmatch(field)):
            break
        ids.append(int(m.group(1)))
    return tuple(ids) if 2 <= len(ids) <= MAX_TOPO_NPUS and len(set(ids)) == len(ids) else None


def parse_topology(text: str) -> Topology:
    """Parse `npu-smi info -t topo`; raise NpuSmiError when it has no NPU matrix. Rows that do not fit
    the header (another length, a cell that is not a link word) are left out, not guessed at."""
    header: tuple[int, ...] | None = None
    links: dict[tuple[int, int], str] = {}
    for line in text.splitlines()[: 4 * MAX_TOPO_NPUS]:
        fields = line.split()
        if header is None:
            header = _topology_header(fields)
            continue
        row = _TOPO_NPU.fullmatch(fields[0]) if fields else None
        cells = fields[1 : len(header) + 1]
        if row is None or len(cells) < len(header) or not all(_TOPO_LINK.fullmatch(c) for c in cells):
            continue
        links.update(((int(row.group(1)), peer), cell.upper()) for peer, cell in zip(header, cells))
    if header is None:
        raise NpuSmiError("no NPU matrix in the output of npu-smi info -t topo: " + (" ".join(text.split())[:200] or "(empty)"))
    return Topology(npus=header, links=links)
