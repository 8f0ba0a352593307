"""`calibrate` over a host's answer (the SSH round trip faked, its frames real): the compose
containers prod replaces give each service its measurement, written through `pin`'s writer; the
plan then takes and names the measured figures; hostile, cut or unreadable answers write nothing."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from cli.main import main
from ops import calibrate as calibrating
from ops.calibrate import LOG_LIMIT, MARK, servers
from ops.doctor.facts import LiveContainer
from ops.framing import frame
from ops.ssh import RemoteResult
from tests.support.pulumi_harness import PROJECT_ROOT
from tests.support.startup_lines import GIB, logged, server_log
from tests.support.takeover import EMB_VL, TEXT

BGE, QWEN = "/disk2/bge-m3", "/disk2/Qwen3.6-27B-w8a8"
QWEN_RANKS = [(f"Worker_TP{r}", 70 + r) for r in range(4)]
LATER = "2026-12-06T08:00:00.5Z"


def inspect(cid: str, name: str, command: list[str], status: str = "exited") -> dict:
    return {"Id": cid, "Name": f"/{name}", "Config": {"Cmd": command, "Entrypoint": None, "Labels": {}},
            "State": {"Status": status}, "HostConfig": {}}  # fmt: skip


def compose_containers() -> list[dict]:
    """The seed's two compose containers, kept stopped after the takeover (tests/support/takeover.py)."""
    return [
        inspect("e" * 64, "model-emb-vl", ["sh", "-c", EMB_VL.format(bge=BGE, qwen=QWEN)]),
        inspect("t" * 64, "model-text", ["sh", "-c", TEXT.format(qwen=QWEN)]),
    ]


def compose_logs() -> dict[str, list[str]]:
    bge = server_log(BGE, [("EngineCore", 50)], 50, weights=int(1.06 * GIB), graph=int(0.3 * GIB), kv=3 * GIB,
                     fraction=0.1, tokens=9)  # fmt: skip
    vl = server_log(QWEN, QWEN_RANKS, 60, weights=int(7.5 * GIB), graph=int(0.31 * GIB), kv=40 * GIB)
    long = server_log(QWEN, [(f"Worker_TP{r}", 90 + r) for r in range(4)], 80, weights=int(7.5 * GIB),
                      graph=int(0.12 * GIB), kv=44 * GIB, fraction=0.9, tokens=2_321_739)  # fmt: skip
    return {"e" * 64: sorted(bge + vl), "t" * 64: long}


def answer(containers: list[dict], logs: dict[str, list[str] | bytes]) -> str:
    out = frame(MARK, "docker-inspect", "", json.dumps(containers))
    for cid, lines in logs.items():
        out += frame(MARK, "log", cid, lines if isinstance(lines, bytes) else "\n".join(lines) + "\n")
    return out + frame(MARK, "end")


@pytest.fixture
def prod(tmp_path) -> Path:
    path = tmp_path / "Pulumi.prod.yaml"
    shutil.copy(PROJECT_ROOT / "Pulumi.prod.yaml", path)
    return path


def run(monkeypatch, capsys, path: Path, stdout: str, reachable: bool = True) -> tuple[int, str, str]:
    scripts = []

    def fake_run_script(hd, script, *, timeout=None):
        scripts.append(script)
        if not reachable:
            return RemoteResult(False, None, "", "", 0.1, "ssh: connect to host 192.0.2.10 port 22: Connection refused")
        return RemoteResult(True, 0, stdout, "", 0.1)

    monkeypatch.setattr(calibrating, "run_script", fake_run_script)
    code = main(["calibrate", "--config", str(path)])
    out, err = capsys.readouterr()
    assert len(scripts) == 1, "one round trip for the one host"
    return code, out, err


def services_of(path: Path) -> dict[str, dict]:
    return {s["name"]: s for s in yaml.safe_load(path.read_text())["config"]["ascend-fleet:services"]}


def test_the_kept_compose_containers_give_every_service_its_measurement_and_its_source(monkeypatch, capsys, prod):
    before = prod.read_text()
    code, out, err = run(monkeypatch, capsys, prod, answer(compose_containers(), compose_logs()))
    assert code == 0, err
    assert out.startswith(f"calibrated {prod}: bge-m3, qwen-vl, qwen-long")
    assert "bge-m3: container model-emb-vl on npu-a, 2026-12-05T10:11:12Z: weights 1.0600 GiB/card" in out
    services = services_of(prod)
    assert services["bge-m3"]["graphMemoryGiB"] == 0.3 and services["qwen-vl"]["graphMemoryGiB"] == 0.31
    assert services["qwen-long"]["graphMemoryGiB"] == 0.12
    measured = services["qwen-vl"]["measured"]
    assert {k: v for k, v in measured.items() if k != "line"} == {
        "container": "model-emb-vl", "host": "npu-a", "date": "2026-12-05T10:11:12Z", "tensorParallelSize": 4,
        "memoryFraction": 0.85, "weightsGiB": 7.5, "overheadGiB": 0.75, "graphMemoryGiB": 0.31, "kvCacheGiB": 40.0,
    }, "no tokens: qwen-vl's engine core names no model, and model-emb-vl serves two"  # fmt: skip
    assert measured["line"].startswith("(Worker_TP0 pid=70) INFO 12-05 10:11:12 [worker.py:546] Free memory on device")
    assert services["qwen-long"]["measured"]["kvCacheTokens"] == 2_321_739
    assert services["bge-m3"]["measured"]["container"] == "model-emb-vl"
    old, new = before.splitlines(), prod.read_text().splitlines()
    assert [line for line in new if line not in old and "graphMemoryGiB" not in line and "measured" not in line]
    assert all(line in new for line in old), "every line the operator wrote stays"


