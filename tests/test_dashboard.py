"""The Grafana dashboard `render --format prometheus` writes, checked offline.

It parses, its panel ids are unique, and every metric a query names is one the exporters
really export (views.exports.metric_names) or one our rules record (views.exports.prometheus).
"""

from __future__ import annotations

import json
import re

from cli.main import DASHBOARD
from cli.stackfile import load_fleet
from views.exports import dashboard
from views.exports.metric_names import KNOWN
from views.exports.prometheus import HBM_USED, NPU_UTILIZATION
from tests.support.pipeline import deployment_of

RECORDED = {HBM_USED, NPU_UTILIZATION}
# PromQL words that look like metric names: functions, aggregations, keywords, Grafana's variables.
PROMQL = {
    "sum", "max", "min", "avg", "count", "rate", "irate", "increase", "histogram_quantile", "by", "without",
    "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "label_replace", "deriv",
}  # fmt: skip


def _panels(board: dict) -> list[dict]:
    out = []
    for p in board["panels"]:
        out.append(p)
        out += p.get("panels", [])
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names of a PromQL expression: strings, label matchers, label lists, durations and
    Grafana variables removed; what is left that is not a PromQL word is a metric."""
    expr = re.sub(r'"[^"]*"', "", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    words = re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr)
    return {w for w in words if w not in PROMQL}


def staging_board() -> dict:
    return json.loads(dashboard.render(deployment_of(load_fleet("staging")[0])))


def test_the_metric_name_reader_finds_names_and_only_names():
    expr = 'histogram_quantile(0.95, sum by (le, service) (rate(vllm:e2e_request_latency_seconds_bucket{stack="s"}[5m])))'
    assert metric_names(expr) == {"vllm:e2e_request_latency_seconds_bucket"}
    assert metric_names("vllm:gpu_cache_usage_perc > 0.9") == {"vllm:gpu_cache_usage_perc"}


def test_the_dashboard_parses_and_its_panel_ids_are_unique():
    board = staging_board()
    ids = [p["id"] for p in _panels(board)]
    assert len(ids) == len(set(ids)), ids
    assert board["uid"] == "ascend-fleet-staging"
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource"]


def test_every_query_names_only_metrics_the_exporters_or_our_rules_produce():
    queries = [t["expr"] for p in _panels(staging_board()) for t in p.get("targets", [])]
    assert queries
    unknown = {name for q in queries for name in metric_names(q)} - KNOWN - RECORDED
    assert unknown == set()


def test_each_service_has_a_row_with_its_replicas_and_its_cards():
    board = staging_board()
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == ["bge-m3", "qwen-72b", "qwen-long", "qwen-vl", "Routers"]
    bge = [t["expr"] for p in _panels(board) for t in p.get("targets", []) if 'replica_of="bge-m3"' in t["expr"]]
    assert any("vllm:num_requests_waiting" in q for q in bge)
    assert any("vllm:kv_cache_usage_perc" in q for q in bge)
    assert any(HBM_USED in q for q in bge)


def test_render_writes_the_dashboard_beside_the_prometheus_files(tmp_path, cli):
    result = cli("render", "--stack", "staging", "--format", "prometheus", "--output", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / DASHBOARD).read_text())["title"] == "ascend-fleet staging"


def test_long_stack_names_that_differ_only_at_the_end_get_different_grafana_uids():
    from views.exports.dashboard import uid

    blue, green = uid("production-eu-west-inference-fleet-blue"), uid("production-eu-west-inference-fleet-green")
    assert blue != green and blue.startswith("ascend-fleet-production-eu")
    for name in (blue, green, uid("prod.eu.v2"), uid("a" * 100)):
        assert len(name) <= 40 and re.fullmatch(r"[A-Za-z0-9_-]+", name), name
    assert "." not in uid("prod.eu.v2") and uid("prod.eu.v2") != uid("prod-eu-v2")
