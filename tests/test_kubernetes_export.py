"""`render --format kubernetes`: every object of every committed stack passes the Kubernetes 1.34
OpenAPI schema (kubernetes-validate, pinned, strict: an unknown field is an error), and each planned
service becomes what docs/kubernetes.md says: its node, a claim per planned card shared by every pod
on the card, the container's env, mounts, probes and grace, and the router's worker list."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from ruamel.yaml import YAML

from tests.support.kubernetes import kubernetes_deployment
from views.exports.kubernetes import RUNTIME_VISIBLE_ENV, UNACCOUNTED, claim_name, manifests
from views.exports.kubernetes_yaml import document, stream

KUBERNETES_VERSION = "1.34.0"
"""The schema the objects are validated against: resource.k8s.io/v1 (DRA) is GA from 1.34."""
ROOT = Path(__file__).resolve().parent.parent
STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in ROOT.glob("Pulumi.*.yaml"))
SETTINGS = {
    "dra-pod": {},
    "fallback-hostNetwork": {"kubernetes": {"dra": False, "network": "hostNetwork", "namespace": "ascend"}},
}


def rendered(cli, tmp_path: Path, stack: str, extra: dict) -> tuple[list[dict], str]:
    """The stream `render` prints for `stack` with `extra` keys, parsed back."""
    text = (ROOT / f"Pulumi.{stack}.yaml").read_text(encoding="utf-8")
    keys = "  ascend-fleet:target: kubernetes\n" + "".join(
        f"  ascend-fleet:{k}: {yaml.safe_dump(v, default_flow_style=True).strip()}\n" for k, v in extra.items()
    )
    path = tmp_path / f"Pulumi.{stack}.yaml"
    path.write_text(text.replace("\nconfig:\n", "\nconfig:\n" + keys, 1), encoding="utf-8")
    result = cli("render", "--config", str(path), "--format", "kubernetes")
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None], result.stderr


def pods(objects: list[dict]) -> dict[str, dict]:
    return {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in objects if o["kind"] == "Deployment"}


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("stack", STACKS)
def test_every_object_of_every_stack_validates_against_the_kubernetes_schema(cli, tmp_path, stack, setting):
    objects, _ = rendered(cli, tmp_path, stack, SETTINGS[setting])
    assert objects
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']}: {'.'.join(map(str, err.path))}: {err.message}")


def test_the_validator_refuses_a_misspelt_field_so_the_test_above_can_fail(cli, tmp_path):
    claim = next(o for o in rendered(cli, tmp_path, "prod", {})[0] if o["kind"] == "ResourceClaim")
    claim["spec"]["devices"]["requests"][0]["exact"] = claim["spec"]["devices"]["requests"][0].pop("exactly")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(claim, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("stack", STACKS)
def test_each_pod_is_pinned_to_its_host_and_names_one_claim_per_planned_card(stack):
    deployment = kubernetes_deployment(stack)
    objects = [m.obj for m in manifests(deployment)]
    claims = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ResourceClaim"}
    for sd in deployment.services():
        pod = pods(objects)[sd.name]
        host, cards = sd.plan.assignment.host_name, sorted(sd.plan.assignment.cards)
        assert pod["nodeSelector"] == {"kubernetes.io/hostname": host}
        assert pod["tolerations"] == [
            {"key": "ascend-fleet/npu", "operator": "Equal", "value": deployment.plan.fleet.fleet_name, "effect": "NoSchedule"}
        ]
        named = [r["resourceClaimName"] for r in pod["resourceClaims"]]
        assert named == [claim_name(host, c) for c in cards]
        selected = [claims[n]["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]["expression"] for n in named]
        assert selected == [f"device.attributes['npu.huawei.com'].physicId == {c}" for c in cards]
        assert [c["name"] for c in pod["containers"][0]["resources"]["claims"]] == [r["name"] for r in pod["resourceClaims"]]


def test_a_shared_card_is_one_claim_that_every_pod_on_it_names():
    deployment = kubernetes_deployment("prod")
    objects = [m.obj for m in manifests(deployment)]
    on_card_0 = sorted(n for n, p in pods(objects).items() if "npu-a-npu-0" in [r["resourceClaimName"] for r in p["resourceClaims"]])
    assert on_card_0 == ["bge-m3", "qwen-vl"]
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "ResourceClaim"].count("npu-a-npu-0") == 1
    share = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "npu-a-device-share")
    assert share["data"]["cards"] == "0"


def test_the_container_gets_the_env_mounts_probes_and_grace_the_docker_target_gives_it():
    deployment = kubernetes_deployment("prod")
    sd = next(s for s in deployment.services() if s.name == "qwen-vl")
    pod = pods([m.obj for m in manifests(deployment)])["qwen-vl"]
    (c,) = pod["containers"]
    assert {e["name"]: e["value"] for e in c["env"]} == dict(sd.spec.env)
    assert c["image"] == sd.spec.image and c["args"] == list(sd.spec.command) and "command" not in c
    assert pod["terminationGracePeriodSeconds"] == sd.spec.stop_grace_seconds
    assert pod["enableServiceLinks"] is False and pod["shareProcessNamespace"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": f"{sd.spec.shm_size_mib}Mi"}
    mounted = {(volumes[m["name"]]["hostPath"]["path"], m["mountPath"], m["readOnly"]) for m in c["volumeMounts"] if m["name"] != "dshm"}
    assert mounted == {(m.source, m.target, m.read_only) for m in sd.spec.mounts}
    hc = sd.spec.healthcheck
    assert c["livenessProbe"]["exec"]["command"] == ["sh", "-c", hc.test[1]]
    assert c["livenessProbe"]["failureThreshold"] == hc.retries
    start = c["startupProbe"]
    assert start["periodSeconds"] * (start["failureThreshold"] - hc.retries) >= hc.start_period_seconds
    assert pod["securityContext"]["sysctls"] == [{"name": k, "value": v} for k, v in sd.spec.sysctls.items()]
    assert "hostNetwork" not in pod


def test_each_instance_is_one_pod_replaced_by_stopping_the_old_one_first():
    for o in (m.obj for m in manifests(kubernetes_deployment("staging"))):
        if o["kind"] == "Deployment":
            assert o["spec"]["replicas"] == 1 and o["spec"]["strategy"] == {"type": "Recreate"}


def test_without_dra_the_cards_go_through_the_runtime_and_are_flagged_unaccounted(cli, tmp_path):
    objects, stderr = rendered(cli, tmp_path, "prod", SETTINGS["fallback-hostNetwork"])
    assert not [o for o in objects if o["kind"] == "ResourceClaim"]
    pod = pods(objects)["qwen-long"]
    assert {e["name"]: e["value"] for e in pod["containers"][0]["env"]}[RUNTIME_VISIBLE_ENV] == "4,5,6,7"
    assert "resourceClaims" not in pod and pod["hostNetwork"] is True and "securityContext" not in pod
    deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "qwen-long")
    annotation = deployment["metadata"]["annotations"][UNACCOUNTED]
    assert annotation == deployment["spec"]["template"]["metadata"]["annotations"][UNACCOUNTED]
    assert annotation == "cards 4,5,6,7 of node npu-a are pinned by nodeSelector and ASCEND_VISIBLE_DEVICES " \
        "(kubernetes.dra is false): the scheduler does not account for them"
    assert stderr.count("warning: unaccounted by the scheduler:") == 3


def test_the_router_reads_its_replicas_from_a_config_map_and_its_service_selects_only_it():
    deployment = kubernetes_deployment("staging")
    objects = {(m.kind, m.name): m.obj for m in manifests(deployment)}
    workers = objects[("ConfigMap", "bge-m3-router-workers")]["data"]["workers"]
    assert workers.splitlines() == [
        f"http://{sd.name}.default.svc:{sd.plan.assignment.api_port}"
        for sd in sorted((s for s in deployment.services() if s.plan.replica_of == "bge-m3"), key=lambda s: s.name)
    ]
    assert objects[("Service", "bge-m3")]["spec"]["selector"] == {"ascend-fleet/instance": "bge-m3-router"}
    labels = [objects[("Deployment", f"bge-m3-{i}")]["spec"]["template"]["metadata"]["labels"] for i in (1, 2, 3)]
    assert [(l["ascend-fleet/replica-of"], l["ascend-fleet/replica-index"]) for l in labels] == [("bge-m3", "0"), ("bge-m3", "1"), ("bge-m3", "2")]


def test_render_output_writes_one_file_per_object_in_apply_order(cli, tmp_path):
    result = cli("render", "--stack", "prod", "--format", "kubernetes", "--output", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == [f"{i:03d}-{m.kind.lower()}-{m.name}.yaml" for i, m in enumerate(manifests(kubernetes_deployment("prod")), 1)]
    assert yaml.safe_load((tmp_path / "out" / names[0]).read_text())["kind"] == "ConfigMap"


def test_a_stack_name_kubernetes_cannot_label_with_is_one_message(cli, tmp_path):
    stack = tmp_path / "fleet.yaml"
    stack.write_text((ROOT / "Pulumi.prod.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    result = cli("render", "--config", str(stack), "--stack-name", "x" * 64, "--format", "kubernetes")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(f"error: stack {'x' * 64} cannot be a Kubernetes label value") and result.stderr.count("\n") == 1


# --- the YAML a person reads: bare keys, scripts as literal blocks, quotes only where a reader needs them ---

HOSTILE = ["on", "yes", "y", "N", "off", "~", "null", "", "0o17", "0x1f", "1_000", "1:30", "1e3", "08", "017",
           "2001-12-14", ".inf", "=", "<<", "true", "0", "+1", "3.5"]  # fmt: skip
"""Strings YAML 1.1 (kubectl's sigs.k8s.io/yaml) or YAML 1.2 would read, written plain, as another type."""


def all_quoted(obj: dict) -> str:
    """The YAML `render` wrote before: every string double-quoted, keys included."""
    from ruamel.yaml import YAML as RuamelYAML
    from ruamel.yaml.representer import SafeRepresenter

    class Quoted(SafeRepresenter):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.sort_base_mapping_type_on_output = False

    Quoted.add_representer(str, lambda r, data: r.represent_scalar("tag:yaml.org,2002:str", data, style='"'))
    dumper = RuamelYAML(typ="safe", pure=True)
    dumper.Representer, dumper.default_flow_style, dumper.width = Quoted, False, 4096
    out = io.StringIO()
    dumper.dump(obj, out)
    return out.getvalue()


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("stack", STACKS)
def test_the_yaml_reads_back_as_the_objects_and_the_old_all_quoted_yaml_under_yaml_1_1_and_1_2(cli, tmp_path, stack, setting):
    objects, _ = rendered(cli, tmp_path, stack, SETTINGS[setting])
    text = cli("render", "--config", str(tmp_path / f"Pulumi.{stack}.yaml"), "--format", "kubernetes").stdout
    as_1_2 = [d for d in YAML(typ="safe").load_all(text) if d is not None]
    old = [yaml.safe_load(all_quoted(o)) for o in objects]
    assert objects == as_1_2 == old
    assert json.dumps(objects, sort_keys=True) == json.dumps(old, sort_keys=True), "the same objects, byte for byte as data"


def test_keys_are_bare_and_scripts_are_literal_blocks():
    text = stream(kubernetes_deployment("staging"))
    assert not re.search(r"^\s*(- )?[\"'][^\"']*[\"']:", text, flags=re.M), "no key is quoted"
    assert "  script: |\n    # ascend-fleet device-share for npu-s1" in text
    assert re.search(r"^        - -c\n        - \|-\n          trap 'exit 143' TERM INT;", text, flags=re.M), "the start gate"
    assert not re.search(r'^\s*(- |[\w./-]+: )"[^\n]*\\n', text, flags=re.M), "no script is one escaped, quoted line"


@pytest.mark.parametrize("value", HOSTILE)
def test_a_string_either_yaml_version_reads_as_another_type_is_quoted_and_reads_back_as_text(value):
    text = document({"metadata": {"annotations": {value or "empty": value}}, value or "k": "plain"})
    assert f': "{value}"\n' in text, text
    for doc in (yaml.safe_load(text), YAML(typ="safe").load(text)):
        assert doc["metadata"]["annotations"][value or "empty"] == value and doc[value or "k"] == "plain"


def test_a_string_both_versions_read_as_text_is_plain():
    assert document({"value": "0,1", "name": "npu-a", "range": "16666-16681", "url": "http://a:1/v1"}) == (
        "value: 0,1\nname: npu-a\nrange: 16666-16681\nurl: http://a:1/v1\n"
    )
