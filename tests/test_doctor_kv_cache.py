"""`doctor` and `kvCacheGiB`: the KV cache a service logged at start (vllm-ascend@v0.20.2rc1
`worker/worker.py` l. 341-354: "Initial free memory X GiB, reserved Y GiB for KV Cache as specified by
kv_cache_memory_bytes, ...") against the plan's `--kv-cache-memory-bytes` (ops/doctor/kv_log.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ops.doctor.facts import HostFacts, parse_facts
from ops.doctor.findings import host_findings, required
from ops.doctor.gather import gather_script
from tests.conftest import live_container
from tests.support.pipeline import deployment_of
from tests.support.profiles import SMALL_QWEN3_PROFILE as PROFILE

TAIL = (
    "skipping memory profiling. This does not respect the gpu_memory_utilization config. Only use "
    "kv_cache_memory_bytes when you want manual control of KV cache memory size. If OOM'ed, check the difference "
    "of initial free memory between the current run and the previous run where kv_cache_memory_bytes is suggested "
    "and update it correspondingly."
)


def ascend_line(reserved: str) -> str:
    """The line vLLM-Ascend's worker logs, word for word, as its INFO record."""
    return f"INFO 05-12 10:00:00 [worker.py:342] Initial free memory 60.96 GiB, reserved {reserved} GiB for KV Cache as specified by kv_cache_memory_bytes, {TAIL}"


@pytest.fixture(scope="module")
def host():
    values = {
        "hosts": [{"name": "npu-a", "address": "192.0.2.10"}],
        "services": [
            {"name": "alpha", "model": "/m/alpha", "devices": [0], "maxModelLen": 32768, "profile": PROFILE, "kvCacheGiB": 20},
            {"name": "beta", "model": "/m/beta", "devices": [1], "memoryFraction": 0.5},
        ],
    }  # fmt: skip
    (hd,) = deployment_of(values, "t").hosts
    return hd


def kv_findings(hd, logs: dict[str, str], status: str = "running"):
    containers = tuple(live_container(sd.spec, status if sd.name == "alpha" else "running") for sd in hd.services)
    return [f for f in host_findings(hd, HostFacts(containers=containers, kv_logs=logs)) if f.kind == "kv-cache"]


def test_a_logged_size_that_is_the_plans_is_no_finding_in_either_wording(host):
    assert kv_findings(host, {"alpha": ascend_line("20.00")}) == []
    vllm = "Initial free memory 60.96 GiB, reserved 20.0 GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling."
    assert kv_findings(host, {"alpha": vllm}) == []


def test_a_logged_size_other_than_the_plans_is_a_kv_cache_finding_with_both_figures(host):
    [found] = kv_findings(host, {"alpha": ascend_line("12.00")})
    assert (found.service, found.container) == ("alpha", "alpha")
    assert found.message.startswith(
        "container alpha: its log says it reserved 12.00 GiB for its KV cache, the plan fixes 20.00 GiB "
        "(kvCacheGiB, --kv-cache-memory-bytes 21474836480): 'INFO 05-12"
    )


def test_no_line_a_stopped_container_or_a_service_without_kv_cache_gib_is_not_judged(host):
    assert kv_findings(host, {}) == [] and kv_findings(host, {"alpha": ""}) == []
    assert kv_findings(host, {"alpha": ascend_line("12.00")}, status="exited") == []
    assert kv_findings(host, {"beta": ascend_line("12.00")}) == []


def test_the_gather_script_reads_the_last_kv_line_of_each_fixed_cache_containers_log_only(host, tmp_path: Path):
    """Run for real with a `docker` that prints an old start's line, noise and the latest start's line."""
    fake = tmp_path / "docker"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        "  ps) exit 0 ;;\n"
        "  logs) [ \"$2\" = alpha ] || exit 1\n"
        f"        printf '%s\\n' {repr(ascend_line('8.00'))} 'INFO Loading model weights' {repr(ascend_line('20.00'))} 'INFO ok' ;;\n"
        "esac\n"
    )
    fake.chmod(0o755)
    alpha = [sd.spec.name for sd in host.services if sd.plan.kv_cache_bytes is not None]
    assert alpha == ["alpha"]
    script = gather_script(required(host), kv_logs=alpha)
    assert "docker logs beta" not in script
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    out = subprocess.run(["sh", "-s"], input=script, env=env, capture_output=True, text=True, timeout=60).stdout
    assert parse_facts(out).kv_logs == {"alpha": ascend_line("20.00")}
