"""Suite-wide rules (in CI, ASCEND_FLEET_REQUIRE_SIMHOST=1, a skipped test is a failure) and the `cli` fixture."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import pytest

from cli.main import main

REQUIRED = os.environ.get("ASCEND_FLEET_REQUIRE_SIMHOST") == "1"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if REQUIRED and skipped and exitstatus == 0:
        if reporter:
            reporter.write_line(f"error: {skipped} test(s) skipped, but CI requires every test to run", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def require_binary(name: str, package: str) -> str:
    """The path of a program the test needs: skipped without it, but failed when CI requires every test."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (apt-get install {package}; .ci/run does)"
        if REQUIRED:
            pytest.fail(f"{message} and ASCEND_FLEET_REQUIRE_SIMHOST=1", pytrace=False)
        pytest.skip(message)
    return path


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys):
    """`python -m allocation ARGS`, in this process."""

    def run(*args: str) -> Result:
        code = main(list(args))
        out = capsys.readouterr()
        return Result(code, out.out, out.err)

    return run
