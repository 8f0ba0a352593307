"""Suite-wide rules: in CI (ASCEND_FLEET_REQUIRE_SIMHOST=1) a skipped test is a failure."""

from __future__ import annotations

import os

import pytest

REQUIRED = os.environ.get("ASCEND_FLEET_REQUIRE_SIMHOST") == "1"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if REQUIRED and skipped and exitstatus == 0:
        if reporter:
            reporter.write_line(f"error: {skipped} test(s) skipped, but CI requires every test to run", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
