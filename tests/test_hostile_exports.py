"""Values that pass validation but mean something to a shell, Compose, YAML 1.1 or markdown stay plain data.

The docker-run script is run for real under `sh` with a fake `docker` first on
PATH (a script that only records its argv); any other command the values could
smuggle in would create the canary file.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml as pyyaml  # a YAML 1.1 reader, as older Compose versions use
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from records.deployment import deploy
from views.diff import diff_plans, render_diff
from allocation.errors import FleetError
from allocation.planner import plan_fleet
from views.report import render_plan
from cli.main import main
from views.exports.render import render
from tests.support.stacks import fleet, host, service
from tests.support.pipeline import deployment_of, plan_json_of
from tests.support.docker_fakes import FAKE_ID, run_script_with_fake_docker

CANARY = "CANARY"
SMUGGLERS = [
    f"$(touch {CANARY})", f"`touch {CANARY}`", f"; touch {CANARY}", f"' ; touch {CANARY} ; '",
    f'" ; touch {CANARY} ; "', "${HOME}", "$PATH", "yes", "on", "12:30:00", "0x1F", "~", "null", "a|b", "*x*",
]  # fmt: skip


def hostile_fleet(value: str):
    return fleet(
        [host("npu-a")],
        [
            service(
                "a",
                env={"X": value, "Y": f"pre {value} post"},
                args=["--chat-template", value, f"--override-generation-config={value}"],
                servedModelName="m" + value.replace("\n", ""),
                mounts=[{"source": "/data/" + value.replace(":", "").replace("\x00", ""), "target": "/data"}],
            )
        ],
    )


@pytest.mark.parametrize("value", SMUGGLERS)
def test_the_docker_run_script_passes_every_value_to_docker_as_one_word(tmp_path, value):
    deployment = deployment_of(hostile_fleet(value))
    script = render(deployment, "docker-run")
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
    calls = [c.split("\0")[:-1] for c in run_exported_script(script, tmp_path)]
    name = deployment.hosts[0].services[0].spec.name
    assert calls[0] == ["ps", "-aq", "--no-trunc", "--filter", f"name=^/\\Q{name}\\E$"]
    assert [c[:2] for c in calls[1:]] == [["stop", "--time"], ["rm", "-f"], ["run", "-d"]]
    assert calls[1][-1] == calls[2][-1] == FAKE_ID
    run = calls[3]
    assert f"--env=X={value}" in run and f"--env=Y=pre {value} post" in run
    assert run[run.index("--") + 1] == deployment.hosts[0].services[0].spec.image
    assert run[-3:] == ["--chat-template", value, f"--override-generation-config={value}"]


@pytest.mark.parametrize("value", SMUGGLERS)
def test_the_compose_file_reads_the_same_in_yaml_1_1_and_1_2_and_doubles_dollars(value):
    text = render(deployment_of(hostile_fleet(value)), "compose")
    assert text.startswith("# stack test, host npu-a")
    old, new = pyyaml.safe_load(text), YAML(typ="safe", pure=True).load(text)
    assert old == new
    env = new["services"]["a"]["environment"]
    assert env["X"] == value.replace("$", "$$") and isinstance(env["X"], str)
    assert set(new) == {"name", "services"}


def run_exported_script(script: str, tmp: Path) -> list[str]:
    """The docker calls of an exported script, which ran no value as a command."""
    calls = run_script_with_fake_docker(script, tmp)
    assert not list(tmp.rglob(CANARY)), "a value ran as a command"
    return calls


def test_backticks_and_pipes_in_a_diff_stay_inside_their_code_spans():
    before = plan_json_of(hostile_fleet("plain"))
    after = plan_json_of(hostile_fleet("``` | **bold** `x`"))
    text = render_diff(diff_plans(before, after), "markdown")
    row = next(line for line in text.splitlines() if "env X" in line)
    cells = row.split(" | ")
    assert len(row.replace("\\|", "").split("|")) == 6, "the row keeps its four cells"
    detail = cells[-1].removesuffix(" |")
    fence = detail[: len(detail) - len(detail.lstrip("`"))]
    assert len(fence) == 4 and detail.endswith(fence), "the fence is longer than any backtick run inside"


def test_a_heading_of_the_plan_escapes_markdown_in_the_stack_name():
    plan = plan_fleet(fleet([host()], [service("a")], stack="my_stack_x"))
    heading = render_plan(deploy(plan), "markdown").splitlines()[0]
    assert heading == "## Allocation plan: stack my\\_stack\\_x: 1 host(s), 1 service(s)"


def test_a_service_that_becomes_privileged_with_every_card_is_a_security_change():
    before = plan_json_of(fleet([host()], [service("a", devices=[4])]))
    after = plan_json_of(fleet([host()], [service("a", devices=[4], allDevices=True,
                                                                    mounts=[{"source": "/", "target": "/host", "readOnly": False}])]))  # fmt: skip
    diff = diff_plans(before, after)
    [changed] = diff.changes()
    assert any(s.startswith("privileged false -> true") for s in changed.security)
    assert any(s.startswith("deviceFiles") for s in changed.security)
    assert any(s.startswith("mounts") and '"source":"/"' in s for s in changed.security)
    assert "| **security** |" in render_diff(diff, "markdown")
    assert "No allocation changes" not in render_diff(diff, "table")


# ---- the command line: one paragraph, never a traceback -----------------------------------


def write(tmp_path: Path, content: bytes) -> str:
    path = tmp_path / "Pulumi.t.yaml"
    path.write_bytes(content)
    return str(path)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"config:\n  ascend-fleet:hosts: [{name: a, address: \xff}]\n", "not UTF-8 text (byte 0xff at offset"),
        (b"config: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested too deeply"),
        (b"config:\n  ascend-fleet:hosts: [{name: a, address: x, npus: " + b"9" * 5000 + b"}]\n", "a value cannot be read"),
        (b"config:\n  ascend-fleet:hosts: [{name: a, address: x, hbmGiB: 1e400}]\n", "line 2: the plain value 1e400"),
    ],
)
def test_unreadable_stack_files_give_one_paragraph(tmp_path, capsys, content, expected):
    assert main(["plan", "--config", write(tmp_path, content)]) == 1
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err and err.count("\n") == 1


def test_an_unexpected_error_is_one_paragraph_and_debug_shows_the_traceback(tmp_path, capsys, monkeypatch):
    import cli.main

    def broken(*_: Any, **__: Any) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(cli.main, "render_plan", broken)
    assert main(["plan"]) == 1
    err = capsys.readouterr().err
    [error] = [line for line in err.splitlines() if not line.startswith("warning: ")]  # the plan's own warnings first
    assert error.startswith("error: unexpected KeyError: 'boom'") and "--debug" in error and "Traceback" not in err
    assert main(["--debug", "plan"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_thousands_of_problems_stay_a_short_paragraph():
    with pytest.raises(FleetError) as caught:
        fleet([host()], [service(f"s{i}", 1, 0.5, tensorParallelSize=3) for i in range(3000)])
    message = str(caught.value)
    assert "and 2988 more problems" in message and len(message) < 3000


# ---- hostile values anywhere: a plan, or one paragraph ------------------------------------

HOSTILE_TEXT = st.one_of(
    st.sampled_from(SMUGGLERS + ["-V", "-oProxyCommand=x", "\n", "a\nb", "\x00", "[::1]", "a::b", "\u202e", ""]),
    st.text(max_size=12),
)
HOSTILE_NUMBER = st.one_of(st.integers(-(10**30), 10**30), st.sampled_from([0, -1, 65535, 65536, 10**400]), st.floats())
STRING_KEYS = [("host", "name"), ("host", "address"), ("host", "user"), ("host", "dockerHost"),
               ("service", "name"), ("service", "model"), ("service", "image"), ("service", "servedModelName"),
               ("service", "restart"), ("env", None), ("args", None)]  # fmt: skip
NUMBER_KEYS = [("host", "npus"), ("host", "sshPort"), ("host", "hbmGiB"), ("service", "apiPort"),
               ("service", "vllmPort"), ("service", "hcclIfBasePort"), ("service", "maxModelLen"),
               ("service", "shmSizeMiB"), ("service", "tensorParallelSize"), ("service", "memoryFraction")]  # fmt: skip


def hostile_values(where: tuple[str, str | None], value: Any) -> dict:
    h: dict[str, Any] = {"name": "npu-a", "address": "10.0.0.1"}
    s: dict[str, Any] = {"name": "svc", "model": "/models/m", "memoryFraction": 0.5}
    kind, key = where
    if kind == "env":
        s["env"] = {str(value): "1", "K": value}
    elif kind == "args":
        s["args"] = [value]
    else:
        (h if kind == "host" else s)[key] = value
    return {"config": {"ascend-fleet:hosts": [h], "ascend-fleet:services": [s]}}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.tuples(st.sampled_from(STRING_KEYS), HOSTILE_TEXT), st.tuples(st.sampled_from(NUMBER_KEYS), HOSTILE_NUMBER)))
def test_a_hostile_value_in_any_key_gives_a_plan_or_one_paragraph(tmp_path_factory, case):
    where, value = case
    tmp = tmp_path_factory.mktemp("hostile")
    path = tmp / "Pulumi.h.yaml"
    path.write_text(json.dumps(hostile_values(where, value)))  # JSON is YAML, and writes any value exactly
    code, out, err = run_main(["plan", "--config", str(path), "--format", "json"])
    if code != 0:
        assert code == 1 and err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
        return
    code, script, err = run_main(["render", "--config", str(path), "--format", "docker-run"])
    assert code == 0, err
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
    assert all(c.split("\0")[0] in ("ps", "stop", "rm", "run") for c in run_exported_script(script, tmp))


def run_main(argv: list[str]) -> tuple[int, str, str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_the_fake_docker_records_exactly_its_argv(tmp_path):
    calls = run_exported_script("docker run -- 'a b' c\n", tmp_path)
    assert calls == ["run\0--\0a b\0c\0"]
    assert os.environ.get("DOCKER_LOG") is None
