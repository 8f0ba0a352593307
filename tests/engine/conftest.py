"""Fixtures of the real-engine suite: the tools it needs and the simulated host it deploys to.

Without the Pulumi CLI, the Python language host, the docker and command resource plugins,
or the simulated host's prerequisites (root, sshd, dockerd, busybox), every test here is
skipped with the reason; with ASCEND_FLEET_REQUIRE_ENGINE=1 it fails instead, as
ASCEND_FLEET_REQUIRE_SIMHOST=1 does for tests/simhost. `make test` does not collect this
folder (pytest.ini); `make test-engine` runs it. The registry of the pull test
(tests/engine/registry.py) is a tool of the suite like the others, but not one whose absence
skips: where the engine and the simulated host are, a missing registry fails that test, naming
its Debian package.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.host import SimHost, SimHostUnavailable, unavailable_reason
from tests.engine import registry as registries
from tests.engine.engine import installed_plugins, missing_tools

REQUIRE_ENV = "ASCEND_FLEET_REQUIRE_ENGINE"


def _unavailable(message: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def engine_env() -> dict[str, str]:
    """The environment the pulumi commands start from, once the tools are known to be there."""
    pulumi = shutil.which("pulumi")
    missing = missing_tools(pulumi, installed_plugins(pulumi) if pulumi else [])
    if missing:
        _unavailable("the real-engine suite needs " + "; ".join(missing))
    return dict(os.environ)


@pytest.fixture(scope="session")
def engine_host(engine_env, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimHost]:
    """A running simulated 910B host (sim/host.py) for the whole session."""
    reason = unavailable_reason()
    if reason:
        _unavailable(f"simulated 910B host unavailable: {reason}")
    # The other simulated-host suites on this machine hold the host for minutes at a time.
    host = SimHost(tmp_path_factory.mktemp("simhost"), lock_timeout=3600)
    try:
        host.start()
    except SimHostUnavailable as err:
        _unavailable(f"simulated 910B host unavailable: {err}")
    try:
        yield host
    finally:
        host.stop()


@pytest.fixture
def registry(engine_host, tmp_path: Path) -> Iterator[registries.LocalRegistry]:
    """An image registry on loopback (tests/engine/registry.py), stopped after the test."""
    missing = registries.missing()
    if missing:
        pytest.fail(f"the real-engine suite needs an image registry: {missing}", pytrace=False)
    registry = registries.LocalRegistry(tmp_path)
    try:
        registry.start()
        yield registry
    finally:
        registry.stop()
