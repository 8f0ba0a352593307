"""The reader of vLLM-Ascend's startup lines: each line exactly as v0.20.2rc1 writes it is read to the
figure; every line that carries a startup phrase but is not, whole, such a line is refused with the
container and the line, short and escaped; a server's lines are told from its neighbour's by process."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ops.startup_log import MARKERS, MAX_LINE, MAX_LINES, LogError, read_line, read_lines, startups
from tests.support.startup_lines import GIB, STAMP, format_gib, logged, server_log, summary

SUMMARY = logged(
    summary(weights=13_893_632_000, activation=1 << 29, non_torch=1 << 28, graph=336_592_896, kv=37_447_000_000),
    "worker.py:546", "Worker_TP0", 312,
)  # fmt: skip


def test_each_startup_line_as_vllm_ascend_writes_it_is_read_to_its_figure():
    lines = {
        "load": logged("Starting to load model /disk2/Qwen3.6-27B-w8a8...", "model_runner_v1.py:3374", "Worker_TP1", 313),
        "weights": logged("Loading model weights took 12.9395 GB", "model_runner_v1.py:3421", "Worker_TP1", 313),
        "available": logged("Available KV cache memory: 34.88 GiB", "worker.py:394", "Worker_TP0", 312),
        "tokens": logged("GPU KV cache size: 1,841,250 tokens", "kv_cache_utils.py:1708", "EngineCore", 300),
        "graph": logged("Graph capturing finished in 41 secs, took 0.31 GiB", "gpu_model_runner.py:6133", "Worker_TP0", 312),
    }
    read = {kind: read_line(line, "qwen-vl", 1) for kind, line in lines.items()}
    assert {k: (r.kind, r.pid, r.figures) for k, r in read.items()} == {
        "load": ("load", 313, {"model": "/disk2/Qwen3.6-27B-w8a8"}),
        "weights": ("weights", 313, {"weights": Decimal("12.9395")}),
        "available": ("available", 312, {"kv": Decimal("34.88")}),
        "tokens": ("tokens", 300, {"tokens": 1_841_250}),
        "graph": ("graph", 312, {"graph": Decimal("0.31")}),
    }
    assert read["load"].date == "2026-12-05T10:11:12Z"
    assert read["load"].text == lines["load"].split(" ", 1)[1], "the line as vLLM wrote it, without docker's time"


def test_the_summary_line_gives_weights_overhead_graphs_kv_and_the_fraction():
    line = read_line(SUMMARY, "qwen-vl", 1)
    assert line.kind == "summary" and line.pid == 312
    assert line.figures == {
        "fraction": Decimal("0.85"), "weights": Decimal("12.94"), "activation": Decimal("0.5"),
        "non_torch": Decimal("0.25"), "graph": Decimal("0.31"), "kv": Decimal("34.88"),
    }  # fmt: skip


def test_a_line_without_a_process_prefix_and_any_other_line_of_the_log():
    single = logged("Loading model weights took 1.0600 GB", "model_runner_v1.py:3421")
    assert read_line(single, "bge", 1).pid is None
    assert read_line(f"{STAMP} INFO 12-05 10:11:12 [api_server.py:1] Starting vLLM API server", "bge", 1) is None


HOSTILE = {
    "an exponent": SUMMARY.replace("0.31 GiB for NPU", "1e999 GiB for NPU"),
    "NaN": logged("Graph capturing finished in 41 secs, took NaN GiB", "gpu_model_runner.py:6133", "Worker_TP0", 1),
    "hexadecimal": logged("Loading model weights took 0x1F GB", "model_runner_v1.py:3421"),
    "cut short": SUMMARY[: SUMMARY.index("Replace") + 30],
    "cut before the period": SUMMARY[:-1],
    "a prompt that quotes it": logged("Received request: 'say 0.2 GiB for NPU graph memory'", "logger.py:1"),
    "a warning, not the info line": SUMMARY.replace(" INFO ", " WARNING "),
    "ANSI colour": SUMMARY.replace("(Worker_TP0", "\x1b[36m(Worker_TP0"),
    "a control character": logged("Loading model weights took 1.0000 GB\x00", "model_runner_v1.py:3421"),
    "a second figure appended": logged("Available KV cache memory: 34.88 GiB 99.00 GiB", "worker.py:394"),
    "no docker time": SUMMARY.split(" ", 1)[1],
    "a docker time the process printed": f"{STAMP} {SUMMARY}",
    "thousands without commas": logged("GPU KV cache size: 1841250000000000 tokens", "kv_cache_utils.py:1708"),
}


@pytest.mark.parametrize("line", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_or_cut_line_is_refused_in_one_paragraph_naming_the_container_and_the_line(line):
    with pytest.raises(LogError) as refused:
        read_lines(f"{logged('Starting to load model /m...', 'model_runner_v1.py:3374')}\n{line}\n", "model-emb-vl")
    message = str(refused.value)
    assert message.startswith("container model-emb-vl: startup line 2 ") and "not read as a measurement" in message
    assert "\n" not in message and "\x1b" not in message and "\x00" not in message and len(message) < 400


def test_a_line_longer_than_the_bound_and_more_lines_than_the_bound_are_refused():
    with pytest.raises(LogError, match=f"longer than {MAX_LINE} characters"):
        read_lines(logged("Starting to load model /" + "m" * MAX_LINE + "...", "model_runner_v1.py:3374"), "c")
    many = "\n".join([logged("Loading model weights took 1.0000 GB", "model_runner_v1.py:3421")] * (MAX_LINES + 1))
    with pytest.raises(LogError, match=f"more than {MAX_LINES} startup lines"):
        read_lines(many, "c")


FIGURE = st.integers(min_value=0, max_value=200 * GIB)


@given(weights=FIGURE, activation=FIGURE, non_torch=FIGURE, graph=FIGURE, kv=FIGURE,
       fraction=st.floats(min_value=1e-6, max_value=1.0))  # fmt: skip
def test_any_summary_vllm_ascend_formats_is_read_back_to_the_figures_it_printed(
    weights, activation, non_torch, graph, kv, fraction
):
    text = summary(fraction=fraction, weights=weights, activation=activation, non_torch=non_torch, graph=graph, kv=kv)
    line = read_line(logged(text, "worker.py:546", "Worker_TP3", 7), "c", 1)
    printed = {"weights": weights, "activation": activation, "non_torch": non_torch, "graph": graph, "kv": kv}
    assert line.figures == {"fraction": Decimal(str(fraction))} | {k: Decimal(format_gib(v)) for k, v in printed.items()}


@given(cut=st.integers(min_value=1, max_value=len(SUMMARY) - 1))
def test_every_cut_of_the_summary_that_keeps_a_startup_phrase_is_refused(cut):
    line = SUMMARY[:cut]
    if any(marker in line for marker in MARKERS):
        with pytest.raises(LogError, match="cut short"):
            read_line(line, "c", 1)
    else:
        assert read_line(line, "c", 1) is None


@given(text=st.text(max_size=300), marker=st.sampled_from(MARKERS))
def test_any_text_around_a_startup_phrase_is_read_or_refused_never_a_crash(text, marker):
    line = f"{STAMP} INFO 12-05 10:11:12 [worker.py:1] {text}{marker}{text}"
    try:
        read_line(line, "c", 1)
    except LogError as exc:
        assert str(exc).startswith("container c: startup line 1 ")


def test_two_servers_in_one_container_are_told_apart_by_their_processes():
    """The seed's model-emb-vl: bge-m3 on one card (its worker runs in its engine core), qwen-vl on
    four (a worker per rank, an engine core of its own that names no model)."""
    bge = server_log("/disk2/bge-m3", [("EngineCore", 50)], 50, weights=2 * GIB, graph=GIB // 5, kv=4 * GIB, tokens=9)
    ranks = [(f"Worker_TP{r}", 70 + r) for r in range(4)]
    qwen = server_log("/disk2/qwen", ranks, 60, weights=13 * GIB, graph=GIB // 3, kv=30 * GIB, tokens=7)
    qwen[-1] = qwen[-1].replace(f"{format_gib(GIB // 3)} GiB for NPU graph", "0.5 GiB for NPU graph")  # rank 3's pool
    qwen[-2] = qwen[-2].replace("Current KV cache memory: 30.0 GiB.", "Current KV cache memory: 29.5 GiB.")  # rank 2's
    qwen[-3] = qwen[-3].replace("0.5 GiB for peak activation", "0.75 GiB for peak activation")  # rank 1's
    qwen[5] = qwen[5].replace("took 13.0000 GB", "took 13.2500 GB")  # rank 1 loads more (its own weights line)
    read = startups(read_lines("\n".join(sorted(bge + qwen)), "model-emb-vl"), ["/disk2/bge-m3", "/disk2/qwen"])
    assert (read["/disk2/bge-m3"].weights, read["/disk2/bge-m3"].graph, read["/disk2/bge-m3"].tokens) == (
        Decimal("2.0000"), Decimal("0.2"), 9)
    q = read["/disk2/qwen"]
    assert (q.weights, q.graph, q.kv, q.overhead, q.fraction) == (
        Decimal("13.2500"), Decimal("0.5"), Decimal("29.5"), Decimal("1.00"), Decimal("0.85"))
    assert q.tokens is None, "its engine core names no model, and the container serves two"
    assert q.line is not None and q.line.startswith("(Worker_TP3 pid=73) ") and "0.5 GiB for NPU graph memory" in q.line


def test_in_a_container_of_one_server_every_process_is_its_own():
    ranks = [(f"Worker_TP{r}", 70 + r) for r in range(2)]
    lines = server_log("/disk2/qwen", ranks, 60, weights=13 * GIB, graph=GIB // 3, kv=30 * GIB, tokens=1_841_250)
    read = startups(read_lines("\n".join(lines), "model-text"), ["/disk2/qwen"])
    assert read["/disk2/qwen"].tokens == 1_841_250 and read["/disk2/qwen"].date == "2026-12-05T10:11:12Z"
