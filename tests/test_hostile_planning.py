"""Planning and pinning on the keys added since the first hardening pass: the exporter port, the
scrape interval, replica pins, `hosts:`, `auto` with replicas, and image versions."""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from allocation.resolved import resolve
from allocation.errors import AllocationError, ConfigError
from allocation.planner import plan_fleet
from cli.pin import pin_stack_file
from cli.stackfile import load_fleet
from tests.support.stacks import fleet, host, service

GIB = 1 << 30
PROFILE = {"weightBytes": 8 * GIB, "numHiddenLayers": 64, "numKeyValueHeads": 8, "headDim": 128}


def ports_of(plan) -> dict[str, dict[str, tuple[int, int]]]:
    return {ps.name: dict(ps.assignment.windows) for _, ps in plan.services()}


def test_the_exporter_port_is_never_handed_out_to_a_service():
    plan = plan_fleet(fleet([host()], [service(f"s{i}", 1, 0.1) for i in range(3)], ports={"apiBase": 8080}))
    api = sorted(w["apiPort"][0] for w in ports_of(plan).values())
    assert api == [8080, 8081, 8083]


def test_a_window_pinned_over_the_exporter_port_is_refused_naming_it():
    with pytest.raises(AllocationError, match=r"apiPort of s 8082 overlaps the NPU exporter's port \(ascend-fleet:metrics.npuExporterPort\)"):
        plan_fleet(fleet([host()], [service("s", 1, 0.1, apiPort=8082)]))
    with pytest.raises(AllocationError, match="hcclIfBasePort of s 8070-8101 overlaps the NPU exporter's port"):
        plan_fleet(fleet([host()], [service("s", 1, 0.1, hcclIfBasePort=8070)]))


def test_a_scrape_interval_the_five_minute_rule_windows_cannot_use_is_refused():
    with pytest.raises(ConfigError, match=r"metrics.scrapeIntervalSeconds: Input should be less than or equal to 75"):
        fleet([host()], [], metrics={"scrapeIntervalSeconds": 3600})
    assert fleet([host()], [], metrics={"scrapeIntervalSeconds": 75}).metrics.scrape_interval_seconds == 75


def test_a_card_listed_twice_in_a_replica_pin_is_refused():
    with pytest.raises(ConfigError, match=r"replicaPins\[0\].devices: .*lists a card twice"):
        fleet([host()], [service("s", 2, 0.1, replicas=2, replicaPins=[{"host": "npu-a", "devices": [0, 0]}])])


def stack_file(tmp_path: Path, services: str, hosts: str = "") -> Path:
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(
        "config:\n  ascend-fleet:hosts:\n    - name: npu-a\n      address: 192.0.2.1\n"
        f"    - name: npu-b\n      address: 192.0.2.2\n{hosts}  ascend-fleet:services:\n{services}"
    )
    return path


def test_pin_narrows_hosts_instead_of_writing_host_beside_it_and_the_next_plan_loads(tmp_path):
    path = stack_file(tmp_path, "    - name: s\n      model: /m/s\n      memoryFraction: 0.5\n      hosts: [npu-a, npu-b]\n")
    pin_stack_file(path, plan_fleet(load_fleet(config=str(path))[0]))
    (entry,) = YAML(typ="safe").load(path.read_text())["config"]["ascend-fleet:services"]
    assert entry["hosts"] == ["npu-a"] and "host" not in entry
    plan_fleet(load_fleet(config=str(path))[0])


def test_pin_of_a_replicated_auto_service_sized_differently_per_host_refuses_instead_of_writing_one_fraction(tmp_path):
    profile = "{weightBytes: 8589934592, numHiddenLayers: 64, numKeyValueHeads: 8, headDim: 128}"
    services = (
        "    - name: s\n      model: /m/s\n      memoryFraction: auto\n      maxModelLen: 32768\n      replicas: 2\n"
        f"      profile: {profile}\n      replicaPins: [{{host: npu-a}}, {{host: npu-b}}]\n"
    )
    path = stack_file(tmp_path, services)
    path.write_text(path.read_text().replace("address: 192.0.2.2\n", "address: 192.0.2.2\n      hbmGiB: 32\n"))
    before = path.read_text()
    plan = plan_fleet(load_fleet(config=str(path))[0])
    fractions = {ps.name: ps.memory_fraction for _, ps in plan.services()}
    assert fractions["s-1"] != fractions["s-2"]
    with pytest.raises(ConfigError, match="chose different fractions for its replicas"):
        pin_stack_file(path, plan)
    assert path.read_text() == before


def test_auto_sizes_for_the_candidate_hosts_only():
    hosts = [host("big"), host("small", hbmGiB=32)]
    svc = service("s", 1, "auto", maxModelLen=32768, profile=PROFILE, hosts=["big"])
    alone = plan_fleet(fleet([host("big")], [service("s", 1, "auto", maxModelLen=32768, profile=PROFILE)]))
    plan = plan_fleet(fleet(hosts, [svc]))
    (ps,) = [ps for _, ps in plan.services()]
    assert ps.memory_fraction == next(p for _, p in alone.services()).memory_fraction


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("quay.io/ascend/vllm-ascend:v0.11.0@sha256:" + "a" * 64, (0, 11)),
        ("quay.io/ascend/vllm-ascend:v0.11.0", (0, 11)),
        ("registry:5000/vllm-ascend@sha256:" + "b" * 64, None),
        ("quay.io/ascend/vllm-ascend:v" + "9" * 100 + ".1", None),
    ],
)
def test_the_version_is_read_from_the_tag_even_when_a_digest_follows_and_huge_components_are_unknown(image, version):
    config = fleet([host()], [service("s", 1, 0.5, image=image)])
    assert resolve(config.services[0], config.defaults).vllm_ascend_version == version


def test_a_configured_version_with_huge_or_non_ascii_components_is_one_config_error():
    for text in ["0." + "1" * 5000, "0.1²"]:
        with pytest.raises(ConfigError, match="vllmAscendVersion"):
            fleet([host()], [service("s", 1, 0.5, vllmAscendVersion=text)])


def test_auto_that_fits_nowhere_is_one_problem_not_a_second_about_the_budget():
    svc = service("s", 1, "auto", maxModelLen=100_000_000, maxNumSeqs=1000, profile=PROFILE)
    with pytest.raises(AllocationError) as err:
        plan_fleet(fleet([host()], [svc, service("t", 1, 0.5)]))
    text = str(err.value)
    assert "no memoryFraction within the per-card budget" in text
    assert text.count("service s") == 1, text


def test_auto_in_capitals_says_to_write_it_in_lowercase():
    with pytest.raises(ConfigError, match="'AUTO': write auto in lowercase"):
        fleet([host()], [service("s", 1, "AUTO", maxModelLen=4096, profile=PROFILE)])
