"""Suite-wide rules (in CI, ASCEND_FLEET_REQUIRE_SIMHOST=1, a skipped test is a failure; the same with
ASCEND_FLEET_REQUIRE_ENGINE=1 for `make test-engine`), the `cli` fixture and helpers more than one test
module uses."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import pytest

from records.containers import ContainerSpec
from cli.main import main
from ops.doctor.facts import LiveContainer, LiveHealth
from tests.scheduling import SuiteScheduling

REQUIRED = os.environ.get("ASCEND_FLEET_REQUIRE_SIMHOST") == "1"
# Every skip fails the run under either variable (the engine suite's own fixtures fail instead of skipping).
SKIPS_FAIL = REQUIRED or os.environ.get("ASCEND_FLEET_REQUIRE_ENGINE") == "1"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if SKIPS_FAIL and skipped and exitstatus == 0:
        if reporter:
            reporter.write_line(f"error: {skipped} test(s) skipped, but CI requires every test to run", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`make test`'s `--dist loadscope`, with the simulated-host tests as one scope and the waiting
    scopes first (tests/scheduling.py)."""
    if config.getvalue("dist") != "loadscope":
        return None
    return SuiteScheduling(config, log)


CI_TOOLS = os.environ.get("ASCEND_FLEET_CI_TOOLS") or "/opt/ci-tools/bin"
"""Where scripts/build-ci-tools.sh builds the tools no Debian package has (actionlint)."""


def require_binary(name: str, package: str, build: str | None = None, where: str | None = None) -> str:
    """The path of a program the test needs (on PATH, or in the folder `where`): skipped without it, but
    failed when CI requires every test. `build`: the script that builds it, when no package has it."""
    path = shutil.which(name) or (shutil.which(name, path=where) if where else None)
    if path is None:
        how = f"{build} builds it into {where}" if build else f"apt-get install {package}"
        message = f"{name} is not installed ({how}; .ci/run does)"
        if REQUIRED:
            pytest.fail(f"{message} and ASCEND_FLEET_REQUIRE_SIMHOST=1", pytrace=False)
        pytest.skip(message)
    return path


def live_container(spec: ContainerSpec, status: str = "running") -> LiveContainer:
    """What `doctor` would read of a container created exactly from `spec`."""
    return LiveContainer(
        id=f"{spec.name}-id", name=spec.name, image=spec.image, status=status, health="healthy", exit_code=0, pid=10,
        env=dict(spec.env), labels=dict(spec.labels), device_files=frozenset(spec.device_files),
        privileged=spec.privileged, init=spec.init, ipc_mode=spec.ipc_mode, sysctls=dict(spec.sysctls), log_opts=dict(spec.log_opts),
        published=frozenset((p, p) for p in spec.ports), command=tuple(spec.command),
        mounts=frozenset((m.source, m.target, m.read_only) for m in spec.mounts), restart=spec.restart,
        shm_size_bytes=spec.shm_size_mib * 1024 * 1024, log_driver=spec.log_driver, network_mode=spec.network_mode or "bridge",
        stop_timeout_seconds=spec.stop_grace_seconds, healthcheck=LiveHealth(
            spec.healthcheck.test, spec.healthcheck.interval_seconds * 10**9, spec.healthcheck.timeout_seconds * 10**9,
            spec.healthcheck.start_period_seconds * 10**9, spec.healthcheck.retries,
            (spec.healthcheck.start_interval_seconds or 0) * 10**9,
        ),
    )  # fmt: skip


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
