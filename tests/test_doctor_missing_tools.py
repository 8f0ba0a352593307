"""`doctor` on a host without npu-smi or the Ascend driver: the real cause comes first, and no finding
gives advice that needs them (stop the containers and run `pulumi up` cannot switch a card that
npu-smi cannot reach). The facts are what `gather_script` prints on such a host, parsed for real."""

from __future__ import annotations

import dataclasses

from ops.doctor.facts import parse_facts
from ops.doctor.findings import host_findings
from records.containers import CONTROL_DEVICES, DRIVER_DIR, NPU_SMI
from tests.support.pipeline import deployment_of
from tests.support.doctor import clean_facts, gathered, make_fleet

NOT_FOUND = "sh: 1: npu-smi: not found"
BARE = (DRIVER_DIR, NPU_SMI, *CONTROL_DEVICES, *(f"/dev/davinci{c}" for c in range(8)))


def bare_host(missing=BARE, rc="127", said=NOT_FOUND):
    """A host whose npu-smi exits `rc`, as the gather script frames it, and lacks the paths `missing`."""
    text = gathered(
        ("docker-inspect", "", "[]"), ("ss", "", ""),
        ("npu-smi", "", said), ("npu-smi-rc", "", rc), ("npu-topo", "", said), ("npu-topo-rc", "", rc),
        ("device-share", "0", said), ("missing", "", "\n".join(missing)),
    )  # fmt: skip
    return parse_facts(text)


def test_npu_smi_not_found_by_the_shell_is_read_as_absent_and_a_failing_one_is_not():
    assert bare_host().npu_smi_missing
    assert not bare_host(rc="255", said="dcmi module initialize failed. ret is -8005").npu_smi_missing


def test_a_host_without_the_driver_and_npu_smi_says_so_first_and_what_doctor_could_not_check():
    plan = deployment_of(make_fleet())
    found = host_findings(plan.hosts[0], bare_host())
    first = found[0]
    assert first.kind == "host", [f.message for f in found]
    assert first.message.startswith(
        f"host npu-a lacks the Ascend driver (no {DRIVER_DIR}) and npu-smi (npu-smi info exited 127: {NOT_FOUND}): "
        "install or repair"
    ), first.message
    assert "the device-share mode of card 0" in first.message and "gamma" in first.message


def test_no_finding_on_such_a_host_says_to_run_pulumi_up_or_repeats_npu_smis_failure():
    plan = deployment_of(make_fleet())
    found = host_findings(plan.hosts[0], bare_host())
    assert "sharing" not in [f.kind for f in found]
    assert not [f.message for f in found if "pulumi up" in f.message]
    assert sum(NOT_FOUND in f.message for f in found) == 1


def test_npu_smi_alone_missing_names_only_npu_smi():
    plan = deployment_of(make_fleet())
    found = host_findings(plan.hosts[0], bare_host(missing=(NPU_SMI,)))
    assert found[0].message.startswith(f"host npu-a lacks npu-smi (npu-smi info exited 127: {NOT_FOUND}): ")


def test_a_driver_folder_missing_while_npu_smi_answers_is_only_the_missing_path():
    plan = deployment_of(make_fleet())
    facts = dataclasses.replace(clean_facts(plan), missing=frozenset({DRIVER_DIR}))
    assert [f.message for f in host_findings(plan.hosts[0], facts)] == [
        f"host npu-a: missing Ascend driver folder {DRIVER_DIR}"
    ]


def test_a_driver_folder_missing_and_npu_smi_failing_names_the_driver():
    plan = deployment_of(make_fleet())
    found = host_findings(plan.hosts[0], bare_host(missing=(DRIVER_DIR,), rc="9", said="libdrvdsmi_host.so: cannot open"))
    assert found[0].message.startswith(f"host npu-a lacks the Ascend driver (no {DRIVER_DIR}; npu-smi info exited 9: ")
    assert "sharing" not in [f.kind for f in found]