def planned_services(capsys, path: Path) -> dict[str, dict]:
    assert main(["plan", "--config", str(path), "--format", "json"]) == 0
    return {s["name"]: s for s in json.loads(capsys.readouterr().out)["hosts"][0]["services"]}


def test_the_plan_then_takes_the_measured_weights_and_overhead_and_names_each_figures_source(monkeypatch, capsys, prod):
    containers = {name: s["container"] for name, s in planned_services(capsys, prod).items()}
    assert run(monkeypatch, capsys, prod, answer(compose_containers(), compose_logs()))[0] == 0
    services = planned_services(capsys, prod)
    assert {name: s["container"] for name, s in services.items()} == containers, "no container input changes"
    assert services["qwen-vl"]["capacity"]["weightsGiBPerCard"] == 7.5, "measured, not the profile's 12.94"
    assert services["qwen-vl"]["measured"]["used"] is True and services["qwen-vl"]["measured"]["container"] == "model-emb-vl"
    assert main(["plan", "--config", str(prod)]) == 0
    rows = [re.split(r" {2,}", line.strip()) for line in capsys.readouterr().out.splitlines()]
    assert ["figures", "weights/card", "runtime overhead", "NPU graphs", "measured"] in rows
    assert [
        "qwen-vl", "7.50 GiB measured", "0.75 GiB measured", "0.31 GiB measured",
        "model-emb-vl, 2026-12-05T10:11:12Z: KV cache 40.0 GiB/card at memoryFraction 0.85",
    ] in rows  # fmt: skip


@pytest.mark.parametrize("bad", [
    logged("Loading model weights took 1e999 GB", "model_runner_v1.py:3421", "EngineCore", 50),
    server_log(BGE, [("EngineCore", 50)], 50, weights=GIB, graph=GIB, kv=GIB)[-1][:-40],
], ids=["hostile", "cut short"])  # fmt: skip
def test_a_hostile_or_cut_line_is_refused_in_one_paragraph_and_the_file_is_byte_identical(monkeypatch, capsys, prod, bad):
    before = prod.read_bytes()
    logs = compose_logs()
    logs["e" * 64] = [*logs["e" * 64], bad]
    code, out, err = run(monkeypatch, capsys, prod, answer(compose_containers(), logs))
    assert code == 1 and out == ""
    assert err.startswith("error: stack prod: cannot calibrate: host npu-a: container model-emb-vl: startup line ")
    assert "nothing was written" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert prod.read_bytes() == before


def test_startup_lines_past_the_bound_an_unreachable_host_and_a_figure_that_would_not_load_write_nothing(
    monkeypatch, capsys, prod
):
    before = prod.read_bytes()
    cut = answer(compose_containers(), {"e" * 64: b"x" * (LOG_LIMIT + 1)})
    code, _, err = run(monkeypatch, capsys, prod, cut)
    assert code == 1 and f"container model-emb-vl printed more than {LOG_LIMIT} bytes of startup lines" in err
    code, _, err = run(monkeypatch, capsys, prod, "", reachable=False)
    assert code == 1 and "host npu-a is unreachable: ssh: connect to host" in err and "nothing was written" in err
    logs = compose_logs()
    logs["t" * 64] = [line.replace("took 7.5000 GB", "took 2048.0000 GB") for line in logs["t" * 64]]
    code, _, err = run(monkeypatch, capsys, prod, answer(compose_containers(), logs))
    assert code == 1 and "container model-text's startup figures of service qwen-long would not load (weightsGiB: " in err
    assert "Input should be less than or equal to 1024)" in err
    code, _, err = run(monkeypatch, capsys, prod, answer(compose_containers(), compose_logs())[:-20])
    assert code == 1 and "did not finish" in err
    assert prod.read_bytes() == before


