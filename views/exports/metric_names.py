"""The metric names the rules and the dashboard query, as the real exporters name them.

Each name is read from its exporter's source (cited per group), as exposed on `/metrics`:
prometheus_client adds `_total` to counters and `_bucket`/`_sum`/`_count` to histograms.
The dashboard test checks every query against `KNOWN`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class _Vllm:
    """vLLM 0.20.2 (vllm/v1/metrics/loggers.py, PrometheusStatLogger: running :452, waiting :462,
    kv_cache_usage_perc :520, preemptions :620, prompt/generation tokens :629/:663, TTFT :755,
    inter-token :788, e2e :871); labels `model_name` (the served name) and `engine`. vLLM 0.12
    removed `vllm:gpu_cache_usage_perc` (vllm PR 29330) and hides `time_per_output_token_seconds`.
    vllm-ascend adds no metrics of its own."""

    running: str = "vllm:num_requests_running"
    waiting: str = "vllm:num_requests_waiting"
    kv_cache_usage: str = "vllm:kv_cache_usage_perc"
    ttft: str = "vllm:time_to_first_token_seconds"
    """Histogram: query `_bucket`."""
    e2e: str = "vllm:e2e_request_latency_seconds"
    """Histogram: query `_bucket`."""
    inter_token: str = "vllm:inter_token_latency_seconds"
    """Histogram: query `_bucket`."""
    prompt_tokens: str = "vllm:prompt_tokens_total"
    generation_tokens: str = "vllm:generation_tokens_total"
    preemptions: str = "vllm:num_preemptions_total"


@dataclass(frozen=True)
class _Npu:
    """MindCluster NPU Exporter v26.1.0 (Ascend/mind-cluster, default port 8082, `main.go:84`); the
    card is label `id` (collector_for_npu.go, collector_for_hbm.go, collector_for_utilization.go).
    HBM refreshes every 60 s, health every 5 s."""

    hbm_used: str = "npu_chip_info_hbm_used_memory"
    """MB."""
    hbm_total: str = "npu_chip_info_hbm_total_memory"
    """MB."""
    utilization: str = "npu_chip_info_utilization"
    """AI core utilisation, percent."""
    health: str = "npu_chip_info_health_status"
    """1 healthy, 0 unhealthy, -1 unknown."""
    healthy: int = 1
    card_label: str = "id"


@dataclass(frozen=True)
class _Router:
    """vllm-router's Prometheus exporter (`--prometheus-port`, a listener of its own; src/metrics.rs)."""

    worker_healthy: str = "vllm_router_worker_health"
    """1 healthy, 0 unhealthy; label `worker` (its URL; metrics.rs:68, :642)."""
    processed: str = "vllm_router_processed_requests_total"
    """Requests sent to each worker; label `worker` (metrics.rs:73)."""


VLLM = _Vllm()
NPU = _Npu()
ROUTER = _Router()
HISTOGRAMS = frozenset({VLLM.ttft, VLLM.e2e, VLLM.inter_token})
KNOWN = frozenset(
    getattr(group, f.name)
    for group in (VLLM, NPU, ROUTER)
    for f in fields(group)
    if isinstance(getattr(group, f.name), str) and f.name != "card_label"
) | frozenset(f"{h}_{suffix}" for h in HISTOGRAMS for suffix in ("bucket", "sum", "count"))
