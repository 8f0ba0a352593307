"""Fixtures for tests against the simulated 910B host (sim/host.py).

`sim_host` gives a running `SimHost` (sshd on loopback, its own dockerd, Ascend device files,
the npu-sim image) shared by the session and reset to idle after every test: test
containers removed, NPU port claims and fault marks cleared, models deleted.

Without root, docker, sshd or busybox the tests are skipped with the reason; with
ASCEND_FLEET_REQUIRE_SIMHOST=1 (as CI sets) they fail instead.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from records import card_order  # noqa: E402
from records.device_share import BOOT_SCRIPT, UNIT_PATH  # noqa: E402
from sim.host import SimHost, SimHostUnavailable, unavailable_reason  # noqa: E402

REQUIRE_ENV = "ASCEND_FLEET_REQUIRE_SIMHOST"


def _not_available(reason: str) -> None:
    message = f"simulated 910B host unavailable: {reason}"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def sim_host_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimHost]:
    reason = unavailable_reason()
    if reason:
        _not_available(reason)
    host = SimHost(tmp_path_factory.mktemp("simhost"))
    try:
        host.start()
    except SimHostUnavailable as err:
        _not_available(str(err))
    try:
        yield host
    finally:
        host.stop()


@pytest.fixture
def sim_host(sim_host_session: SimHost) -> Iterator[SimHost]:
    try:
        yield sim_host_session
    finally:
        sim_host_session.reset()


@pytest.fixture
def boot_files():
    """`render`'s device-share and start-order steps install boot units on this machine (the
    simulated host): remove what they created."""
    paths = (BOOT_SCRIPT, UNIT_PATH, card_order.BOOT_SCRIPT, card_order.UNIT_PATH)
    made = [Path(p) for p in paths if not Path(p).exists()]
    yield
    for path in made:
        path.unlink(missing_ok=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test in this folder is a `simhost` test, so `-m "not simhost"` leaves them all out."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.simhost)