def test_a_server_of_another_shape_is_not_taken_and_the_latest_start_of_a_service_counts(monkeypatch, capsys, prod):
    containers = compose_containers()
    containers[1]["Config"]["Cmd"][2] = TEXT.format(qwen=QWEN) + " --enforce-eager"
    planned = ["sh", "-c", "gate", "ascend-fleet-start-gate", "vllm", "serve", QWEN, "--served-model-name", "qwen-vl",
               "--tensor-parallel-size", "4", "--gpu-memory-utilization", "0.85"]  # fmt: skip
    containers.append(inspect("v" * 64, "qwen-vl", planned, "running"))
    logs = compose_logs() | {"v" * 64: server_log(QWEN, QWEN_RANKS, 60, weights=7 * GIB, graph=GIB // 4, kv=GIB, stamp=LATER)}
    code, out, err = run(monkeypatch, capsys, prod, answer(containers, logs))
    assert code == 0, err
    services = services_of(prod)
    assert services["qwen-vl"]["measured"]["container"] == "qwen-vl" and services["qwen-vl"]["graphMemoryGiB"] == 0.25
    assert "measured" not in services["qwen-long"] and "graphMemoryGiB" not in services["qwen-long"]
    assert "not taken: container model-text's server of /disk2/Qwen3.6-27B-w8a8 (as qwen-long): ran with --enforce-eager" in out
    assert "not taken: qwen-long: no container on host npu-a logged its startup as planned" in out


def test_a_server_at_another_size_is_named_and_not_taken_and_a_trailing_slash_is_the_same_model(monkeypatch, capsys, prod):
    containers = compose_containers()
    emb_vl = EMB_VL.replace("--tensor-parallel-size 4", "--tensor-parallel-size 2").format(bge=BGE + "/", qwen=QWEN)
    containers[0]["Config"]["Cmd"][2] = emb_vl
    logs = compose_logs()
    logs["e" * 64] = [line.replace(f"model {BGE}...", f"model {BGE}/...") for line in logs["e" * 64]]
    code, out, err = run(monkeypatch, capsys, prod, answer(containers, logs))
    assert code == 0, err
    services = services_of(prod)
    assert "measured" not in services["qwen-vl"] and services["bge-m3"]["measured"]["container"] == "model-emb-vl"
    server = "container model-emb-vl's server of /disk2/Qwen3.6-27B-w8a8 (as qwen-vl)"
    assert f"not taken: {server}: ran at tensorParallelSize 2, qwen-vl plans 4" in out


def test_an_edit_made_while_the_hosts_are_read_is_kept_and_nothing_is_written(monkeypatch, capsys, prod):
    def fake_run_script(hd, script, *, timeout=None):
        prod.write_text(prod.read_text() + "# an operator's note, saved meanwhile\n")
        return RemoteResult(True, 0, answer(compose_containers(), compose_logs()), "", 0.1)

    monkeypatch.setattr(calibrating, "run_script", fake_run_script)
    assert main(["calibrate", "--config", str(prod)]) == 1
    err = capsys.readouterr().err
    assert "changed since calibrate read it" in err and "run calibrate again" in err and "measured" not in prod.read_text()
    assert prod.read_text().endswith("# an operator's note, saved meanwhile\n")


def test_a_second_calibration_of_the_same_logs_changes_nothing(monkeypatch, capsys, prod):
    stdout = answer(compose_containers(), compose_logs())
    assert run(monkeypatch, capsys, prod, stdout)[0] == 0
    once = prod.read_bytes()
    code, out, _ = run(monkeypatch, capsys, prod, stdout)
    assert code == 0 and out.startswith(f"calibrated {prod}: nothing new") and prod.read_bytes() == once


COMMANDS = {
    "the seed's two servers in one sh -c": (
        ["sh", "-c", EMB_VL.format(bge=BGE, qwen=QWEN)], [(BGE, "bge-m3", 1, False), (QWEN, "qwen-vl", 4, False)]),
    "the plan's gated command": (
        ["sh", "-c", "echo 'vllm serve starts'; exec \"$@\"", "ascend-fleet-start-gate", "vllm", "serve", QWEN,
         "--served-model-name", "qwen-long", "--tensor-parallel-size", "4", "--enforce-eager"], [(QWEN, "qwen-long", 4, True)]),
    "options with = and underscores, --model, -tp": (
        ["/usr/local/bin/vllm", "serve", "--model=/m/a", "--served_model_name=a", "-tp", "2"], [("/m/a", "a", 2, False)]),
    "no served name: the model": (["vllm", "serve", "/m/b"], [("/m/b", "/m/b", 1, False)]),
    "an unreadable script, a size that is not a number, no vllm": (
        ["sh", "-c", "vllm serve /m/c '"], []),
    "a size vLLM would refuse": (["vllm", "serve", "/m/d", "--tensor-parallel-size", "four"], []),
}  # fmt: skip


@pytest.mark.parametrize("argv, expected", COMMANDS.values(), ids=COMMANDS.keys())
def test_the_servers_a_container_runs_are_read_from_its_command_line(argv, expected):
    container = LiveContainer.from_inspect(inspect("c", "c", argv))
    assert [(s.model, s.served, s.tensor_parallel_size, s.eager) for s in servers(container)] == expected


def test_a_stack_on_kubernetes_is_refused_before_any_host_is_read(monkeypatch, capsys, prod):
    prod.write_text(prod.read_text().replace("\nconfig:\n", "\nconfig:\n  ascend-fleet:target: kubernetes\n", 1))
    before = prod.read_bytes()
    monkeypatch.setattr(calibrating, "run_script", lambda *a, **k: pytest.fail("no host is read"))
    assert main(["calibrate", "--config", str(prod)]) == 1
    assert "the stack targets kubernetes; calibrate reads containers' logs on their hosts" in capsys.readouterr().err
    assert prod.read_bytes() == before
