"""`plan` reads every plain scalar of a stack file as the program under `pulumi up` will, or refuses it.

The referee is the real Pulumi CLI: `tests/data/pulumi_readings.json` is `pulumi config --json` of each
spelling (re-recorded by `tests/data/record_pulumi_readings.py`, which names the CLI version in it).
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from allocation.errors import ConfigError
from cli import yaml12
from cli.pulumi_scalars import Refused, Timestamp, program_value, top_level_text
from cli.stackfile import load_fleet

ROOT = Path(__file__).resolve().parent.parent
RECORDED = json.loads(Path(__file__).with_name("data").joinpath("pulumi_readings.json").read_text())
READINGS = {r["spelling"]: r for r in RECORDED["readings"]}
PLAIN = [s for s in READINGS if not s.startswith("!!")]


def pulumi_reading(spelling: str) -> object:
    """What the program decodes from the recorded CLI output (json.loads, as components/stack_config.py)."""
    nested = READINGS[spelling]["nested"]
    return json.loads(nested["value"])["env"]["A"] if "value" in nested else Refused(nested["error"])


def as_env_text(value: object) -> object:
    """How the config turns a scalar into an env value's text (allocation/values.py `_as_text`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if value is None or isinstance(value, str) else str(value)


def test_the_fixture_names_the_cli_version_it_was_recorded_with():
    assert RECORDED["pulumi"].startswith("v3.")


@pytest.mark.parametrize("spelling", PLAIN)
def test_the_emulated_reading_is_what_the_recorded_cli_gives_the_program(spelling):
    recorded, ours = pulumi_reading(spelling), program_value(spelling)
    if isinstance(recorded, Refused):
        assert isinstance(ours, Refused)
    elif isinstance(ours, Timestamp):
        assert ours.text in (recorded, "a timestamp") and recorded.endswith(" +0000 UTC")
    else:
        assert (ours, type(ours)) == (recorded, type(recorded))


def plan_reading(spelling: str) -> object:
    """What `plan` reads for the scalar, or Refused (with its line: the tests above)."""
    try:
        return yaml12.load(f"x: {spelling}")["x"]
    except yaml12.YAMLError as exc:
        return Refused(str(exc))


@pytest.mark.parametrize("spelling", [s for s in READINGS if not isinstance(plan_reading(s), Refused)])
def test_the_text_of_a_top_level_scalar_is_what_the_recorded_cli_hands_the_program(spelling):
    """At the top level the CLI hands the program text (`top` in the recording): `plan` makes the
    same text of the scalar it reads (cli.stackfile `top_level_reading`)."""
    assert top_level_text(plan_reading(spelling)) == READINGS[spelling]["top"]["value"]


@pytest.mark.parametrize(
    ("value", "text"), [(0.00005, "0.00005"), (1.5e-6, "0.0000015"), (1.5e-7, "1.5e-7"), (1.5e-10, "1.5e-10"), (2.5e300, "2.5e+300")]
)
def test_a_float_the_recording_lacks_is_printed_as_gos_json_encoder_prints_it(value, text):
    """Between the recorded spellings: Go writes digits down to 1e-6 (Python's repr: `5e-05`), then an
    exponent of at least one digit (golang/go src/encoding/json/encode.go `floatEncoder.encode`)."""
    assert top_level_text(value) == text


def stack(tmp_path: Path, value: str) -> Path:
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(
        "config:\n  ascend-fleet:hosts:\n    - name: h1\n      address: 10.0.0.1\n  ascend-fleet:services:\n"
        f"    - name: m\n      model: /m\n      env:\n        A: {value}\n"
    )
    return path


@pytest.mark.parametrize("spelling", list(READINGS))
def test_an_env_value_is_the_programs_string_or_the_stack_is_refused_with_the_line_and_both_readings(
    tmp_path, spelling
):
    path = stack(tmp_path, spelling)
    recorded = pulumi_reading(spelling)
    try:
        fleet, _ = load_fleet(config=str(path))
    except ConfigError as exc:
        message = str(exc)
        assert "\n" not in message and "Traceback" not in message
        if "line 9" not in message:  # refused by the config model (a type `plan` and Pulumi both refuse)
            assert "env" in message and not isinstance(recorded, Refused), message
        else:
            assert "Pulumi" in message, message
        return
    env = fleet.services[0].env or {}
    assert env.get("A") == as_env_text(recorded), (spelling, env, recorded)


