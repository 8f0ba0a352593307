"""Values that would reach a shell, ssh, docker or vLLM as something else are refused when the config is read.

Each case is one class of careless or hostile input; the message names the key
and the rule, in one paragraph.
"""

from __future__ import annotations

import pytest

from allocation.errors import ConfigError, FleetError
from allocation.planner import plan_fleet
from tests.support.stacks import fleet, host, service


def refused(hosts: list[dict], services: list[dict], **extra) -> str:
    with pytest.raises(FleetError) as caught:
        plan_fleet(fleet(hosts, services, **extra))
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"user": "-V"}, "hosts[0] (npu-a).user: String should match pattern"),
        ({"user": "-oProxyCommand=touch /tmp/x"}, "hosts[0] (npu-a).user"),
        ({"address": "-oProxyCommand=x"}, "is neither an IP address nor a host name"),
        ({"address": "[::1]"}, "write an IPv6 address without brackets (::1)"),
        ({"address": "a\nb"}, "is neither an IP address nor a host name"),
        ({"address": "10.0.0.1 -p 2"}, "is neither an IP address nor a host name"),
        ({"dockerHost": "ssh://root@10.9.9.9"}, "names another machine than address"),
        ({"dockerHost": "tcp://npu-a.example:2375\ninclude: x"}, "contains a control character"),
        ({"hbmGiB": 10**400}, "hbmGiB: Input should be less than or equal to 4096"),
        ({"sshPort": True}, "hosts[0] (npu-a).sshPort: true is a boolean, not a number"),
        ({"npus": "8"}, "hosts[0] (npu-a).npus: '8' is text, not a number (a quoted value reaches the program as text): write it unquoted"),
    ],
)
def test_host_values_that_ssh_or_docker_would_misread_are_refused(extra, expected):
    assert expected in refused([host(**extra)], [service("a")])


def test_ipv6_addresses_without_brackets_are_accepted_and_bracketed_in_urls():
    plan = plan_fleet(fleet([host(address="fd00::1")], [service("a")]))
    assert plan.hosts[0].host.docker_url() == "ssh://root@[fd00::1]:22"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"image": "--privileged"}, "is not a Docker image reference"),
        ({"image": "a::b"}, "is not a Docker image reference"),
        ({"image": "Quay.io/UPPER"}, "is not a Docker image reference"),
        ({"model": "models/qwen"}, "is not an absolute path"),
        ({"model": "/models/a:b"}, "contains ':'"),
        ({"model": "/models/a\x00b"}, "contains a control character"),
        ({"mounts": [{"source": "/data", "target": "relative"}]}, "is not an absolute path"),
        ({"servedModelName": "--api-key=x"}, "starts with '-'"),
        ({"env": {"A=B": "1"}}, "String should match pattern"),
        ({"env": {"A B": "1"}}, "String should match pattern"),
        ({"env": {"ASCEND_VISIBLE_DEVICES": "0-7"}}, "ASCEND_VISIBLE_DEVICES is set by the plan: set the service's devices"),
        ({"env": {"X": "a\x00b"}}, "String should match pattern"),
        ({"args": ["--port", "9"]}, "'--port' sets --port, which the plan owns: set apiPort instead"),
        ({"args": ["--gpu-memory-utilization=0.99"]}, "set memoryFraction instead"),
        ({"args": ["--gpu_memory_utilization", "0.99"]}, "set memoryFraction instead"),
        ({"args": ["--gpu-memory", "0.99"]}, "set memoryFraction instead"),
        ({"args": ["-tp", "8"]}, "set tensorParallelSize instead"),
        ({"args": ["--served-model-name", "x"]}, "set servedModelName instead"),
        ({"args": ["--max-num-seqs=512"]}, "set maxNumSeqs instead"),
        ({"maxModelLen": 10**20}, "maxModelLen: Input should be less than or equal to"),
        ({"startTimeoutSeconds": 10**9}, "startTimeoutSeconds: Input should be less than or equal to 86400"),
        ({"maxNumSeqs": True}, "services[0] (a).maxNumSeqs: true is a boolean, not a number"),
        ({"memoryFraction": "0.5"}, "memoryFraction: '0.5' is text, not a number (a quoted value reaches the program as text)"),
        ({"hcclPortRanges": "yes"}, "hcclPortRanges: 'yes' is not true or false"),
        ({"apiPort": 8080.5}, "apiPort: Input should be a valid integer, got a number with a fractional part"),
    ],
)
def test_service_values_that_docker_or_vllm_would_misread_are_refused(extra, expected):
    assert expected in refused([host()], [service("a", **extra)])


