"""Property: generated hostile remote output, thrown at every `doctor` and `profile` parser, gives
facts and findings or the parser's own clean error, never another exception.

Each class of hostile payload in each section is its own test case (so every class reaches every
parser by construction);
hypothesis `event()` records which parser stage each example ended in, shown by
`pytest --hypothesis-show-statistics`. The classes: marker and frame lines inside payloads, deep
nesting, out-of-range numbers (`1e400`, `Infinity`, thousands of digits), non-ASCII digits,
terminal control sequences, JSON of the wrong type or shape (`"false"`, `null`, lists), output cut
at any byte, invalid UTF-8, and unframed garbage in place of the whole output.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ops.doctor import Finding, HostReport, render_reports
from ops.doctor.facts import FactsError, parse_facts
from ops.doctor.findings import host_findings
from ops.doctor.gather import MARK
from ops.framing import frame
from ops.model_files import INDEX
from ops.model_files import MARK as MODEL_MARK
from ops.model_files import ModelFileError, parse_folders
from ops.models import ProfileError, read_profile, validated
from tests.support.stacks import fleet, host, service
from tests.support.doctor import inspect_of
from tests.support.pipeline import deployment_of

SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CONTROL = st.sampled_from(["\x1b[2J", "\x1b]0;title\x07", "\x9b1m", "\r", "\x00", "\u202e", "\x7f", "\x08"])


def _json_of(value: st.SearchStrategy) -> st.SearchStrategy[str]:
    return value.map(json.dumps)


CLASSES: dict[str, st.SearchStrategy[str]] = {
    "marker lines": st.lists(
        st.sampled_from([MARK, MODEL_MARK]).flatmap(
            lambda m: st.sampled_from([f"{m} end", f"{m} device-share 0", f"{m} folder /m/x", f"{m} docker-inspect x y",
                                       frame(m, "end").strip(), frame(m, "device-share", "0", "Device-share Status : True").strip()])
        ), min_size=1, max_size=4,
    ).map("\n".join),
    "deep nesting": st.integers(100, 100_000).map(lambda n: "[" * n + "]" * n),
    "huge numbers": st.sampled_from(["1e400", "-1e400", "Infinity", "NaN", "9" * 5000, "1" + "0" * 400])
    .map(lambda n: f'[{{"State": {{"Pid": {n}, "ExitCode": {n}}}}}]'),
    "non-ASCII digits": st.text(alphabet="0123456789²³¹٣٤৫߁𝟘", min_size=1, max_size=8),
    "control characters": st.lists(st.one_of(CONTROL, st.text(max_size=5)), max_size=8).map("".join),
    "wrong JSON types": _json_of(st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=6), st.just("false")),
        lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(
            st.sampled_from(["workers", "url", "is_healthy", "Config", "State", "HostConfig", "Pid", "metadata",
                             "total_size", "num_hidden_layers", "text_config", "data_offsets", "__metadata__"]),
            inner, max_size=4)),
        max_leaves=12,
    )),
    "cut short": st.integers(0, 400).map(lambda n: json.dumps({"workers": [{"url": "http://x:1", "is_healthy": True}] * 9})[:n]),
    "invalid UTF-8": st.binary(max_size=64).map(lambda b: b.decode("utf-8", errors="surrogateescape")),
    "any text": st.text(max_size=200),
}
DOCTOR_SECTIONS = ["docker-inspect", "top", "ss", "npu-smi", "npu-smi-rc", "devices", "driver", "device-share",
                   "router-workers", "docker-error", "ss-error"]  # fmt: skip
MODEL_SECTIONS = ["config.json", INDEX, "length", "header"]


@pytest.fixture(scope="module")
def hd():
    services = [service("a", 1, 0.4, host="npu-a", devices=[0]), service("b", 1, 0.4, host="npu-a", devices=[0]),
                service("r", 1, 0.1, replicas=2)]  # fmt: skip
    (deployment_host,) = deployment_of(fleet([host("npu-a")], services)).hosts
    return deployment_host


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogateescape")


def _doctor_output(hd, section: str, payload: str, whole: bool) -> str:
    """The payload in one section; the others as a host running exactly the plan would print them,
    so every judge (the router's, the sharing one...) reads what it was given."""
    if whole:
        return payload
    router = hd.routers[0].name
    arg = {"top": "abc", "device-share": "0", "router-workers": router}.get(section, "")
    out = frame(MARK, section, arg, _bytes(payload))
    if section != "docker-inspect":
        specs = [sd.spec for sd in hd.services] + [rd.spec for rd in hd.routers]
        live = [inspect_of(spec, cid=f"id-{i}", pid=100 + i) for i, spec in enumerate(specs)]
        out += frame(MARK, "docker-inspect", "", json.dumps(live))
    if section != "npu-smi-rc":
        out += frame(MARK, "npu-smi-rc", "", "0")
    return out + frame(MARK, "end")


@pytest.mark.parametrize("section", DOCTOR_SECTIONS)
@pytest.mark.parametrize("kind", CLASSES)
@SETTINGS
@given(data=st.data())
def test_hostile_output_in_any_doctor_section_is_facts_and_findings_or_a_facts_error(hd, kind, section, data):
    payload = data.draw(CLASSES[kind], label="payload")
    whole = data.draw(st.booleans(), label="in place of the whole output")
    text = _doctor_output(hd, section, payload, whole)
    try:
        facts = parse_facts(text)
    except FactsError as exc:
        event(f"{'whole output' if whole else section}: FactsError")
        assert "\n" not in str(exc)
        return
    found = host_findings(hd, facts)
    event(f"{'whole output' if whole else section}: {len(found)} finding(s)")
    report = HostReport("npu-a", True, tuple(found) + (Finding("host", payload),))
    table = render_reports("s", [report], "table")
    assert not any(ch in table for ch in "\x1b\x07\x9b\x00\r\x08")
    json.loads(render_reports("s", [report], "json"))


def _model_output(section: str, payload: str, whole: bool) -> str:
    if whole:
        return payload
    frames = frame(MODEL_MARK, "folder", "/m/x")
    if section in ("length", "header"):
        frames += frame(MODEL_MARK, "length", "w.safetensors", len(_bytes(payload)).to_bytes(8, "little") if section == "header" else _bytes(payload)[:8])
        frames += frame(MODEL_MARK, "header", "w.safetensors", _bytes(payload) if section == "header" else b"{}")
    else:
        frames += frame(MODEL_MARK, section, "", _bytes(payload))
    if section != "config.json":
        frames += frame(MODEL_MARK, "config.json", "", json.dumps({"num_hidden_layers": 2, "num_attention_heads": 2,
                                                                  "head_dim": 8}))  # fmt: skip
    return frames + frame(MODEL_MARK, "end")


@pytest.mark.parametrize("section", MODEL_SECTIONS)
@pytest.mark.parametrize("kind", CLASSES)
@SETTINGS
@given(data=st.data())
def test_hostile_model_files_are_a_profile_or_one_clean_error(kind, section, data):
    payload = data.draw(CLASSES[kind], label="payload")
    whole = data.draw(st.booleans(), label="in place of the whole output")
    try:
        folders = parse_folders(_model_output(section, payload, whole), "npu-a")
        for folder in folders.values():
            validated(read_profile(folder), folder.where)
    except (ModelFileError, ProfileError) as exc:
        event(f"{'whole output' if whole else section}: {type(exc).__name__}")
        assert "\n" not in str(exc) and "\x1b" not in str(exc)
        return
    event(f"{'whole output' if whole else section}: read")
