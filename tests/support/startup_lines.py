"""vLLM-Ascend v0.20.2rc1's startup lines, formatted as its sources format them (ops/startup_log.py
cites each), for the tests of the log reader and of `calibrate`."""

from __future__ import annotations

GIB = 1 << 30
STAMP = "2026-12-05T10:11:12.123456789Z"


def format_gib(b: int) -> str:
    """vLLM's `format_gib` (vllm/utils/mem_utils.py)."""
    return f"{round(b / GIB, 2)}"


def logged(message: str, where: str, process: str | None = None, pid: int | None = None, stamp: str = STAMP) -> str:
    """One line as `docker logs --timestamps` prints it: docker's time, vLLM's process prefix, the logger's."""
    prefix = "" if process is None else f"({process} pid={pid}) "
    return f"{stamp} {prefix}INFO 12-05 10:11:12 [{where}] {message}"


def summary(
    *, fraction: float = 0.85, total: int = 65452113920, free: int | None = None, weights: int, activation: int,
    non_torch: int, graph: int, kv: int,
) -> str:
    """worker.py l. 528-546's message, from bytes, as its f-string builds it."""
    free = total if free is None else free
    requested = total * fraction
    non_kv = weights + activation + non_torch + graph
    to_requested = int(requested) - non_kv - 150 * (1 << 20)
    to_limit = free - non_kv - 150 * (1 << 20)
    return (
        f"Free memory on device ({format_gib(free)}/{format_gib(total)} GiB) on startup. Desired GPU memory "
        f"utilization is ({fraction}, {format_gib(int(requested))} GiB). Actual usage: {format_gib(weights)} GiB "
        f"for weights, {format_gib(activation)} GiB for peak activation, {format_gib(non_torch)} GiB for non-torch "
        f"memory, {format_gib(graph)} GiB for NPU graph memory. Replace gpu_memory_utilization with "
        f"`--kv-cache-memory={to_requested}` ({format_gib(to_requested)} GiB) to fit into requested memory, or "
        f"`--kv-cache-memory={to_limit}` ({format_gib(to_limit)} GiB) to fully utilize NPU free memory. Current KV "
        f"cache memory: {format_gib(kv)} GiB."
    )  # fmt: skip


def server_log(model: str, ranks: list[tuple[str, int]], engine: int, *, weights: int, graph: int, kv: int,
               fraction: float = 0.85, tokens: int = 468708, stamp: str = STAMP) -> list[str]:  # fmt: skip
    """Every startup line one server writes: `ranks` its (process, pid), `engine` its engine core's pid."""
    first, pid0 = ranks[0]
    lines = [logged(f"Starting to load model {model}...", "model_runner_v1.py:3374", p, n, stamp) for p, n in ranks]
    took = f"Loading model weights took {weights / GIB:.4f} GB"
    lines += [logged(took, "model_runner_v1.py:3421", p, n, stamp) for p, n in ranks]
    lines.append(logged(f"Available KV cache memory: {kv / GIB:.2f} GiB", "worker.py:394", first, pid0, stamp))
    lines.append(logged(f"GPU KV cache size: {tokens:,} tokens", "kv_cache_utils.py:1708", "EngineCore", engine, stamp))
    captured = f"Graph capturing finished in 5 secs, took {graph / GIB:.2f} GiB"
    lines.append(logged(captured, "gpu_model_runner.py:6133", first, pid0, stamp))
    figures = {"weights": weights, "activation": 1 << 29, "non_torch": 1 << 28, "graph": graph, "kv": kv}
    lines += [logged(summary(fraction=fraction, **figures), "worker.py:546", p, n, stamp) for p, n in ranks]
    return lines
