"""Stack files read by libyaml (`cli.yaml12`) mean what they meant when ruamel read them: YAML 1.2.

PyYAML's own loaders read YAML 1.1, where `yes` is a boolean, `017` is octal and `1:30` is 90;
ruamel (which read stack files before) reads YAML 1.2's core schema.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml as pyyaml
from hypothesis import given
from hypothesis import strategies as st
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError as RuamelError

from allocation.errors import ConfigError
from cli import yaml12
from cli.stackfile import PROJECT_ROOT, load_fleet

# Plain scalars whose meaning YAML 1.1 and 1.2 disagree on, with the YAML 1.2 value.
DIFFERENT_IN_1_1 = [
    ("yes", "yes"),
    ("No", "No"),
    ("on", "on"),
    ("OFF", "OFF"),
    ("1:30", "1:30"),
    ("190:20:30", "190:20:30"),
    ("1:30.5", "1:30.5"),
    ("+.5", 0.5),
    ("0o17", 15),
]
# And some on which they agree, which must not change either.
SAME_IN_BOTH = [("true", True), ("False", False), ("0x1F", 31), ("0b101", 5), ("1_000", 1000), ("1.5", 1.5),
                ("1e3", 1000.0), ("~", None), ("null", None), ("", None), ("0.95", 0.95),
                ("_", "_"), ("y", "y")]  # fmt: skip
# Read alike by YAML 1.1 and 1.2 but otherwise by the Pulumi CLI, so refused (tests/test_pulumi_scalars.py).
REFUSED_FOR_PULUMI = ["-.inf", "2026-12-03", "0X1F"]


def ruamel(text: str) -> Any:
    return YAML(typ="safe", pure=True).load(text)


def outcome(load: Any, text: str) -> Any:
    """The value read, with NaN made comparable, or the kind of error."""
    try:
        value = load(text)
    except (pyyaml.YAMLError, RuamelError, IndexError, ValueError):  # ruamel fails `+_` with an IndexError
        return "error"
    return "nan" if isinstance(value.get("k"), float) and math.isnan(value["k"]) else value


@pytest.mark.parametrize(("scalar", "expected"), DIFFERENT_IN_1_1 + SAME_IN_BOTH)
def test_a_plain_scalar_means_what_yaml_1_2_and_ruamel_say(scalar, expected):
    text = f"k: {scalar}\n"
    assert yaml12.load(text) == {"k": expected}
    assert ruamel(text) == {"k": expected}


# Plain integers with a leading zero: YAML 1.2 (ruamel) reads the first number, the Pulumi CLI (checked
# with pulumi v3.274.0 `pulumi config --json`, gopkg.in/yaml.v3) the second, so `plan` refuses them.
LEADING_ZERO = [("017", 17, 15), ("-017", -17, -15), ("0017_0", 170, 120), ("08", 8, 8), ("00", 0, 0)]


@pytest.mark.parametrize(("scalar", "yaml12_value", "pulumi_value"), LEADING_ZERO)
def test_a_number_with_a_leading_zero_is_refused_naming_both_readings_and_its_line(scalar, yaml12_value, pulumi_value):
    assert ruamel(f"k: {scalar}\n") == {"k": yaml12_value}
    with pytest.raises(yaml12.Ambiguous) as caught:
        yaml12.load(f"a: 1\nk: {scalar}\n")
    assert f"plan` reads it as {yaml12_value} but the Pulumi CLI as {pulumi_value}" in caught.value.problem
    assert caught.value.line == 2


@pytest.mark.parametrize("scalar", REFUSED_FOR_PULUMI)
def test_a_scalar_the_pulumi_cli_reads_otherwise_is_refused_with_its_line(scalar):
    with pytest.raises(yaml12.Ambiguous) as caught:
        yaml12.load(f"a: 1\nk: {scalar}\n")
    assert "Pulumi" in caught.value.problem and caught.value.line == 2


@pytest.mark.parametrize(("scalar", "expected"), DIFFERENT_IN_1_1)
def test_pyyamls_own_safe_loader_would_change_these_values(scalar, expected):
    # Why `cli.yaml12` exists: the stock loader reads YAML 1.1.
    assert pyyaml.load(f"k: {scalar}\n", Loader=pyyaml.CSafeLoader) != {"k": expected}


LEADING = re.compile(r"[-+]?0[0-9_]*[0-9][0-9_]*")  # refused on purpose (above); ruamel reads them
PLAIN = st.text(alphabet="0123456789+-._:eEoxbOXBabcfinlnstuyYNTF~ ", min_size=1, max_size=10)


@given(PLAIN)
def test_any_plain_scalar_of_numbers_and_words_reads_the_same_as_ruamel_reads_it(scalar):
    text = f"k: {scalar}\n"
    ours = outcome(yaml12.load, text)
    disputed = LEADING.fullmatch(scalar.strip()) or _pulumi_disagrees(text)
    assert ours == outcome(ruamel, text) or (ours == "error" and disputed)


def _pulumi_disagrees(text: str) -> bool:
    try:
        yaml12.load(text)
    except yaml12.Ambiguous as exc:
        return "Pulumi" in exc.problem
    except pyyaml.YAMLError:
        return False
    return False


def test_every_committed_stack_file_reads_the_same_as_ruamel_reads_it():
    files = sorted(PROJECT_ROOT.glob("Pulumi*.yaml"))
    assert len(files) >= 4
    for path in files:
        text = path.read_text(encoding="utf-8-sig")
        assert yaml12.load(text) == ruamel(text), path.name


def test_a_key_written_twice_is_refused_with_its_line_not_silently_overwritten(tmp_path: Path):
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(
        "config:\n  ascend-fleet:hosts:\n    - name: a\n      address: 10.0.0.1\n      address: 10.0.0.2\n"
        "  ascend-fleet:services: [{name: m, model: /m}]\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_fleet(config=str(path))
    message = str(caught.value)
    assert "found duplicate key 'address'" in message and "line 5, column 7" in message
    with pytest.raises(RuamelError, match="duplicate key"):  # as ruamel refuses it
        ruamel(path.read_text())


def test_a_merge_key_may_be_overridden_by_a_key_of_its_own_mapping():
    text = "base: &b {a: 1, b: 2}\nk: {<<: *b, a: 3}\n"
    assert yaml12.load(text)["k"] == {"a": 3, "b": 2} == ruamel(text)["k"]


def test_a_syntax_error_names_the_file_the_line_and_the_column(tmp_path: Path):
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text("config:\n  ascend-fleet:hosts: [\n    {name: a, address: x\n  ascend-fleet:services: []\n")
    with pytest.raises(ConfigError) as caught:
        load_fleet(config=str(path))
    message = str(caught.value)
    assert message.startswith(f"{path}: not valid YAML: ") and ", line 4, column " in message and "\n" not in message


def test_a_value_that_yaml_1_1_reads_as_a_boolean_reaches_the_plan_as_written(tmp_path: Path):
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(
        "config:\n  ascend-fleet:hosts: [{name: on, address: 10.0.0.1, hbmGiB: 64}]\n"
        "  ascend-fleet:services: [{name: no, model: /m, memoryFraction: 0.5}]\n"
    )
    fleet, _ = load_fleet(config=str(path))
    assert (fleet.hosts[0].name, fleet.hosts[0].hbm_gi_b) == ("on", 64)  # YAML 1.1: True
    assert fleet.services[0].name == "no"  # YAML 1.1: False


def test_a_stack_file_with_a_leading_zero_number_is_one_paragraph_naming_the_file_and_line(tmp_path: Path):
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text("config:\n  ascend-fleet:hosts: [{name: a, address: 10.0.0.1, hbmGiB: 064}]\n")
    with pytest.raises(ConfigError) as caught:
        load_fleet(config=str(path))
    message = str(caught.value)
    assert message.startswith(f"{path}, line 2: the number 064 is written with a leading zero: ") and "\n" not in message
    assert "reads it as 64 but the Pulumi CLI as 52 (octal)" in message


