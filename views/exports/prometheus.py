"""Prometheus files from the plan: scrape targets with the plan's labels, the config, the rules.

`render --format prometheus --output DIR` writes them. Every vLLM container (a service's, a
replica's, a prefill or decode instance's), router and host NPU exporter becomes a `file_sd_configs`
target labelled `stack`, `service`, `replica_of`, `host` and `cards`, so a query or an alert names
what the plan names. A recording rule per planned card maps a host's card to the service on it, which
joins NPU metrics to services. A disaggregated service's proxy is no target: vllm-ascend@v0.20.2rc1's
`examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py` serves `/v1/completions`,
`/v1/chat/completions`, `/healthcheck` and `/instances/add|remove`, no `/metrics`. Pure: the files are
returned as text.
"""

from __future__ import annotations

import io
import json
from typing import Any

from ruamel.yaml import YAML

from allocation.plan import ServicePlan
from records.deployment import Deployment, HostDeployment
from views.exports.metric_names import NPU, ROUTER, VLLM

VLLM_TARGETS = "targets-vllm.json"
ROUTER_TARGETS = "targets-router.json"
NPU_TARGETS = "targets-npu-exporter.json"
CONFIG = "prometheus.yml"
RULES = "rules.yml"
JOBS = {"vllm": VLLM_TARGETS, "vllm-router": ROUTER_TARGETS, "npu-exporter": NPU_TARGETS}
CARD_SERVICE = "ascend_fleet:card_service:info"
"""Recorded per planned card: 1, labelled `host`, `card`, `service`, `replica_of`."""
HBM_USED = "ascend_fleet:npu_hbm_used:ratio"
"""Each card's HBM in use, 0..1, labelled with the services on it."""
NPU_UTILIZATION = "ascend_fleet:npu_utilization:percent"
"""Each card's AI core utilisation, labelled with the services on it."""


def _target(address: str, port: int, labels: dict[str, str]) -> dict[str, Any]:
    """One file_sd entry; `address` as it goes into a URL (`Host.url_address`)."""
    return {"targets": [f"{address}:{port}"], "labels": labels}


def _scrapes_exporter(deployment: Deployment, hd: HostDeployment) -> bool:
    """With `metrics.npuExporter` set, exactly the hosts the fleet deploys an exporter on. Without it,
    every host with services or prefill and decode instances, as before: the operator may run an exporter
    of their own there."""
    if deployment.plan.fleet.metrics.npu_exporter is not None:
        return hd.exporter is not None
    return bool(hd.services or hd.instances)


def _served(hd: HostDeployment) -> tuple[ServicePlan, ...]:
    """The plans of the host's vLLM containers that serve their own /metrics on their API port: its services'
    and replicas', then its prefill and decode instances' (`replica_of` their disaggregated service)."""
    return tuple(c.plan for c in (*hd.services, *hd.instances))


def targets(deployment: Deployment) -> dict[str, list[dict[str, Any]]]:
    """The three target files' contents, by file name."""
    stack = deployment.stack
    vllm, routers, npus = [], [], []
    for hd in deployment.hosts:
        address = hd.host.url_address()
        for ps in _served(hd):
            labels = {
                "stack": stack,
                "service": ps.name,
                "replica_of": ps.replica_of,
                "host": hd.name,
                "cards": ",".join(map(str, ps.assignment.cards)),
            }
            vllm.append(_target(address, ps.assignment.api_port, labels))
        for rd in hd.routers:
            labels = {"stack": stack, "service": rd.name, "replica_of": rd.plan.service.name, "host": hd.name, "cards": ""}
            routers.append(_target(address, rd.plan.metrics_port, labels))
        if _scrapes_exporter(deployment, hd):
            cards = ",".join(str(c) for c in range(hd.host.npus))
            labels = {"stack": stack, "service": "npu-exporter", "replica_of": "", "host": hd.name, "cards": cards}
            npus.append(_target(address, deployment.plan.fleet.metrics.npu_exporter_port, labels))
    return {VLLM_TARGETS: vllm, ROUTER_TARGETS: routers, NPU_TARGETS: npus}


def config(deployment: Deployment) -> dict[str, Any]:
    interval = f"{deployment.plan.fleet.metrics.scrape_interval_seconds}s"
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [RULES],
        "scrape_configs": [
            {"job_name": job, "metrics_path": "/metrics", "file_sd_configs": [{"files": [name]}]}
            for job, name in JOBS.items()
        ],
    }