def test_harmless_vllm_arguments_still_pass():
    plan = plan_fleet(fleet([host()], [service("a", args=["--max-num-batched-tokens", "8192", "--enforce-eager"])]))
    assert plan.hosts[0].services[0].service.args == ["--max-num-batched-tokens", "8192", "--enforce-eager"]


def test_two_hosts_on_one_address_or_one_docker_daemon_are_refused():
    message = refused([host("npu-a", address="10.0.0.1"), host("npu-b", address="10.0.0.1")], [service("a")])
    assert "host address '10.0.0.1' is used more than once" in message
    message = refused(
        [host("a", dockerHost="unix:///var/run/docker.sock"), host("b", dockerHost="unix:///var/run/docker.sock")],
        [service("x")],
    )
    assert "dockerHost 'unix:///var/run/docker.sock' is used more than once" in message


@pytest.mark.parametrize("pin", [{"vllmPort": 65530}, {"hcclIfBasePort": 65510}, {"apiPort": 70000}])
def test_a_pinned_window_that_runs_past_port_65535_is_refused(pin):
    message = refused([host()], [service("a", **pin)])
    assert "65535" in message or "65504" in message


def test_a_stack_name_that_would_break_a_comment_is_refused():
    with pytest.raises(ConfigError, match="is not a stack name"):
        fleet([host()], [service("a")], stack="prod\nrm -rf /")


# --- validators anchor the whole string ----------------------------------------------------
# Python's `$` also matches before a final newline, so `re.match("^x$", "x\n")` passes: a block
# scalar (`address: |`) ends in one. The validators written with `re` use fullmatch.


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("address", "npu-a\n"),
        ("address", "npu-a.example.com\n"),
        ("address", "192.0.2.1\n"),
        ("address", "2001:db8::1\n"),
        ("image", "quay.io/ascend/vllm-ascend:v0.20.2rc1\n"),
        ("image", "vllm-ascend\n"),
    ],
)
def test_a_trailing_newline_is_refused_in_an_address_and_an_image(where, value):
    on_host = where == "address"
    message = refused([host(**{where: value})] if on_host else [host()], [service("a", **({} if on_host else {where: value}))])
    assert repr(value) in message, message


def test_a_trailing_newline_is_refused_in_a_stack_name():
    from allocation.config import parse_fleet

    with pytest.raises(ConfigError, match="is not a stack name"):
        parse_fleet("prod\n", {"hosts": [host()], "services": [service("a")]})


def test_a_container_name_with_a_trailing_newline_is_not_a_docker_name():
    from records.card_order import DOCKER_NAME

    assert DOCKER_NAME.fullmatch("qwen") and not DOCKER_NAME.fullmatch("qwen\n")
    assert not DOCKER_NAME.match("qwen\n"), "DOCKER_NAME must anchor with \\Z, so that .match cannot pass it"


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("host", {"user": "root\n"}),
        ("host", {"name": "npu-b\n"}),
        ("host", {"dockerEngine": "20.10\n"}),
        ("host", {"hostKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDk=\n"}),
        ("service", {"name": "qwen\n"}),
        ("service", {"env": {"A\n": "1"}}),
    ],
)
def test_pydantic_patterns_are_rust_regexes_whose_dollar_is_the_end_of_the_text(where, value):
    """pydantic's `pattern=` runs the Rust `regex` crate by default, where `$` without the `m` flag
    matches only at the end of the haystack (docs.rs/regex, "Empty matches": `$` is "end of haystack
    (or end-of-line with multi-line mode)"), not before a final newline as Python's does."""
    hosts, services = [host()], [service("a")]
    if where == "host":
        hosts = [host(**value)]
    else:
        services = [service(**{"name": "a", **value})]
    message = refused(hosts, services)
    assert "should match pattern" in message and repr(next(iter(value)))[1:-1] in message, message
