"""A second run would change nothing: the mock-level stand-in for `pulumi preview --expect-no-changes`.

Every container the program registers is turned into provider state by the
read-back model of `tests/support/provider_readback.py` (each rule cites the provider
source), and the next run's inputs must equal that state.
"""

from __future__ import annotations

import copy

import pytest

from records.durations import go_duration
from tests.support.provider_readback import differences, go_seconds, stored, stored_after_stop
from tests.support.pulumi_harness import CONTAINER, REMOTE_IMAGE
from tests.support.stacks import STACKS, stack_run, stack_params

DAEMON_DEFAULT = {"log-driver": "json-file", "log-opts": {"max-size": "10m"}}


@pytest.mark.parametrize(
    ("seconds", "text"), [(30, "30s"), (10, "10s"), (120, "2m0s"), (1800, "30m0s"), (3600, "1h0m0s"), (5400, "1h30m0s"), (0, "0s")]
)
def test_durations_are_written_as_go_prints_them(seconds, text):
    assert go_duration(seconds) == text
    assert go_seconds(text) == seconds


@stack_params
def test_a_second_run_changes_nothing_once_the_provider_has_read_every_container_back(stack):
    containers = stack_run(stack).of_type(CONTAINER)
    assert containers
    for container in containers:
        assert differences(container.inputs, stored(container.inputs, DAEMON_DEFAULT)) == [], container.name


def test_a_health_check_written_in_plain_seconds_would_change_on_every_refresh():
    inputs = copy.deepcopy(stack_run("prod").of_type(CONTAINER)[0].inputs)
    inputs["healthcheck"]["startPeriod"] = "1800s"
    assert differences(inputs, stored(inputs, DAEMON_DEFAULT)) == ["healthcheck"]


def test_a_port_without_an_ip_would_come_back_twice_on_a_dual_stack_daemon():
    inputs = copy.deepcopy(stack_run("prod").of_type(CONTAINER)[0].inputs)
    del inputs["ports"][0]["ip"]
    assert differences(inputs, stored(inputs, DAEMON_DEFAULT)) == ["ports"]


def test_daemon_log_options_the_program_does_not_set_would_replace_the_container():
    """Why the host check refuses a daemon.json whose log-opts go beyond the containers' own."""
    inputs = stack_run("prod").of_type(CONTAINER)[0].inputs
    daemon = {"log-opts": {"max-size": "10m", "compress": "true"}}
    assert differences(inputs, stored(inputs, daemon)) == ["logOpts"]


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_containers_and_images_carry_timeouts_beyond_the_providers_twenty_minutes(stack):
    run = stack_run(stack)
    for container in run.of_type(CONTAINER):
        timeouts = container.custom_timeouts
        wait = int(container.inputs["waitTimeout"])
        assert go_seconds(timeouts["create"]) >= wait + 300, container.name
        assert go_seconds(timeouts["update"]) == go_seconds(timeouts["create"])
        assert go_seconds(timeouts["delete"]) >= int(container.inputs["destroyGraceSeconds"])
        assert "healthcheck" in container.replace_on_changes
    for image in run.of_type(REMOTE_IMAGE):
        assert go_seconds(image.custom_timeouts["create"]) == 60 * 60, image.name


def test_a_27b_model_that_loads_in_25_minutes_is_not_cut_off_at_20():
    from tests.support.stacks import values_of
    from tests.support.pulumi_harness import run_program

    values = values_of("prod")
    values["defaults"] = {**values.get("defaults", {}), "startTimeoutSeconds": 1800}
    for container in run_program("prod", values).of_type(CONTAINER):
        assert go_seconds(container.custom_timeouts["create"]) > 25 * 60 > 20 * 60


def test_a_container_stopped_by_hand_reads_back_without_ports_and_is_re_created_by_the_next_up():
    """Found by tests/engine: `pulumi refresh` after `docker stop` stores must_run false and no ports;
    ports re-create a container, so `pulumi up` replaces it rather than starting it."""
    inputs = stack_run("prod").of_type(CONTAINER)[0].inputs
    assert differences(inputs, stored_after_stop(inputs, DAEMON_DEFAULT)) == ["mustRun", "ports"]
