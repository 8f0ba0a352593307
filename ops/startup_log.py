"""vLLM-Ascend's startup lines, read from a container's log: what `calibrate` measures. Pure.

At start vLLM-Ascend v0.20.2rc1 (which runs vLLM v0.20.2, its Dockerfile's `VLLM_TAG`) logs the
figures the capacity check and the graph check otherwise take from a profile or an estimate. The
lines, as these sources print them (each through vLLM's logger, `vllm/logger.py` `_FORMAT`:
`LEVEL MM-DD HH:MM:SS [file.py:line] message`, behind `(PROCESS pid=N) ` in a worker or engine
process, `vllm/utils/system_utils.py` `_add_prefix`; `docker logs --timestamps` puts the
daemon's RFC 3339 time first):

- every rank: `Starting to load model M...` and `Loading model weights took %.4f GB` (the bytes
  over 2**30: GiB) (vllm-ascend `vllm_ascend/worker/model_runner_v1.py` l. 3374, l. 3421);
- the first rank: `Available KV cache memory: %.2f GiB` (vllm-ascend `vllm_ascend/worker/worker.py`
  l. 394, `info_once`, local scope), and `Graph capturing finished in %.0f secs, took %.2f GiB`
  (vLLM `vllm/v1/worker/gpu_model_runner.py` l. 6133, which vllm-ascend's `capture_model` calls);
- the engine core: `GPU KV cache size: N tokens`, N with thousands separators (vLLM
  `vllm/v1/core/kv_cache_utils.py` l. 1708);
- every rank, unless `--kv-cache-memory-bytes` was given: one line that has them all (vllm-ascend
  `worker.py` l. 528-546; each figure `format_gib`, `str(round(bytes / 2**30, 2))` of
  `vllm/utils/mem_utils.py`): `Free memory on device (F/T GiB) on startup. Desired GPU memory
  utilization is (U, R GiB). Actual usage: W GiB for weights, A GiB for peak activation, N GiB for
  non-torch memory, G GiB for NPU graph memory. Replace gpu_memory_utilization with
  `--kv-cache-memory=B` (X GiB) to fit into requested memory, or `--kv-cache-memory=B` (Y GiB) to
  fully utilize NPU free memory. Current KV cache memory: K GiB.`

A log is text nobody here controls (a request's prompt may be logged too), so every line that
carries one of these phrases (`MARKERS`) must be one of these lines, whole, or the log is refused:
a forged figure or a line cut short is never read as a measurement. Numbers are read only in the
form vLLM prints them (digits, a point, two or four decimals), so no `1e999`, `NaN` or `-0x1`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

from ops.bounded_json import excerpt

MARKERS = (
    "Starting to load model",
    "Loading model weights took",
    "Available KV cache memory",
    "GPU KV cache size",
    "Graph capturing finished",
    "for NPU graph memory",
)
"""The phrases of the startup lines: the host keeps the lines holding any of them (`grep -F`)."""
MAX_LINES = 2000
"""Startup lines read of one container: a server of 16 ranks writes about 50."""
MAX_LINE = 4096
"""Characters of one line: the longest, the summary, is about 600 plus the model path's none."""

