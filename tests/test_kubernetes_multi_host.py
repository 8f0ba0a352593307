"""A multi-host service on the Kubernetes target: this version renders no LeaderWorkerSet, so every
Kubernetes path refuses the stack in one paragraph naming the service, before any object is written
or applied (views/exports/kubernetes.py `refuse_groups`): the objects, `render --format kubernetes`
(one stream and a folder) and the program under Pulumi's mocks."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pytest

from allocation.errors import ConfigError
from cli.stackfile import StackFile, load_fleet, stack_values
from tests.support.pipeline import deployment_of
from tests.support.pulumi_harness import run_program
from views.exports.kubernetes import manifests

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "Pulumi.deepseek-r1.yaml"
SAID = (
    "stack deepseek-r1: the Kubernetes target does not deploy a service over several hosts: deepseek-r1 over "
    "npu-a, npu-b; qwen3-moe over npu-c, npu-d (dataParallel). Such a service is one LeaderWorkerSet "
    "(kubernetes-sigs/lws, api/leaderworkerset/v1), which this version does not render"
)


def test_the_objects_of_a_stack_with_a_multi_host_service_are_refused_in_one_paragraph_naming_each_service():
    with pytest.raises(ConfigError) as err:
        manifests(deployment_of(load_fleet(None, str(EXAMPLE))[0], "deepseek-r1"))
    assert str(err.value).startswith(SAID) and "\n" not in str(err.value)
    assert "nothing was written or applied" in str(err.value) and "docs/kubernetes.md" in str(err.value)


@pytest.mark.parametrize("output", [False, True])
def test_render_format_kubernetes_refuses_it_and_writes_nothing(cli, tmp_path, output):
    folder = tmp_path / "out"
    result = cli("render", "--config", str(EXAMPLE), "--format", "kubernetes", *(["--output", str(folder)] if output else []))
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(f"error: {SAID}") and result.stderr.count("\n") == 1
    assert not folder.exists()


def test_the_kubernetes_target_refuses_it_as_one_run_error_before_any_resource():
    values = stack_values(StackFile("deepseek-r1", EXAMPLE)) | {"target": "kubernetes"}
    with pytest.raises(pulumi.RunError) as err:
        run_program("deepseek-r1", values)
    assert str(err.value).startswith(SAID) and "\n" not in str(err.value) and err.value.__cause__ is None
