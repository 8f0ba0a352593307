"""The real Pulumi engine and pulumi-kubernetes' provider apply each stack's objects to the lane's API
server; a second preview then finds nothing to change.

An Automation API inline program (`pulumi.automation.create_or_select_stack(..., program=fn)`): the
Python SDK serves the language runtime in-process, so no `pulumi-language-python` is needed
(/work/shared/DOMAIN.md, Kubernetes). The provider is the `pulumi-resource-kubernetes` that
scripts/build-k8s-tools.sh builds, found on PATH as an ambient plugin; the backend is a local folder.
`yaml.v2.ConfigGroup(objs=...)` takes the objects as they are, including `resource.k8s.io/v1` kinds
that pulumi-kubernetes 4.25 has no typed classes for; `skip_await` because no controller or kubelet
ever rolls a Deployment out or fills a Service's endpoints here.
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.kube.conftest import BUILD, tools_dir, unavailable
from tests.kube.objects import FIXTURE_HOSTS, fixture, hosts, rendered, renderer_present

PASSPHRASE = "ascend-fleet kube lane"


@pytest.fixture(scope="module")
def engine_path() -> str:
    """PATH with the tools folder first, once the CLI, the provider and the SDK are known to be there."""
    path = f"{tools_dir()}{os.pathsep}{os.environ.get('PATH', '')}"
    missing = [] if shutil.which("pulumi", path=path) else ["the pulumi CLI on PATH"]
    if not os.access(tools_dir() / "pulumi-resource-kubernetes", os.X_OK):
        missing.append(f"{tools_dir() / 'pulumi-resource-kubernetes'} (build it with {BUILD})")
    try:
        import pulumi_kubernetes  # noqa: F401
    except ImportError:
        missing.append("the pulumi-kubernetes Python SDK")
    if missing:
        unavailable("the Pulumi part of the kube lane needs " + "; ".join(missing))
    return path


def program(kubeconfig: str, objects: list[dict]):
    def run() -> None:
        import pulumi
        import pulumi_kubernetes as k8s

        provider = k8s.Provider("lane", kubeconfig=kubeconfig)
        k8s.yaml.v2.ConfigGroup(
            "objects", objs=objects, skip_await=True, opts=pulumi.ResourceOptions(provider=provider)
        )

    return run


def up_then_preview(cluster, tmp_path, monkeypatch, engine_path: str, name: str, objects: list[dict]) -> None:
    from pulumi import automation as auto

    monkeypatch.setenv("PATH", engine_path)
    backend = tmp_path / "backend"
    backend.mkdir()
    workspace = auto.LocalWorkspaceOptions(
        work_dir=str(tmp_path),
        pulumi_home=str(tmp_path / "home"),
        env_vars={"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE, "PULUMI_SKIP_UPDATE_CHECK": "true"},
        project_settings=auto.ProjectSettings(
            name="kube-lane", runtime="python", backend=auto.ProjectBackend(url=backend.as_uri())
        ),
    )
    stack = auto.create_or_select_stack(
        stack_name=name, project_name="kube-lane", program=program(cluster.kubeconfig.read_text(), objects),
        opts=workspace,
    )  # fmt: skip
    up = stack.up(on_output=lambda _: None)
    assert up.summary.result == "succeeded", up.stdout
    assert up.summary.resource_changes.get("create", 0) >= len(objects), up.summary.resource_changes
    again = stack.preview(on_output=lambda _: None)
    assert set(again.change_summary) == {"same"}, again.stdout


def test_pulumi_up_applies_the_stand_in_objects_and_a_second_preview_changes_nothing(
    engine_path, cluster, publish, tmp_path, monkeypatch
):
    publish(FIXTURE_HOSTS)
    objects = cluster.client.into_namespace(fixture(), "pulumi-fixture")
    up_then_preview(cluster, tmp_path, monkeypatch, engine_path, "fixture", objects)


@pytest.mark.parametrize("stack", ["prod", "staging"])
def test_pulumi_up_applies_a_committed_stack_and_a_second_preview_changes_nothing(
    engine_path, cluster, publish, tmp_path, monkeypatch, stack
):
    if not renderer_present():
        pytest.skip("no views/exports/kubernetes.py on this branch: the stand-in fixture.yaml is applied instead")
    publish(hosts(stack))
    objects = cluster.client.into_namespace(rendered(stack), f"pulumi-{stack}")
    up_then_preview(cluster, tmp_path, monkeypatch, engine_path, stack, objects)