SHOWN = 160
"""Characters of a refused line a message quotes."""
_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T[0-9:.]{8,18}Z ")
# What vLLM's logger puts before a message, after docker's timestamp (RFC 3339, nanoseconds trimmed).
_ENVELOPE = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.\d{1,9})?Z "
    r"(?P<text>(?:\((?P<process>[A-Za-z0-9_]{1,64}) pid=(?P<pid>\d{1,10})\) )?"
    r"INFO \d{2}-\d{2} \d{2}:\d{2}:\d{2} \[[A-Za-z0-9_./-]{1,200}:\d{1,6}\] (?P<message>.*))"
)
_GIB = r"-?\d{1,6}\.\d{1,2}"  # format_gib: a Python float of two decimals at most (6.1, 0.0, 60.96)
_FRACTION = r"1\.0|0\.\d{1,30}|[1-9](?:\.\d{1,16})?e-\d{2,3}"  # str() of gpu_memory_utilization: 0.9, 1.0, 5e-05
_MESSAGES = {
    "load": re.compile(r"Starting to load model (?P<model>[^\x00-\x1f\x7f\ufffd]{1,4095})\.\.\."),
    "weights": re.compile(r"Loading model weights took (?P<weights>\d{1,6}\.\d{4}) GB"),
    "available": re.compile(r"Available KV cache memory: (?P<kv>-?\d{1,6}\.\d{2}) GiB"),
    "tokens": re.compile(r"GPU KV cache size: (?P<tokens>\d{1,3}(?:,\d{3}){0,4}) tokens"),
    "graph": re.compile(r"Graph capturing finished in \d{1,9} secs, took (?P<graph>-?\d{1,6}\.\d{2}) GiB"),
    "summary": re.compile(
        rf"Free memory on device \({_GIB}/{_GIB} GiB\) on startup\. Desired GPU memory utilization is "
        rf"\((?P<fraction>{_FRACTION}), {_GIB} GiB\)\. Actual usage: (?P<weights>{_GIB}) GiB for weights, "
        rf"(?P<activation>{_GIB}) GiB for peak activation, (?P<non_torch>{_GIB}) GiB for non-torch memory, "
        rf"(?P<graph>{_GIB}) GiB for NPU graph memory\. Replace gpu_memory_utilization with "
        rf"`--kv-cache-memory=-?\d{{1,16}}` \({_GIB} GiB\) to fit into requested memory, or "
        rf"`--kv-cache-memory=-?\d{{1,16}}` \({_GIB} GiB\) to fully utilize NPU free memory\. "
        rf"Current KV cache memory: (?P<kv>{_GIB}) GiB\."
    ),
}


class LogError(ValueError):
    """A container's startup lines cannot be read as vLLM-Ascend writes them; the message names the
    container and quotes the line, short and escaped."""


@dataclass(frozen=True)
class Line:
    """One startup line, read whole: which process wrote it, when, and the figures it gives."""

    date: str
    """Docker's time of the line, to the second, UTC: `2026-12-05T10:11:12Z`."""
    pid: int | None
    """The vLLM process that wrote it; None when its output is not prefixed (one process)."""
    kind: str
    """load, weights, available, tokens, graph or summary."""
    text: str
    """The line as vLLM wrote it, after docker's timestamp."""
    figures: dict[str, Decimal | int | str]


def _figures(kind: str, found: re.Match[str]) -> dict[str, Decimal | int | str]:
    values = {k: v for k, v in found.groupdict().items() if v is not None}
    if kind == "load":
        return {"model": values["model"]}
    if kind == "tokens":
        return {"tokens": int(values["tokens"].replace(",", ""))}
    return {k: Decimal(v) for k, v in values.items()}


def _shown(line: str) -> str:
    """The line, escaped, for a message: whole when short, else its start (the process) and its end
    (where a cut line stops), after docker's time."""
    text = line.split(" ", 1)[1] if _STAMP.match(line) else line
    return excerpt(text, SHOWN) if len(text) <= SHOWN else f"{excerpt(text[:60], 60)} ... {excerpt(text[-80:], 80)}"


def _refused(container: str, number: int, line: str, why: str) -> LogError:
    return LogError(f"container {container}: startup line {number} {why}, so it is not read as a measurement: {_shown(line)}")


def read_line(line: str, container: str, number: int) -> Line | None:
    """The line's figures; None for a line with none of the `MARKERS`; LogError for one that has a
    marker but is not, whole, the line vLLM-Ascend writes."""
    if not any(marker in line for marker in MARKERS):
        return None
    if len(line) > MAX_LINE:
        raise _refused(container, number, line, f"is longer than {MAX_LINE} characters")
    envelope = _ENVELOPE.fullmatch(line)
    if envelope is not None:
        for kind, pattern in _MESSAGES.items():
            found = pattern.fullmatch(envelope["message"])
            if found is not None:
                pid = envelope["pid"]
                date = envelope["date"] + "Z"
                return Line(date, None if pid is None else int(pid), kind, envelope["text"], _figures(kind, found))
    raise _refused(container, number, line, "is not one vLLM-Ascend v0.20.2rc1 writes (forged, or cut short)")


