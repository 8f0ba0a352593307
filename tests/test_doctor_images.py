"""doctor judges a container's image by the ID the plan's image name has on the host.

The program creates its containers by image ID (components/model_service.py), and the docker
provider keeps that ID as the container's `Config.Image`; the plan names the image. The gather
script asks the host which ID each planned name has (`docker image inspect`), and the judge
compares IDs (ops/doctor/drift.py `_image`). The live containers here are built the provider's
way (tests/support/doctor.py `inspect_of`)."""

from __future__ import annotations

import dataclasses
import subprocess

import pytest

import ops.doctor as doctor
from ops.doctor.facts import parse_facts
from ops.doctor.findings import required
from ops.doctor.gather import gather_script
from ops.ssh import RemoteResult
from tests.support.doctor import clean_facts, findings, gathered, image_id, inspect_of, make_fleet, with_container
from tests.support.pipeline import deployment_of

OLD = image_id("quay.io/ascend/vllm-ascend:v0.9.0")


@pytest.fixture
def plan():
    return deployment_of(make_fleet())


def spec_of(plan, name):
    return next(sd.spec for sd in plan.services() if sd.name == name)


def test_containers_the_provider_created_by_the_planned_images_id_are_not_drift(plan):
    facts = clean_facts(plan)
    assert {c.image for c in facts.containers} == {image_id(spec_of(plan, "alpha").image)}
    assert findings(plan, facts) == []


def test_a_container_created_by_another_image_id_is_drift_showing_the_planned_name_with_its_id_and_the_live_id(plan):
    spec = spec_of(plan, "alpha")
    facts = with_container(clean_facts(plan), inspect_of(spec, cid="alpha-id", pid=1000, image=OLD))
    [found] = findings(plan, facts)
    assert (found.kind, found.service, found.key) == ("drift", "alpha", "image")
    assert found.message == f"container alpha: image: {spec.image} = {image_id(spec.image)} (plan) != {OLD} (live)"


def test_a_container_created_by_the_planned_name_is_judged_by_the_id_it_runs(plan):
    """`docker run NAME` keeps the name in Config.Image; after the tag moved (a new pull), the
    container still runs the old ID, which the next `pulumi up` replaces."""
    spec = spec_of(plan, "alpha")
    by_name = inspect_of(spec, cid="alpha-id", pid=1000, image=spec.image, runs=image_id(spec.image))
    assert findings(plan, with_container(clean_facts(plan), by_name)) == []
    stale = inspect_of(spec, cid="alpha-id", pid=1000, image=spec.image, runs=OLD)
    [found] = findings(plan, with_container(clean_facts(plan), stale))
    assert found.message.endswith(f"image: {spec.image} = {image_id(spec.image)} (plan) != {spec.image} = {OLD} (live)")


def test_a_planned_image_the_host_does_not_have_is_said_so_beside_the_id_the_container_runs(plan):
    spec = spec_of(plan, "alpha")
    facts = dataclasses.replace(clean_facts(plan), image_ids={spec.image: None})
    found = [f for f in findings(plan, facts) if f.service == "alpha"]
    assert [f.message for f in found] == [
        f"container alpha: image: {spec.image} (no such image on the host) (plan) != {image_id(spec.image)} (live)"
    ]


def test_without_the_hosts_answer_an_image_is_compared_by_name_with_or_without_registry_and_latest_tag():
    plan = deployment_of(make_fleet(defaults={"image": "ascend-fleet/npu-sim"}))
    spec = spec_of(plan, "alpha")
    facts = dataclasses.replace(clean_facts(plan), image_ids={})
    by_name = inspect_of(spec, cid="alpha-id", pid=1000, image="docker.io/ascend-fleet/npu-sim:latest")
    found = findings(plan, with_container(facts, by_name))
    assert [f for f in found if f.service == "alpha"] == []
    assert {f.key for f in found} == {"image"}  # beta's and gamma's IDs, not asked about, are not names


def test_the_gather_script_asks_the_host_for_each_planned_image_and_the_facts_keep_only_ids(plan, monkeypatch):
    scripts = []

    def fake_run_script(h, script, *, timeout=None):
        scripts.append(script)
        return RemoteResult(True, 0, gathered(("docker-inspect", "", "[]"), ("npu-smi-rc", "", "0")), "", 0.1)

    monkeypatch.setattr(doctor, "run_script", fake_run_script)
    doctor.run(plan)
    [image] = {spec_of(plan, name).image for name in ("alpha", "beta", "gamma")}
    assert scripts[0].count("docker image inspect") == 1
    assert f"docker image inspect --format '{{{{.Id}}}}' -- {image} 2>&1 | f image {image}" in scripts[0]
    assert subprocess.run(["sh", "-n"], input=gather_script(required(plan.hosts[0]), images=["a b", "x"]), text=True).returncode == 0
    known, text = image_id("x"), "Error response from daemon: No such image: y:1"
    facts = parse_facts(gathered(("image", "x", known + "\n"), ("image", "y:1", text), ("image", "z", f"{known}\n{known}")))
    assert facts.image_ids == {"x": known, "y:1": None, "z": None}
