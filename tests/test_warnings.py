"""The suite turns a deprecation warning the project's own code causes into an error (pytest.ini
`filterwarnings`), and leaves the ones libraries raise while importing themselves to docs/testing.md."""

from __future__ import annotations

import warnings

import pytest

PROJECT_MODULES = ["allocation.config", "records.deployment", "views.report", "views.exports.dashboard", "cli.main",
                   "ops.doctor", "components.ascend_host", "sim.host", "tests.test_warnings", "__main__"]  # fmt: skip


def _warn_as(module: str, category: type[Warning]) -> None:
    """A warning attributed to `module`, as a call from that module's code would be."""
    exec("warnings.warn('old API', category)", {"__name__": module, "warnings": warnings, "category": category})


@pytest.mark.parametrize("module", PROJECT_MODULES)
@pytest.mark.parametrize("category", [DeprecationWarning, PendingDeprecationWarning, FutureWarning])
def test_a_deprecation_the_projects_code_causes_fails_the_test(module, category):
    with pytest.raises(category, match="old API"):
        _warn_as(module, category)


@pytest.mark.parametrize("module", ["grafana_foundation_sdk.builders.dashboard", "pulumi_command.remote.copy_file",
                                    "allocationist", "opsx.y"])  # fmt: skip
def test_a_deprecation_a_library_raises_about_itself_is_only_a_warning(module):
    with pytest.warns(DeprecationWarning, match="old API"):
        _warn_as(module, DeprecationWarning)
