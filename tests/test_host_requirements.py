"""The host requirements (records/host_requirements.py), one table that the host check and `doctor`
both read: what each asks of a host, in the same words, and that the host check's script stayed byte
for byte as it was before the table."""

from __future__ import annotations

import json
import os
import subprocess

from ops.doctor.facts import HostFacts
from ops.doctor.findings import host_findings
from ops.doctor.gather import missing_paths
from records.containers import DRIVER_MOUNTS
from records.host_check import host_check_script
from records.host_requirements import Requirement, cards_of, requirements
from tests.support.stacks import fleet, host, service
from tests.goldens import HOST_CHECKS, fleets, host_checks
from tests.support.pipeline import deployment_of


def test_every_hosts_check_script_is_byte_identical_to_the_golden_written_before_the_table():
    golden = json.loads(HOST_CHECKS.read_text())
    now = host_checks()
    assert sorted(now) == sorted(golden)
    for name in golden:
        assert now[name] == golden[name], f"{name}: the host check script differs from the golden"


def test_every_device_file_a_container_gets_is_a_requirement_of_the_cards_it_uses():
    """So the host check, which asks the table for the cards of its containers, asks for all of them."""
    for name, config in fleets().items():
        for sd in deployment_of(config).services():
            files = set(sd.spec.device_files)
            assert files <= {r.path for r in requirements(cards_of(files))}, f"{name}: {sd.name}"


def one_host():
    """One host of 8 cards whose services use cards 0, 2 and 3; the others are nobody's."""
    config = fleet([host("npu-a")], [service("alpha", 1, 0.4, devices=[0]), service("gamma", 2, 0.5, devices=[2, 3])])
    return deployment_of(config).hosts[0]


def test_the_host_check_and_doctor_name_every_path_a_container_gets_from_the_host_in_the_same_words(tmp_path):
    """What is needed comes from the container specs, not from the table, so a row dropped from the
    table shows here. The host check runs for real, on an empty stand-in root."""
    hd = one_host()
    needed = {p for sd in hd.services for p in sd.spec.device_files} | set(DRIVER_MOUNTS)
    root = str(tmp_path)
    script = host_check_script(hd.host, [(sd.plan, sd.spec) for sd in hd.services], root=root)
    said = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30).stderr.splitlines()
    # `  - missing device ROOT/dev/davinci0 (used by alpha)` -> `missing device /dev/davinci0`
    checked = {line.removeprefix("  - ").replace(root, "", 1).split(" (")[0] for line in said if line.startswith("  - missing ")}

    found = host_findings(hd, HostFacts(missing=frozenset(needed)))
    judged = {f.message.removeprefix("host npu-a: ") for f in found if f.kind == "host"}

    for path in needed:
        assert any(text.endswith(f" {path}") for text in judged), f"doctor does not name {path}"
    assert {t for t in checked if t.split()[-1] in needed} == judged


def test_doctor_asks_for_every_configured_card_and_the_host_check_only_for_the_cards_in_use():
    hd = one_host()
    unused = "/dev/davinci5"
    assert unused not in hd.check_script and "/dev/davinci3" in hd.check_script
    found = host_findings(hd, HostFacts(missing=frozenset({unused})))
    assert [f.message for f in found if f.kind == "host"] == [f"host npu-a: missing device {unused}"]


def test_the_gather_section_prints_exactly_the_required_paths_the_host_lacks(tmp_path):
    folder, file = tmp_path / "folder", tmp_path / "file"
    folder.mkdir()
    file.write_text("")
    rows = (
        *requirements(range(2)),
        Requirement(str(folder), True, "folder"),
        Requirement(str(file), False, "file"),
        Requirement(str(file), True, "file that must be a folder"),
        Requirement(str(tmp_path / "it's gone"), False, "gone"),
    )
    out = subprocess.run(["sh", "-c", missing_paths(rows)], capture_output=True, text=True, timeout=30)
    lacking = {r.path for r in rows if not (os.path.isdir(r.path) if r.directory else os.path.exists(r.path))}
    assert str(tmp_path / "it's gone") in lacking and str(folder) not in lacking
    assert set(out.stdout.splitlines()) == lacking and out.returncode == 0
