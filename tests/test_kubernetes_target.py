"""`ascend-fleet:target` chooses where the plan runs, never the plan: the same stack planned for
docker and for Kubernetes prints the same bytes, and the target's settings are checked at the edge."""

from __future__ import annotations

from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from allocation.config import NAMESPACE, parse_fleet
from allocation.errors import ConfigError
from allocation.schema import stack_schema
from allocation.target import LABEL_KEY_RULE
from cli.stackfile import locate, stack_values
from tests.support.kubernetes import with_keys

ROOT = Path(__file__).resolve().parent.parent
PROD_HASH_BEFORE_TARGET = "7c646b87bbb18525bcbfda9850d680cab3c0720467e181f310e39a809662e70c"
KUBERNETES_KEYS = (
    "  ascend-fleet:target: kubernetes\n"
    "  ascend-fleet:kubernetes:\n"
    "    namespace: ascend\n"
    "    network: hostNetwork\n"
    "    dra: false\n"
    "    hostnameLabel: ascend-fleet/host\n"
)


@pytest.mark.parametrize("fmt", ["table", "markdown", "json"])
def test_plan_of_prod_is_byte_for_byte_the_same_whichever_target_it_names(cli, tmp_path, fmt):
    docker = cli("plan", "--stack", "prod", "--format", fmt)
    moved = cli("plan", "--config", str(with_keys(tmp_path, "prod", KUBERNETES_KEYS)), "--format", fmt)
    assert docker.returncode == moved.returncode == 0, moved.stderr
    assert moved.stdout == docker.stdout
    named = cli("plan", "--config", str(with_keys(tmp_path, "prod", "  ascend-fleet:target: docker\n")), "--format", fmt)
    assert named.stdout == docker.stdout


def test_the_target_defaults_to_docker_and_reads_its_settings():
    fleet = parse_fleet("prod", stack_values(locate("prod", None)))
    assert fleet.target == "docker" and fleet.kubernetes.network == "pod" and fleet.kubernetes.dra
    values = stack_values(locate("prod", None)) | {"target": "kubernetes", "kubernetes": {"network": "hostNetwork"}}
    moved = parse_fleet("prod", values)
    assert moved.target == "kubernetes" and moved.kubernetes.network == "hostNetwork"
    assert moved.kubernetes.hostname_label == "kubernetes.io/hostname"


def test_a_fleet_that_never_names_the_target_keeps_its_hash():
    values = stack_values(locate("prod", None))
    # prod's hash before the target existed: shard files cut then still match their fleet.
    assert parse_fleet("prod", values).fleet_hash() == PROD_HASH_BEFORE_TARGET
    named = parse_fleet("prod", values | {"target": "kubernetes"})
    assert named.fleet_hash() != parse_fleet("prod", values).fleet_hash()


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"target": "k8s"}, "target"),
        ({"kubernetes": {"network": "bridge"}}, "network"),
        ({"kubernetes": {"namespce": "x"}}, "namespce"),
        ({"kubernetes": {"namespace": "Bad_Name"}}, "namespace"),
        ({"kubernetes": {"hostnameLabel": "a b"}}, "hostnameLabel"),
    ],
)
def test_a_bad_target_setting_is_one_message_naming_the_key(extra, expected):
    values = stack_values(locate("prod", None)) | extra
    with pytest.raises(ConfigError) as err:
        parse_fleet("prod", values)
    assert expected in str(err.value)


LONGEST_PREFIX = ".".join(["p" * 63] * 3 + ["p" * 61])
"""253 characters: the longest DNS subdomain, so the longest prefix of a label key."""
STACK_SCHEMA = Draft202012Validator(stack_schema())


def key_refusals(key: str) -> list[str]:
    return [e.message for e in STACK_SCHEMA.iter_errors({"config": {f"{NAMESPACE}:kubernetes": {"taintKey": key}}})]


@pytest.mark.parametrize(
    ("key", "said"),
    [
        (LONGEST_PREFIX + "p/x", "its prefix is 254 characters, more than 253"),
        ("p" * 300 + "/x", "its prefix is 300 characters, more than 253"),
        ("x/y/z", "it holds 2 '/', where one at most separates the prefix from the name"),
        ("/x", "its prefix is empty"),
        ("ascend-fleet/", "its name is empty"),
        ("Example.com/x", "its prefix Example.com holds characters other than lowercase letters, digits, '-' and '.'"),
        ("a..b/x", "its prefix a..b has a part between dots that does not start and end with a letter or digit"),
        ("a/" + "n" * 64, "its name is 64 characters, more than 63"),
        ("a/-n", "its name -n does not start and end with a letter or digit"),
        ("a b", "its name 'a b' holds characters other than letters, digits, '-', '_' and '.'"),
    ],
)
def test_a_label_key_the_api_server_would_refuse_is_one_paragraph_naming_the_key_and_the_rule(key, said):
    values = stack_values(locate("prod", None)) | {"target": "kubernetes", "kubernetes": {"hostnameLabel": key}}
    with pytest.raises(ConfigError) as err:
        parse_fleet("prod", values)
    message = str(err.value)
    assert "ascend-fleet:kubernetes.hostnameLabel: " in message and " is not a Kubernetes label key: " in message
    assert said in message and LABEL_KEY_RULE in message and "\n" not in message
    assert key_refusals(key) != []  # the JSON Schema refuses it too (the prefix's bound by a lookahead)


def test_each_bad_label_key_is_a_problem_of_its_own():
    keys = {"hostnameLabel": "p" * 254 + "/x", "taintKey": "a/-n"}
    with pytest.raises(ConfigError) as err:
        parse_fleet("prod", stack_values(locate("prod", None)) | {"kubernetes": keys})
    problems = str(err.value).split("; ascend-fleet:")
    assert [p.count("is not a Kubernetes label key") for p in problems] == [1, 1]
    assert "kubernetes.hostnameLabel: " in problems[0] and "kubernetes.taintKey: " in problems[1]


@pytest.mark.parametrize("key", [LONGEST_PREFIX + "/" + "N" * 63, "example.com/My_Name.1", "a", "9"])
def test_the_longest_and_the_shortest_label_keys_kubernetes_accepts_are_accepted(key):
    values = stack_values(locate("prod", None)) | {"kubernetes": {"hostnameLabel": key, "taintKey": key}}
    fleet = parse_fleet("prod", values)
    assert fleet.kubernetes.hostname_label == fleet.kubernetes.taint_key == key
    assert key_refusals(key) == []


def test_on_kubernetes_a_service_name_must_start_with_a_letter():
    values = stack_values(locate("prod", None))
    services = [dict(s) for s in values["services"]]
    services[0]["name"] = "3bge"
    with pytest.raises(ConfigError) as err:
        parse_fleet("prod", values | {"services": services, "target": "kubernetes"})
    assert "must start with a letter: rename 3bge" in str(err.value)
    parse_fleet("prod", values | {"services": services})  # docker names containers, which may start with a digit