def _card_rules(deployment: Deployment) -> list[dict[str, Any]]:
    rules = []
    for hd in deployment.hosts:
        for ps in _served(hd):
            for card in ps.assignment.cards:
                labels = {"stack": deployment.stack, "host": hd.name, "card": str(card), "service": ps.name}
                labels["replica_of"] = ps.replica_of
                rules.append({"record": CARD_SERVICE, "expr": "vector(1)", "labels": labels})
    return rules


def _by_service(npu_expr: str) -> str:
    """An NPU exporter expression per card, labelled with each service on the card: the card id
    label becomes `card`, then the plan's card rules are joined on host and card."""
    per_card = f'max by (host, card) (label_replace({npu_expr}, "card", "$1", "{NPU.card_label}", "(.*)"))'
    return f"{per_card} * on (host, card) group_right {CARD_SERVICE}"


def _alert(name: str, expr: str, minutes: int, severity: str, summary: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": f"{minutes}m",
        "labels": {"severity": severity},
        "annotations": {"summary": summary},
    }


def rules(deployment: Deployment) -> dict[str, Any]:
    ttft = deployment.plan.fleet.metrics.ttft_p95_seconds
    alerts = [
        _alert("AscendFleetReplicaDown", 'up{job="vllm"} == 0', 2, "warning",
               "{{ $labels.service }} on {{ $labels.host }} (cards {{ $labels.cards }}) does not answer /metrics"),
        _alert("AscendFleetServiceDown", 'max by (stack, replica_of) (up{job="vllm"}) == 0', 1, "critical",
               "no replica of {{ $labels.replica_of }} answers"),
        _alert("AscendFleetKvCacheFull", f"{VLLM.kv_cache_usage} > 0.95", 5, "warning",
               "{{ $labels.service }} uses {{ $value | humanizePercentage }} of its KV cache"),
        _alert("AscendFleetQueueGrowing",
               f"{VLLM.waiting} > 0 and deriv({VLLM.waiting}[10m]) > 0", 10, "warning",
               "{{ $labels.service }} has {{ $value }} requests waiting and the queue keeps growing"),
        _alert("AscendFleetSlowFirstToken",
               f"histogram_quantile(0.95, sum by (le, stack, service, replica_of, host) "
               f"(rate({VLLM.ttft}_bucket[5m]))) > {ttft}", 10, "warning",
               f"{{{{ $labels.service }}}}'s time to first token p95 is {{{{ $value }}}}s (threshold {ttft}s)"),
        _alert("AscendFleetHbmFull", f"{HBM_USED} > 0.95", 5, "warning",
               "card {{ $labels.card }} of {{ $labels.host }} ({{ $labels.service }}) uses {{ $value | humanizePercentage }} of its HBM"),
        _alert("AscendFleetCardUnhealthy", f"{NPU.health} != {NPU.healthy}", 1, "critical",
               "card {{ $labels.id }} of {{ $labels.host }} reports health status {{ $value }}"),
        _alert("AscendFleetRouterWorkerUnhealthy", f"{ROUTER.worker_healthy} == 0", 1, "warning",
               "router {{ $labels.service }} sees worker {{ $labels.worker }} as unhealthy"),
        _alert("AscendFleetRouterDown", 'up{job="vllm-router"} == 0', 2, "critical",
               "router {{ $labels.service }} on {{ $labels.host }} does not answer: {{ $labels.replica_of }}'s endpoint is down"),
    ]  # fmt: skip
    return {
        "groups": [
            {"name": "ascend-fleet-cards", "rules": _card_rules(deployment)},
            {
                "name": "ascend-fleet-joins",
                "rules": [
                    {"record": HBM_USED, "expr": _by_service(f"{NPU.hbm_used} / {NPU.hbm_total}")},
                    {"record": NPU_UTILIZATION, "expr": _by_service(NPU.utilization)},
                ],
            },
            {"name": "ascend-fleet-alerts", "rules": alerts},
        ]
    }


def _yaml(data: Any) -> str:
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.width = 4096
    buffer = io.StringIO()
    yaml.dump(data, buffer)
    return buffer.getvalue()


def files(deployment: Deployment) -> dict[str, str]:
    """Every file `render --format prometheus` writes, by name."""
    out = {name: json.dumps(content, indent=2) + "\n" for name, content in targets(deployment).items()}
    out[CONFIG] = _yaml(config(deployment))
    out[RULES] = _yaml(rules(deployment))
    return out