def read_lines(text: str, container: str) -> list[Line]:
    """Every startup line of a container's log (as `docker logs --timestamps` prints it); LogError
    for too many lines or for one line that is not whole."""
    lines = [line for line in text.split("\n") if line.strip()]
    if len(lines) > MAX_LINES:  # the host keeps only lines with a marker: each one counts
        raise LogError(f"container {container}: more than {MAX_LINES} startup lines since its start; none is read")
    found = [read_line(line.rstrip("\r"), container, n) for n, line in enumerate(lines, start=1)]
    return [line for line in found if line is not None]


@dataclass(frozen=True)
class Startup:
    """What one server's processes logged at its last start, over its ranks: the largest weights,
    overhead and graph pool of any rank (the card that fills first), the smallest KV cache."""

    model: str
    date: str
    """The time of its last figure line."""
    line: str | None
    """The line its figures were read from: the summary of the rank with the largest graph pool, else
    the capture line, else a weights line; None when it logged none of them."""
    weights: Decimal | None
    graph: Decimal | None
    kv: Decimal | None
    overhead: Decimal | None
    """Peak activation plus non-torch memory: what `runtimeOverheadGiB` stands for."""
    fraction: Decimal | None
    """The `--gpu-memory-utilization` it ran with, as the summary prints it."""
    tokens: int | None


def _values(lines: list[Line], kind: str, key: str) -> list:
    return [line.figures[key] for line in lines if line.kind == kind]


def _graph(line: Line) -> Decimal:
    return Decimal(line.figures["graph"])


def _startup(model: str, lines: list[Line]) -> Startup:
    summaries = [line for line in lines if line.kind == "summary"]
    pools = [line for line in lines if line.kind in ("summary", "graph")]
    weights = _values(lines, "weights", "weights") or _values(lines, "summary", "weights")
    kv = _values(lines, "summary", "kv") or _values(lines, "available", "kv")
    overheads = [max(s.figures["activation"] + s.figures["non_torch"], Decimal(0)) for s in summaries]
    tokens = _values(lines, "tokens", "tokens")
    loads = [line for line in lines if line.kind == "weights"]
    source = max(summaries, key=_graph) if summaries else max(pools, key=_graph) if pools else loads[-1] if loads else None
    return Startup(
        model=model,
        date=max(line.date for line in lines),
        line=source.text if source is not None else None,
        weights=max(weights) if weights else None,
        graph=max(max(map(_graph, pools)), Decimal(0)) if pools else None,
        kv=min(kv) if kv else None,
        overhead=max(overheads) if overheads else None,
        fraction=summaries[0].figures["fraction"] if summaries else None,
        tokens=tokens[-1] if tokens else None,
    )


def startups(lines: list[Line], models: list[str]) -> dict[str, Startup]:
    """What each model's server logged, for a container whose servers each serve one of `models`.

    A process is a model's when it logged `Starting to load model M...` for that model alone (a
    worker, or the engine core of a single-card server, which loads in its own process). A line of
    a process that named no model (the engine core of a tensor-parallel server), or without a
    process, is the model's only when the container serves that one model; in a container of
    several servers it is left out."""
    named: dict[int | None, set[str]] = {}
    for line in lines:
        if line.kind == "load":
            named.setdefault(line.pid, set()).add(str(line.figures["model"]))
    only = models[0] if len(models) == 1 else None
    found: dict[str, list[Line]] = {}
    for line in lines:
        owners = named.get(line.pid)
        model = only if owners is None else next(iter(owners)) if len(owners) == 1 else None
        if line.kind != "load" and model in models:
            found.setdefault(model, []).append(line)
    return {model: _startup(model, found[model]) for model in models if model in found}
