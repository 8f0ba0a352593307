"""sim/exporter.py without a simulated host: which capabilities this machine lacks, and how the
exporter's planned `docker run` arguments change where `--privileged` cannot run (only that flag)."""

from __future__ import annotations

from sim.exporter import GRANTABLE, as_this_daemon_allows, missing_capabilities

FULL = "CapInh:\t0000000000000000\nCapBnd:\t000001ffffffffff\n"
NO_SYS_RESOURCE = "CapInh:\t0000000000000000\nCapBnd:\t000001fffeffffff\n"


def test_the_capabilities_missing_from_the_bounding_set_are_named():
    assert missing_capabilities(FULL) == []
    assert missing_capabilities(NO_SYS_RESOURCE) == ["SYS_RESOURCE"]


def test_where_privileged_containers_run_the_planned_arguments_are_kept_as_they_are():
    args = ["-d", "--name", "x", "--privileged", "--", "image"]
    assert as_this_daemon_allows(args, True) == args


def test_elsewhere_only_privileged_is_replaced_by_what_the_daemon_can_grant(monkeypatch):
    monkeypatch.setattr("sim.exporter.missing_capabilities", lambda: ["SYS_RESOURCE"])
    args = ["-d", "--name", "x", "--privileged", "--", "image"]
    assert as_this_daemon_allows(args, False) == ["-d", "--name", "x", *GRANTABLE, "--cap-drop=SYS_RESOURCE", "--", "image"]
    assert as_this_daemon_allows(["-d", "--", "image"], False) == ["-d", "--", "image"]
