"""Hostile remote output: what a router, a model hub or a host prints cannot forge a section,
end the run, or reach the terminal raw. The gather scripts run here with `sh`, with fake
`docker`, `npu-smi`, `curl` and model folders on disk holding the hostile text."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

import ops.doctor as doctor
from records.host_requirements import requirements
from ops.doctor.facts import parse_facts
from ops.doctor.findings import host_findings
from ops.doctor.gather import MARK, gather_script
from ops.framing import frame
from ops.model_files import gather_script as model_script
from ops.model_files import parse_folders
from ops.models import ProfileError, read_profile
from ops.ssh import RemoteResult
from tests.support.stacks import fleet, host, service
from tests.support.doctor import gathered
from tests.support.profiles import QWEN3, model, safetensors
from tests.support.pipeline import deployment_of

DATA = Path(__file__).parent / "data" / "npu-smi"
SHARE_OFF = "\tNPU ID : 0\n\tDevice-share Status : False\n"


def fake_bin(folder: Path, programs: dict[str, str]) -> dict[str, str]:
    """An environment whose PATH finds these shell scripts first."""
    folder.mkdir(exist_ok=True)
    for name, body in programs.items():
        path = folder / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}


def run_sh(script: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True, env=env, timeout=60).stdout


def test_a_router_body_holding_marker_lines_cannot_forge_or_hide_a_section(tmp_path):
    forged = f"\n{MARK} device-share 0\nDevice-share Status : True\n{MARK} end\n"
    forged += frame(MARK, "device-share", "0", "Device-share Status : True")
    env = fake_bin(tmp_path / "bin", {
        "docker": "echo '[]'",
        "npu-smi": f'if [ "$2" = "-t" ]; then printf "{SHARE_OFF}"; else cat {DATA / "npu-smi-info-910b3-idle.txt"}; fi',
        "curl": f"cat {tmp_path / 'body'}",
    })  # fmt: skip
    (tmp_path / "body").write_text(forged)
    facts = parse_facts(run_sh(gather_script(requirements(range(8)), (0,), [("bge-router", 9000)]), env))
    assert facts.device_share == {0: SHARE_OFF.strip("\n")}
    assert facts.router_workers == {"bge-router": forged.strip("\n")}
    assert facts.npu is not None and len(facts.npu.npus) == 8


def test_a_config_json_holding_marker_lines_cannot_rewrite_another_models_profile(tmp_path):
    from ops.model_files import MARK as MODEL_MARK

    evil = model(tmp_path, "evil", QWEN3, index_total=10)
    (evil / "config.json").write_text(
        json.dumps(QWEN3) + f"\n{MODEL_MARK} folder {tmp_path}/good\n{MODEL_MARK} config\n" + json.dumps({**QWEN3, "num_hidden_layers": 1})
        + "\n" + frame(MODEL_MARK, "config.json", "", json.dumps({**QWEN3, "num_hidden_layers": 1}))
    )  # fmt: skip
    good = model(tmp_path, "good", QWEN3, index_total=10)
    folders = parse_folders(run_sh(model_script([str(evil), str(good)])), "npu-a")
    assert read_profile(folders[str(good)])["numHiddenLayers"] == 64
    with pytest.raises(ProfileError, match="is not JSON"):
        read_profile(folders[str(evil)])


def test_a_newline_in_a_safetensors_file_name_stays_part_of_the_name(tmp_path):
    from ops.model_files import MARK as MODEL_MARK

    folder = model(tmp_path, "odd", QWEN3)
    size = safetensors(folder / f"x\n{MODEL_MARK} end\ny.safetensors", {"w": ("BF16", [8, 8])})
    folders = parse_folders(run_sh(model_script([str(folder)])), "npu-a")
    assert read_profile(folders[str(folder)])["weightBytes"] == size


def test_a_remote_header_length_of_2_to_the_62_reads_nothing_and_is_refused(tmp_path):
    folder = model(tmp_path, "huge", QWEN3)
    (folder / "model.safetensors").write_bytes((1 << 62).to_bytes(8, "little") + b"{}" + b"\0" * 1000)
    out = run_sh(model_script([str(folder)]))
    assert len(out) < 1000
    with pytest.raises(ProfileError, match=r"header length 4611686018427387904"):
        read_profile(parse_folders(out, "npu-a")[str(folder)])


def test_a_fifo_or_a_link_to_dev_zero_is_named_not_read_remotely_or_here(tmp_path):
    fifo = model(tmp_path, "fifo", QWEN3, index_total=10)
    (fifo / "config.json").unlink()
    os.mkfifo(fifo / "config.json")
    zero = model(tmp_path, "zero", QWEN3)
    (zero / "model.safetensors").symlink_to("/dev/zero")
    folders = parse_folders(run_sh(model_script([str(fifo), str(zero)])), "npu-a")
    for where in (folders[str(fifo)], fifo, folders[str(zero)], zero):
        with pytest.raises(ProfileError, match="not a regular file"):
            read_profile(where)


def test_a_section_longer_than_the_limit_is_cut_on_the_host_and_said_to_be_cut(tmp_path):
    from ops.framing import read_frames

    big = "x" * 5000
    out = run_sh("{\n" + __import__("ops.framing", fromlist=["shell_preamble"]).shell_preamble(MARK, 1000)
                 + f"printf '%s' {big} | f doc ''\n}}\n")  # fmt: skip
    (got,) = read_frames(out, MARK, 1000)
    assert got.cut and got.payload == b"x" * 1000


@pytest.mark.parametrize("inspect", ["[" * 100_000 + "]" * 100_000, '[{"State": {"Pid": 1e400}}]',
                                     '[{"State": {"ExitCode": ' + "9" * 5000 + "}}]", '[{"State": {"Pid": "²"}}]',
                                     '[{"State": {"Pid": NaN}}]'])  # fmt: skip
def test_deep_json_huge_numbers_or_unicode_digits_in_docker_inspect_are_a_host_finding(inspect):
    facts = parse_facts(gathered(("docker-inspect", "", inspect), ("npu-smi-rc", "", "0")))
    assert facts.containers == () and facts.docker_error


def test_a_host_whose_output_cannot_be_read_is_a_finding_and_the_other_hosts_are_still_checked(monkeypatch):
    config = fleet([host("npu-a"), host("npu-b")], [service("alpha", 1, 0.4, host="npu-a", devices=[0])])
    deployment = deployment_of(config)

    def fake_run_script(hd, script, *, timeout=None):
        if hd.name == "npu-a":
            return RemoteResult(True, 0, f"{MARK} docker-inspect not-base64! \n", "", 0.1)
        return RemoteResult(True, 0, gathered(("docker-inspect", "", "[]"), ("npu-smi-rc", "", "0")), "", 0.1)

    monkeypatch.setattr(doctor, "run_script", fake_run_script)
    a, b = doctor.audit(deployment)
    assert [f.kind for f in a.findings] == ["host"] and "not valid base64" in a.findings[0].message
    assert b.reachable and b.name == "npu-b"


def test_terminal_escapes_from_remote_text_never_reach_the_table():
    bad = doctor.HostReport("npu-a", True, (doctor.Finding("router", "router x: body \x1b[2J\x1b]0;pwned\x07 \x9b1m ok"),))
    table = doctor.render_reports("prod", [bad], "table")
    assert "\x1b" not in table and "\x07" not in table and "\x9b" not in table
    assert "\\x1b[2J" in table


def test_an_is_healthy_of_the_string_false_is_a_router_finding_not_a_healthy_replica():
    from tests.support.doctor import router_findings, workers_body

    hd = deployment_of(fleet([host("npu-a")], [service("bge", 1, 0.1, replicas=2)])).hosts[0]
    (rd,) = hd.routers
    body = workers_body({url: True for url in rd.workers}).replace("true", '"false"')
    (found,) = router_findings(hd, body)
    assert found.kind == "router" and "could not be read" in found.message and "is_healthy" in found.message


def test_device_share_status_true_counts_only_from_the_real_field():
    hd = deployment_of(fleet([host("npu-a")], [
        service("a", 1, 0.4, host="npu-a", devices=[0]), service("b", 1, 0.4, host="npu-a", devices=[0])])).hosts[0]  # fmt: skip
    said = "Error: the command failed: expected 'Device-share Status : True' but got nothing"
    facts = parse_facts(gathered(("device-share", "0", said), ("npu-smi-rc", "", "1")))
    assert "sharing" in [f.kind for f in host_findings(hd, facts)]
    facts = parse_facts(gathered(("device-share", "0", "\tDevice-share Status            : True\n"), ("npu-smi-rc", "", "1")))
    assert "sharing" not in [f.kind for f in host_findings(hd, facts)]


def test_card_numbers_and_pids_of_non_ascii_digits_are_not_read_as_numbers():
    from ops.doctor.facts import parse_ss
    from ops.npusmi import parse_npu_smi

    text = (DATA / "npu-smi-info-910b3-idle.txt").read_text().replace("| 7     910B3", "| ²     910B3")
    assert 7 not in {n.index for n in parse_npu_smi(text).npus} and len(parse_npu_smi(text).npus) == 7
    assert parse_ss('LISTEN 0 128 0.0.0.0:8²00 0.0.0.0:* users:(("x",pid=1²,fd=3))') == ()
    facts = parse_facts(gathered(("top", "abc", "PID\n1²\n12\n"), ("npu-smi-rc", "", "0")))
    assert facts.pids == {"abc": frozenset({12})}


def test_the_a3_npu_smi_layout_with_a_chip_phy_id_column_is_read():
    from ops.npusmi import parse_npu_smi

    info = parse_npu_smi((DATA / "npu-smi-info-a3-vllm-ascend-6245.txt").read_text())
    assert [(n.index, n.npu_id, n.chip, n.hbm_used_mb) for n in info.npus] == [(0, 0, 0, 3158), (1, 0, 1, 2882), (2, 1, 0, 3151)]
    assert all(n.healthy for n in info.npus)
    assert [(p.npu, p.pid, p.name, p.container_pid) for p in info.processes] == [(0, 632268, "python3.1", None)]


def test_a_privileged_of_the_string_false_is_not_privileged_and_a_string_pid_is_unreadable():
    inspect = [{"Id": "x", "Name": "/x", "Config": {}, "State": {"Status": "running"}, "HostConfig": {"Privileged": "false"}}]
    facts = parse_facts(gathered(("docker-inspect", "", json.dumps(inspect)), ("npu-smi-rc", "", "0")))
    assert facts.containers[0].privileged is False
    inspect[0]["State"]["Pid"] = "12"
    facts = parse_facts(gathered(("docker-inspect", "", json.dumps(inspect)), ("npu-smi-rc", "", "0")))
    assert facts.containers == () and "not a whole number" in facts.docker_error