@pytest.mark.parametrize("tag", ["!!set {a, b}", "!!binary aGVsbG8=", "!!timestamp 2001-01-01"])
def test_a_tag_the_two_readers_read_otherwise_is_refused_with_its_line(tmp_path, tag):
    path = stack(tmp_path, "x").with_name("Pulumi.t.yaml")
    path.write_text(path.read_text().replace("      env:\n        A: x\n", f"      args: {tag}\n"))
    with pytest.raises(ConfigError, match=r"line 8: .*Pulumi"):
        load_fleet(config=str(path))


def test_a_plain_equals_sign_is_the_string_pulumi_reads(tmp_path):
    fleet, _ = load_fleet(config=str(stack(tmp_path, "=")))
    assert fleet.services[0].env == {"A": "="}


@pytest.mark.parametrize("namespace", ["ascend-flet", "Ascend-Fleet", "ascendfleet", "ascend_fleet"])
def test_a_misspelt_namespace_is_refused_not_read_as_no_services(tmp_path, namespace):
    path = stack(tmp_path, "x")
    path.write_text(path.read_text().replace("ascend-fleet:services", f"{namespace}:services"))
    with pytest.raises(ConfigError, match=f"'{namespace}:services'.*ascend-fleet"):
        load_fleet(config=str(path))


def test_another_programs_namespace_is_still_ignored(tmp_path):
    path = stack(tmp_path, "x")
    path.write_text(path.read_text() + "  docker:host: unix:///var/run/docker.sock\n")
    fleet, _ = load_fleet(config=str(path))
    assert [s.name for s in fleet.services] == ["m"]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("address: 10.0.0.1", "address: 2024-6-1"),  # a host name to plan, a date to the Pulumi CLI
        ("name: h1", "name: 2024-6-1"),
        ("model: /m\n", "model: /m\n      args: [--seed, 0X1F]\n"),  # text to plan, 31 to the Pulumi CLI
        ("model: /m\n", "model: /m\n      servedModelName: 0B101\n"),
    ],
)
def test_an_arg_a_name_or_an_address_the_pulumi_cli_reads_otherwise_is_refused_with_its_line(tmp_path, old, new):
    path = stack(tmp_path, "x")
    path.write_text(path.read_text().replace(old, new, 1))
    with pytest.raises(ConfigError, match=r"line \d+: the plain value .* by the Pulumi CLI"):
        load_fleet(config=str(path))


def go_float_text(value: float) -> str:
    """`strconv.FormatFloat(value, 'g', -1, 64)`, how the Pulumi CLI's YAML encoder (gopkg.in/yaml.v3
    `encode.go` `floatv`) writes a float back: the shortest digits, `%e` below 1e-4 or from 1e6 on
    (golang/go `src/strconv/ftoa.go` `formatDigits`: "if precision was the shortest possible, use
    precision 6 for this decision")."""
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    text, point = "".join(map(str, digits)), len(digits) + exponent
    if point - 1 < -4 or point - 1 >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{'-' * sign}{mantissa}e{point - 1:+03d}"
    return ("-" if sign else "") + format(Decimal(repr(abs(value))).normalize(), "f")


def test_go_float_text_is_gos_shortest_g_format():
    cases = {0.9: "0.9", 0.95: "0.95", 1.0: "1", 100000.0: "100000", 1e6: "1e+06", 1234567.0: "1.234567e+06",
             0.0001: "0.0001", 0.00001: "1e-05", -2.5: "-2.5"}  # fmt: skip
    assert {v: go_float_text(v) for v in cases} == cases


@pytest.mark.parametrize("path", sorted(ROOT.glob("Pulumi.*.yaml")), ids=lambda p: p.name)
def test_every_float_of_a_committed_stack_file_is_written_as_the_pulumi_cli_writes_it_back(path: Path):
    """`pulumi stack init` and `pulumi config set` write the whole file again, every object value through
    the CLI's YAML encoder (pulumi/pulumi `sdk/go/common/resource/config/object.go` `MarshalYAML`): a
    float spelt otherwise (`0.90`) comes back `0.9`, a diff nobody made beside the salt the first operator
    commits (docs/getting-started.md, section 4)."""
    floats = [n for n in _scalars(yaml.compose(path.read_text())) if n.tag == "tag:yaml.org,2002:float" and not n.style]
    assert floats and [n.value for n in floats if n.value != go_float_text(float(n.value))] == []


def _scalars(node: yaml.Node) -> list[yaml.ScalarNode]:
    if isinstance(node, yaml.ScalarNode):
        return [node]
    children = node.value if isinstance(node, yaml.SequenceNode) else [n for pair in node.value for n in pair]
    return [s for child in children for s in _scalars(child)]
