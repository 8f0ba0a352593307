"""The host requirements (records/host_requirements.py), one table that the host check and `doctor`
both read: what each asks of a host, and that the host check's script stayed byte for byte as it was
before the table."""

from __future__ import annotations

import json

from tests.goldens import HOST_CHECKS, host_checks


def test_every_hosts_check_script_is_byte_identical_to_the_golden_written_before_the_table():
    golden = json.loads(HOST_CHECKS.read_text())
    now = host_checks()
    assert sorted(now) == sorted(golden)
    for name in golden:
        assert now[name] == golden[name], f"{name}: the host check script differs from the golden"
