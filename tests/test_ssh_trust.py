"""One SSH trust policy: the docker provider, `doctor` and the host check trust the same key, with one credential."""

from __future__ import annotations

import copy
import json

import pulumi
import pytest

from tests.support.pulumi_harness import PROVIDER, REMOTE_COMMAND, TEST_HOST_KEY, run_program, unwrap
from tests.support.stacks import values_of

PINNED = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBj4dVx0qkO9pLWQ0oAh0fb3m3d7JMhmE8VY1sYVc8mN npu-a"


def prod_with(**host: object) -> dict:
    values = copy.deepcopy(values_of("prod"))
    values["hosts"][0].update(host)
    return values


def test_a_configured_host_key_is_the_one_the_host_check_and_the_docker_provider_trust():
    run = run_program("prod", prod_with(hostKey=PINNED), known_hosts="")
    check = run.by_name(REMOTE_COMMAND)["npu-a-check"]
    assert unwrap(check.inputs["connection"])["hostKey"] == PINNED
    [provider] = run.of_type(PROVIDER)
    opts = json.loads(provider.inputs["sshOpts"])  # provider config travels as JSON text
    type_and_key = " ".join(PINNED.split()[:2])
    assert f"KnownHostsCommand=/bin/echo %H {type_and_key}" in opts
    assert "UserKnownHostsFile=/dev/null" in opts and "StrictHostKeyChecking=yes" in opts


def test_without_a_configured_key_the_host_check_trusts_the_known_hosts_entry_the_system_ssh_reads():
    run = run_program("prod", values_of("prod"))  # the harness's ~/.ssh/known_hosts names every host
    check = run.by_name(REMOTE_COMMAND)["npu-a-check"]
    assert unwrap(check.inputs["connection"])["hostKey"] == TEST_HOST_KEY
    [provider] = run.of_type(PROVIDER)
    assert not any("KnownHostsCommand" in o for o in json.loads(provider.inputs["sshOpts"])), "ssh reads that file"


def test_strict_checking_with_no_known_key_stops_the_program_naming_the_host():
    with pytest.raises(pulumi.RunError, match=r"no SSH host key known for host\(s\) npu-a .*hostKey"):
        run_program("prod", values_of("prod"), known_hosts="")


def test_accept_new_lets_the_program_run_and_the_host_check_then_trusts_any_key():
    values = values_of("prod")
    values["ssh"] = {**values["ssh"], "strictHostKeyChecking": "accept-new"}
    check = run_program("prod", values, known_hosts="").by_name(REMOTE_COMMAND)["npu-a-check"]
    assert "hostKey" not in unwrap(check.inputs["connection"])


def test_an_identity_file_is_the_host_checks_key_too_when_no_secret_is_set(tmp_path):
    key = tmp_path / "id_ed25519"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nZmlsZS1rZXk=\n-----END OPENSSH PRIVATE KEY-----\n")
    values = values_of("prod")
    values["ssh"] = {**values["ssh"], "identityFile": str(key)}
    run = run_program("prod", values, private_key=None)
    check = run.by_name(REMOTE_COMMAND)["npu-a-check"]
    connection = check.inputs["connection"]
    assert unwrap(connection)["privateKey"] == key.read_text()
    [provider] = run.of_type(PROVIDER)
    assert json.loads(provider.inputs["sshOpts"])[-2:] == ["-i", str(key)], "the system ssh uses the same file"


def test_a_user_that_ssh_would_read_as_an_option_is_refused_before_anything_registers():
    with pytest.raises(pulumi.RunError, match=r"hosts\[0\] \(npu-a\)\.user"):
        run_program("prod", prod_with(user="-V"))
