"""Fixtures of the real-API-server lane (`make test-kube`): etcd and kube-apiserver built by
scripts/build-k8s-tools.sh into $ASCEND_FLEET_K8S_TOOLS (default /opt/k8s/bin).

Without them (or without `openssl`) every test here is skipped with the reason; with
ASCEND_FLEET_REQUIRE_KUBE=1 it fails instead, as ASCEND_FLEET_REQUIRE_ENGINE=1 does for
tests/engine. `make test` does not collect this folder (pytest.ini).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube import cluster as kube
from tests.kube import mindcluster
from tests.support import lws

REQUIRE_ENV = "ASCEND_FLEET_REQUIRE_KUBE"
TOOLS_ENV = "ASCEND_FLEET_K8S_TOOLS"
BUILD = "scripts/build-k8s-tools.sh"


def tools_dir() -> Path:
    return Path(os.environ.get(TOOLS_ENV) or "/opt/k8s/bin")


def unavailable(message: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(message)


def pytest_report_header(config) -> list[str]:
    versions = tools_dir() / "versions.txt"
    lines = versions.read_text().splitlines() if versions.is_file() else [f"no {versions}: run {BUILD}"]
    return [f"kube lane tools ({tools_dir()}):", *(f"  {line}" for line in lines)]


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kube.Cluster]:
    """etcd and kube-apiserver on loopback for the whole session, with MindCluster's DeviceClass."""
    tools = tools_dir()
    missing = [f"{tools / name}" for name in ("etcd", "kube-apiserver") if not os.access(tools / name, os.X_OK)]
    if not shutil.which("openssl"):
        missing.append("openssl on PATH")
    if missing:
        unavailable(f"the real-API-server lane needs {', '.join(missing)} (build them with {BUILD})")
    running = kube.start(tools, tmp_path_factory.mktemp("kube"))
    try:
        running.client.apply(mindcluster.device_class(), dry_run=False)
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def publish(cluster: kube.Cluster):
    """publish(hosts): the Node and the ResourceSlice MindCluster's driver would register for each host."""

    def _publish(hosts: dict[str, int]) -> None:
        for name, cards in hosts.items():
            cluster.client.apply(mindcluster.node(name), dry_run=False)
            cluster.client.apply(mindcluster.resource_slice(name, cards), dry_run=False)

    return _publish


@pytest.fixture(scope="session")
def lws_crd(cluster: kube.Cluster) -> dict:
    """LeaderWorkerSet's CRD (scripts/fetch-lws-crd.sh), installed and Established: the API server then serves
    leaderworkerset.x-k8s.io/v1 and validates each object against the CRD's schema. No LWS controller runs."""
    crd = lws.crd(lws.crd_path(unavailable))
    cluster.client.apply(crd, dry_run=False)
    return kube.wait_established(cluster.client, crd)
