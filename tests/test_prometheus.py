"""`render --format prometheus`: files Prometheus itself accepts, and alerts that fire.

promtool (Debian's `prometheus` package, which `.ci/run` installs) checks the config and the
rules, and `promtool test rules` evaluates each alert on series shaped like the real exporters'
(names and labels in views/exports/metric_names.py, with their sources).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from cli.stackfile import load_fleet
from views.exports import prometheus
from views.exports.metric_names import NPU, ROUTER, VLLM
from tests.conftest import Result, require_binary
from tests.support.disaggregated import example
from tests.support.pipeline import deployment_of



def staging_files(tmp_path: Path, cli) -> Path:
    result: Result = cli("render", "--stack", "staging", "--format", "prometheus", "--output", str(tmp_path))
    assert result.returncode == 0, result.stderr
    return tmp_path


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    path = require_binary("promtool", "prometheus")
    return subprocess.run([path, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_rendered_config_and_rules_pass_promtool(tmp_path, cli):
    out = staging_files(tmp_path, cli)
    checked = promtool("check", "config", "prometheus.yml", cwd=out)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    checked = promtool("check", "rules", "rules.yml", cwd=out)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_every_container_router_and_host_is_a_target_with_the_plans_labels(tmp_path, cli):
    out = staging_files(tmp_path, cli)
    vllm = json.loads((out / prometheus.VLLM_TARGETS).read_text())
    by_service = {t["labels"]["service"]: t for t in vllm}
    assert sorted(by_service) == ["bge-m3-1", "bge-m3-2", "bge-m3-3", "qwen-72b", "qwen-long", "qwen-vl"]
    assert by_service["bge-m3-2"] == {
        "targets": ["192.0.2.22:8000"],
        "labels": {"stack": "staging", "service": "bge-m3-2", "replica_of": "bge-m3", "host": "npu-s2", "cards": "4"},
    }
    assert by_service["qwen-vl"]["labels"]["replica_of"] == "qwen-vl"
    routers = json.loads((out / prometheus.ROUTER_TARGETS).read_text())
    assert routers == [
        {
            "targets": ["192.0.2.21:8002"],
            "labels": {"stack": "staging", "service": "bge-m3-router", "replica_of": "bge-m3", "host": "npu-s1", "cards": ""},
        }
    ]
    npus = json.loads((out / prometheus.NPU_TARGETS).read_text())
    assert [t["targets"] for t in npus] == [["192.0.2.21:8082"], ["192.0.2.22:8082"], ["192.0.2.23:8082"]]
    config = yaml.safe_load((out / prometheus.CONFIG).read_text())
    files = {j["job_name"]: j["file_sd_configs"][0]["files"] for j in config["scrape_configs"]}
    assert files == {"vllm": [prometheus.VLLM_TARGETS], "vllm-router": [prometheus.ROUTER_TARGETS],
                     "npu-exporter": [prometheus.NPU_TARGETS]}  # fmt: skip


def test_the_exporter_port_and_thresholds_come_from_the_stack(tmp_path):
    fleet, _ = load_fleet("staging")
    fleet = fleet.model_copy(update={"metrics": fleet.metrics.model_copy(update={"npu_exporter_port": 9100})})
    files = prometheus.files(deployment_of(fleet))
    assert all(t["targets"][0].endswith(":9100") for t in json.loads(files[prometheus.NPU_TARGETS]))


def test_each_prefill_and_decode_instance_is_a_vllm_target_with_its_cards_and_the_proxy_is_none():
    # vllm-ascend@v0.20.2rc1's example proxy serves /v1/completions, /v1/chat/completions, /healthcheck and
    # /instances/add|remove (load_balance_proxy_server_example.py lines 892-918): no /metrics to scrape.
    deployment = example()
    (target_files, rules) = prometheus.targets(deployment), prometheus.rules(deployment)
    vllm = target_files[prometheus.VLLM_TARGETS]
    assert vllm == [
        {"targets": ["10.20.0.11:8000"], "labels": {"stack": "pd-1p1d", "service": "qwen-pd-decode", "replica_of": "qwen-pd",
                                                    "host": "npu-a", "cards": "4,5,6,7"}},
        {"targets": ["10.20.0.11:8001"], "labels": {"stack": "pd-1p1d", "service": "qwen-pd-prefill", "replica_of": "qwen-pd",
                                                    "host": "npu-a", "cards": "0,1,2,3"}},
    ]  # fmt: skip
    assert all("8002" not in t["targets"][0] for ts in target_files.values() for t in ts)
    cards = [r["labels"] for r in rules["groups"][0]["rules"]]
    assert [(c["card"], c["service"], c["replica_of"]) for c in cards] == [
        *((str(c), "qwen-pd-decode", "qwen-pd") for c in range(4, 8)), *((str(c), "qwen-pd-prefill", "qwen-pd") for c in range(4))]
    # A host with instances only is an NPU exporter target as one with services is (no npuExporter of the fleet's).
    assert [t["targets"] for t in target_files[prometheus.NPU_TARGETS]] == [["10.20.0.11:8082"]]


# One series set per alert; values are promtool's expanding notation (`0x20`: 0 for 21 samples).
S1 = 'stack="staging",host="npu-s1"'
BGE1 = f'{S1},job="vllm",service="bge-m3-1",replica_of="bge-m3",cards="0",instance="192.0.2.21:8000"'
BGE = [
    f'stack="staging",host="npu-s{i}",job="vllm",service="bge-m3-{i}",replica_of="bge-m3",cards="{c}",'
    f'instance="192.0.2.2{i}:8000"'
    for i, c in ((1, "0"), (2, "4"), (3, "0"))
]
NPU_CARD0 = f'{S1},job="npu-exporter",service="npu-exporter",replica_of="",cards="0,1,2,3,4,5,6,7",id="0",model_name="Ascend910B3"'
ROUTER_LABELS = f'{S1},job="vllm-router",service="bge-m3-router",replica_of="bge-m3",cards="",instance="192.0.2.21:8002"'
WORKER = "http://192.0.2.22:8000"


def _labels(text: str) -> dict[str, str]:
    """Series labels as Prometheus keeps them: an empty value is no label."""
    return {k: v for k, v in re.findall(r'(\w+)="([^"]*)"', text) if v}


CASES = {
    "AscendFleetReplicaDown": (
        [(f"up{{{BGE1}}}", "0x30")],
        [{"exp_labels": {"severity": "warning", **_labels(BGE1)},
          "exp_annotations": {"summary": "bge-m3-1 on npu-s1 (cards 0) does not answer /metrics"}}],
    ),
    "AscendFleetServiceDown": (
        [(f"up{{{b}}}", "0x30") for b in BGE],
        [{"exp_labels": {"severity": "critical", "stack": "staging", "replica_of": "bge-m3"},
          "exp_annotations": {"summary": "no replica of bge-m3 answers"}}],
    ),
    "AscendFleetKvCacheFull": (
        [(f'{VLLM.kv_cache_usage}{{{BGE1},engine="0",model_name="bge-m3"}}', "0.97x30")],
        [{"exp_labels": {"severity": "warning", **_labels(BGE1), "engine": "0", "model_name": "bge-m3"},
          "exp_annotations": {"summary": "bge-m3-1 uses 97% of its KV cache"}}],
    ),
    "AscendFleetQueueGrowing": (
        [(f'{VLLM.waiting}{{{BGE1},engine="0",model_name="bge-m3"}}', "0+1x30")],
        [{"exp_labels": {"severity": "warning", **_labels(BGE1), "engine": "0", "model_name": "bge-m3"},
          "exp_annotations": {"summary": "bge-m3-1 has 20 requests waiting and the queue keeps growing"}}],
    ),
    "AscendFleetSlowFirstToken": (
        [(f'{VLLM.ttft}_bucket{{{BGE1},engine="0",model_name="bge-m3",le="{le}"}}', values)
         for le, values in (("1.0", "0x30"), ("20.0", "0+10x30"), ("+Inf", "0+10x30"))],
        [{"exp_labels": {"severity": "warning", **{k: v for k, v in _labels(BGE1).items()
                                                     if k in ("stack", "service", "replica_of", "host")}},
          "exp_annotations": {"summary": "bge-m3-1's time to first token p95 is 19.05s (threshold 10s)"}}],
    ),
    "AscendFleetHbmFull": (
        [(f"{NPU.hbm_used}{{{NPU_CARD0}}}", "62500x30"), (f"{NPU.hbm_total}{{{NPU_CARD0}}}", "65536x30")],
        [{"exp_labels": {"severity": "warning", "stack": "staging", "host": "npu-s1", "card": "0",
                         "service": service, "replica_of": replica_of},
          "exp_annotations": {"summary": f"card 0 of npu-s1 ({service}) uses 95.37% of its HBM"}}
         for service, replica_of in (("bge-m3-1", "bge-m3"), ("qwen-72b", "qwen-72b"))],
    ),
    "AscendFleetCardUnhealthy": (
        [(f"{NPU.health}{{{NPU_CARD0}}}", "0x30")],
        [{"exp_labels": {"severity": "critical", **_labels(NPU_CARD0)},
          "exp_annotations": {"summary": "card 0 of npu-s1 reports health status 0"}}],
    ),
    "AscendFleetRouterWorkerUnhealthy": (
        [(f'{ROUTER.worker_healthy}{{{ROUTER_LABELS},worker="{WORKER}"}}', "0x30")],
        [{"exp_labels": {"severity": "warning", **_labels(ROUTER_LABELS), "worker": WORKER},
          "exp_annotations": {"summary": f"router bge-m3-router sees worker {WORKER} as unhealthy"}}],
    ),
    "AscendFleetRouterDown": (
        [(f"up{{{ROUTER_LABELS}}}", "0x30")],
        [{"exp_labels": {"severity": "critical", **_labels(ROUTER_LABELS)},
          "exp_annotations": {"summary": "router bge-m3-router on npu-s1 does not answer: bge-m3's endpoint is down"}}],
    ),
}  # fmt: skip


def _unit_test(alert: str, series: list[tuple[str, str]], expected: list[dict]) -> dict:
    return {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series],
        "alert_rule_test": [{"eval_time": "20m", "alertname": alert, "exp_alerts": expected}],
    }


def test_every_alert_has_a_case():
    rendered = prometheus.rules(deployment_of(load_fleet("staging")[0]))
    alerts = [r["alert"] for g in rendered["groups"] for r in g["rules"] if "alert" in r]
    assert sorted(alerts) == sorted(CASES)


@pytest.mark.parametrize("alert", sorted(CASES))
def test_each_alert_fires_on_series_that_should_fire_it_and_not_on_healthy_ones(tmp_path, cli, alert):
    out = staging_files(tmp_path, cli)
    series, expected = CASES[alert]
    # The same series at healthy values: 1 for up and health, 0 for everything else.
    healthy = [(s, "1x30" if s.startswith(("up{", NPU.health, ROUTER.worker_healthy)) else "0x30") for s, _ in series]
    tests = {
        "rule_files": [prometheus.RULES],
        "evaluation_interval": "1m",
        "tests": [_unit_test(alert, series, expected), _unit_test(alert, healthy, [])],
    }
    (out / "tests.yml").write_text(yaml.safe_dump(tests))
    result = promtool("test", "rules", "tests.yml", cwd=out)
    assert result.returncode == 0, result.stdout + result.stderr


def test_one_replica_down_is_a_replica_alert_not_a_service_alert(tmp_path, cli):
    out = staging_files(tmp_path, cli)
    series = [(f"up{{{b}}}", "0x30" if i == 0 else "1x30") for i, b in enumerate(BGE)]
    replica_down = CASES["AscendFleetReplicaDown"][1]
    tests = {
        "rule_files": [prometheus.RULES],
        "evaluation_interval": "1m",
        "tests": [_unit_test("AscendFleetServiceDown", series, []), _unit_test("AscendFleetReplicaDown", series, replica_down)],
    }
    (out / "tests.yml").write_text(yaml.safe_dump(tests))
    result = promtool("test", "rules", "tests.yml", cwd=out)
    assert result.returncode == 0, result.stdout + result.stderr


def test_without_an_output_directory_or_with_a_file_there_render_says_so_and_writes_nothing(tmp_path, cli):
    result = cli("render", "--stack", "staging", "--format", "prometheus")
    assert result.returncode == 1 and "give the directory with --output DIR" in result.stderr
    blocker = tmp_path / "file"
    blocker.write_text("keep")
    result = cli("render", "--stack", "staging", "--format", "prometheus", "--output", str(blocker))
    assert result.returncode == 1 and result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert blocker.read_text() == "keep"
