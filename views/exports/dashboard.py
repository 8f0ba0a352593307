"""The Grafana dashboard of a stack, built with Grafana's own SDK (grafana-foundation-sdk).

One row per replicated service (or service), showing each replica's queue, KV cache use
and latency next to the HBM and utilisation of its cards, which the recording rules of
`views.exports.prometheus` join to services. Queries filter on the plan's labels (`stack`,
`replica_of`), chosen with the dashboard's variables.
"""

from __future__ import annotations

import hashlib
import re

from grafana_foundation_sdk.builders import dashboard, prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import units
from grafana_foundation_sdk.models.dashboard import DataSourceRef

from records.deployment import Deployment
from views.exports.metric_names import ROUTER, VLLM
from views.exports.prometheus import HBM_USED, NPU_UTILIZATION

UID_LENGTH = 40
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "$__rate_interval"


def _query(expr: str, legend: str, ref: str = "A") -> prometheus.Dataquery:
    return prometheus.Dataquery().datasource(DATASOURCE).expr(expr).legend_format(legend).ref_id(ref)


def _panel(panel_id: int, title: str, unit: str, *queries: prometheus.Dataquery) -> timeseries.Panel:
    panel = timeseries.Panel().id(panel_id).title(title).datasource(DATASOURCE).unit(unit).span(8).height(8)
    for q in queries:
        panel = panel.with_target(q)
    return panel


def _service_panels(first_id: int, stack: str, service: str) -> list[timeseries.Panel]:
    """The panels of one service's row: its replicas, then its cards."""
    sel = f'stack="{stack}", replica_of="{service}"'

    def p95(metric: str) -> str:
        return f"histogram_quantile(0.95, sum by (le, service) (rate({metric}_bucket{{{sel}}}[{RATE}])))"

    return [
        _panel(first_id, "Requests running and waiting", units.Short,
               _query(f"sum by (service) ({VLLM.running}{{{sel}}})", "{{service}} running"),
               _query(f"sum by (service) ({VLLM.waiting}{{{sel}}})", "{{service}} waiting", "B")),
        _panel(first_id + 1, "KV cache in use", units.PercentUnit,
               _query(f"max by (service) ({VLLM.kv_cache_usage}{{{sel}}})", "{{service}}")),
        _panel(first_id + 2, "Latency p95", units.Seconds,
               _query(p95(VLLM.ttft), "{{service}} first token"),
               _query(p95(VLLM.e2e), "{{service}} request", "B")),
        _panel(first_id + 3, "Generated tokens", "tokens/s",
               _query(f"sum by (service) (rate({VLLM.generation_tokens}{{{sel}}}[{RATE}]))", "{{service}}")),
        _panel(first_id + 4, "HBM of its cards", units.PercentUnit,
               _query(f"{HBM_USED}{{{sel}}}", "{{service}} {{host}} card {{card}}")),
        _panel(first_id + 5, "Utilisation of its cards", units.Percent,
               _query(f"{NPU_UTILIZATION}{{{sel}}}", "{{service}} {{host}} card {{card}}")),
    ]  # fmt: skip


def uid(stack: str) -> str:
    """The dashboard's uid: Grafana allows at most 40 of `A-Za-z0-9-_`. `ascend-fleet-<stack>` when
    that fits (the uid of existing dashboards does not change), else a readable prefix of the name
    and a hash of all of it, so `...-blue` and `...-green` stay two dashboards."""
    plain = f"ascend-fleet-{stack}"
    if len(plain) <= UID_LENGTH and re.fullmatch(r"[A-Za-z0-9_-]+", plain):
        return plain
    digest = hashlib.sha256(stack.encode("utf-8")).hexdigest()[:10]
    prefix = re.sub(r"[^A-Za-z0-9_-]", "-", stack)[: UID_LENGTH - len("ascend-fleet--") - len(digest)]
    return f"ascend-fleet-{prefix}-{digest}"


def build(deployment: Deployment) -> dashboard.Dashboard:
    stack = deployment.stack
    services = sorted({ps.replica_of for _, ps in deployment.plan.services()})
    board = (
        dashboard.Dashboard(f"ascend-fleet {stack}")
        .uid(uid(stack))
        .tags(["ascend-fleet", "vllm", "generated"])
        .time("now-6h", "now")
        .refresh("30s")
        .with_variable(dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus"))
    )
    panel_id = 1
    for service in services:
        board = board.with_row(dashboard.Row(service).id(panel_id))
        for panel in _service_panels(panel_id + 1, stack, service):
            board = board.with_panel(panel)
        panel_id += 7
    if deployment.routers:
        board = board.with_row(dashboard.Row("Routers").id(panel_id))
        sel = f'stack="{stack}"'
        board = board.with_panel(
            _panel(panel_id + 1, "Workers the router sees as healthy", units.Short,
                   _query(f"{ROUTER.worker_healthy}{{{sel}}}", "{{replica_of}} {{worker}}"))
        ).with_panel(
            _panel(panel_id + 2, "Requests sent to each replica", units.RequestsPerSecond,
                   _query(f"sum by (replica_of, worker) (rate({ROUTER.processed}{{{sel}}}[{RATE}]))",
                          "{{replica_of}} {{worker}}"))
        )  # fmt: skip
    return board


def render(deployment: Deployment) -> str:
    return JSONEncoder(sort_keys=True, indent=2).encode(build(deployment).build()) + "\n"

