"""Replicas: one service served by several containers on different hosts, behind one vLLM router.

The planner, the router's container, `pin`, `plan --against` and the Pulumi program under
Pulumi's official mocks. The router's own behaviour (flags, endpoints, retries) is tested
against the real `vllm-router` in test_router_e2e.py.
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocation.config import parse_fleet
from allocation.deployment import deploy
from allocation.diff import diff_plans
from allocation.errors import AllocationError, ConfigError
from allocation.planner import plan_fleet
from allocation.report import plan_json
from allocation.router import VERSION, image_tag, prefix_caching
from cli.stackfile import load_fleet
from tests.pulumi_harness import CONTAINER, REMOTE_COMMAND, ROUTER, fake_image_id, run_program

HOSTS = [{"name": f"npu-{i}", "address": f"192.0.2.{10 + i}"} for i in range(1, 4)]


def fleet_of(*services: dict, hosts: list[dict] = HOSTS) -> dict:
    return {"hosts": copy.deepcopy(hosts), "services": list(services)}


def bge(**extra) -> dict:
    return {"name": "bge", "model": "/m/bge", "memoryFraction": 0.1, "replicas": 3, **extra}


def plan_of(values: dict):
    return plan_fleet(parse_fleet("test", values))


def placement(plan) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {ps.name: (hp.host.name, ps.assignment.cards) for hp, ps in plan.services()}


def test_three_replicas_go_to_three_hosts_each_named_and_marked_as_a_replica():
    plan = plan_of(fleet_of(bge()))
    assert placement(plan) == {"bge-1": ("npu-1", (0,)), "bge-2": ("npu-2", (0,)), "bge-3": ("npu-3", (0,))}
    services = {s["name"]: s for h in plan_json(deploy(plan))["hosts"] for s in h["services"]}
    assert {n: s["replicaOf"] for n, s in services.items()} == {"bge-1": "bge", "bge-2": "bge", "bge-3": "bge"}
    assert plan.warnings == ()
    # Behind one router every replica answers to the service's model name, not its container's.
    for s in services.values():
        argv = s["container"]["command"]
        assert argv[argv.index("--served-model-name") + 1] == "bge"


def test_staging_plans_three_replicas_on_three_hosts_and_one_router():
    plan = plan_fleet(load_fleet("staging")[0])
    replicas = {ps.name: hp.host.name for hp, ps in plan.services() if ps.replica_of == "bge-m3"}
    assert sorted(replicas) == ["bge-m3-1", "bge-m3-2", "bge-m3-3"]
    assert len(set(replicas.values())) == 3
    assert [(r.name, r.host_name, r.port) for r in plan.routers] == [("bge-m3-router", "npu-s1", 7007)]


def test_more_replicas_than_hosts_share_a_host_but_never_a_card_and_the_plan_warns():
    plan = plan_of(fleet_of(bge(replicas=5)))
    where = placement(plan)
    assert [where[f"bge-{i}"][0] for i in range(1, 6)] == ["npu-1", "npu-2", "npu-3", "npu-1", "npu-2"]
    assert where["bge-4"] == ("npu-1", (1,)) and where["bge-5"] == ("npu-2", (1,))
    assert any("bge: 5 replicas on 3 hosts" in w for w in plan.warnings)


@settings(max_examples=60, deadline=None)
@given(replicas=st.integers(2, 12), tp=st.sampled_from([1, 2, 4]), hosts=st.integers(1, 4))
def test_replicas_spread_over_every_host_before_doubling_up_and_never_share_a_card(replicas, tp, hosts):
    values = fleet_of(bge(replicas=replicas, tensorParallelSize=tp), hosts=HOSTS[:1] + [
        {"name": f"npu-x{i}", "address": f"198.51.100.{i}"} for i in range(1, hosts)
    ])  # fmt: skip
    try:
        plan = plan_of(values)
    except AllocationError as err:
        assert replicas * tp > 8 * hosts or "no room" in str(err)
        return
    where = list(placement(plan).values())
    used = [h for h, _ in where]
    assert len(set(used)) == min(hosts, replicas), "every host gets a replica before any gets two"
    cards = [(h, c) for h, block in where for c in block]
    assert len(cards) == len(set(cards)), "no card holds two replicas"


def test_hosts_restrict_where_replicas_go():
    plan = plan_of(fleet_of(bge(replicas=2, hosts=["npu-2", "npu-3"])))
    assert {h for h, _ in placement(plan).values()} == {"npu-2", "npu-3"}


def test_hosts_restrict_a_single_service_too():
    plan = plan_of(fleet_of({"name": "one", "model": "/m/one", "memoryFraction": 0.5, "hosts": ["npu-3"]}))
    assert placement(plan) == {"one": ("npu-3", (0,))}


def test_replica_pins_fix_each_replica_and_a_pinned_card_of_a_sibling_is_refused():
    plan = plan_of(fleet_of(bge(replicas=2, replicaPins=[{"host": "npu-3", "devices": [5], "apiPort": 9100}])))
    assert placement(plan)["bge-1"] == ("npu-3", (5,))
    assert next(ps for _, ps in plan.services() if ps.name == "bge-1").assignment.api_port == 9100
    pins = [{"host": "npu-1", "devices": [0]}, {"host": "npu-1", "devices": [0]}]
    with pytest.raises(AllocationError, match="card 0 is held by another replica of bge; replicas never share a card"):
        plan_of(fleet_of(bge(replicas=2, replicaPins=pins)))


def test_one_replica_plans_exactly_as_a_service_without_the_key():
    service = {"name": "bge", "model": "/m/bge", "memoryFraction": 0.1}
    with_key = plan_json(deploy(plan_of(fleet_of({**service, "replicas": 1}))))
    without = plan_json(deploy(plan_of(fleet_of(service))))
    assert with_key == without and without["routers"] == []


@pytest.mark.parametrize(
    ("service", "message"),
    [
        (bge(replicas=1, routerPort=7000), "routerPort needs replicas above 1"),
        (bge(host="npu-1"), "a service with replicas pins each replica under replicaPins, not host"),
        (bge(apiPort=7000), "not apiPort"),
        (bge(replicas=2, replicaPins=[{}, {}, {}]), "replicaPins has 3 entries for 2 replicas"),
        (bge(replicaPins=[{"devices": [0, 1]}]), "replicaPins entry 1: devices [0, 1] pins 2 cards"),
        (bge(hosts=["npu-9"]), "service bge: hosts: unknown host 'npu-9'"),
        (bge(router={"host": "npu-7"}), "router.host: unknown host 'npu-7'"),
        (bge(router={"policy": "fastest"}), "router.policy"),
    ],
)
def test_bad_replica_settings_are_one_clear_message(service, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_fleet("test", fleet_of(service))


def test_a_replica_or_router_name_taken_by_another_service_is_refused():
    other = {"name": "bge-2", "model": "/m/x", "memoryFraction": 0.1}
    with pytest.raises(ConfigError, match="its container bge-2 has the name of another service"):
        parse_fleet("test", fleet_of(bge(), other))
    with pytest.raises(ConfigError, match="its container bge-router has the name of another service"):
        parse_fleet("test", fleet_of(bge(), {**other, "name": "bge-router"}))


# --- the router ---------------------------------------------------------------------------


def router_of(values: dict):
    deployment = deploy(plan_of(values))
    (rd,) = deployment.routers
    return deployment, rd


def test_the_router_lists_every_replica_and_binds_everything_it_serves_on_all_addresses():
    _, rd = router_of(fleet_of(bge(routerPort=7007, args=["--no-enable-prefix-caching"])))
    argv = list(rd.spec.command)
    assert argv[0] == "vllm-router"
    workers = argv[argv.index("--worker-urls") + 1 : argv.index("--policy")]
    assert workers == ["http://192.0.2.11:8000", "http://192.0.2.12:8000", "http://192.0.2.13:8000"]
    options = dict(zip(argv[1::2], argv[2::2]))
    assert options["--host"] == options["--prometheus-host"] == "0.0.0.0"
    assert (options["--port"], options["--prometheus-port"]) == ("7007", str(rd.plan.metrics_port))
    assert options["--policy"] == "round_robin"
    assert int(options["--request-timeout-secs"]) >= 3600
    # The router exits when no worker answers within this: it must outlast the slowest replica's load.
    assert int(options["--worker-startup-timeout-secs"]) > 1800
    assert rd.spec.ports == (7007, rd.plan.metrics_port)
    assert rd.endpoint == "http://192.0.2.11:7007/v1"
    assert "/readiness" in rd.spec.healthcheck.test[1] and "/health " not in rd.spec.healthcheck.test[1]
    assert rd.first == "bge-1"


def test_the_policy_follows_prefix_caching_unless_set():
    assert prefix_caching([]) and prefix_caching(["--no-enable-prefix-caching", "--enable-prefix-caching"])
    assert not prefix_caching(["--enable-prefix-caching", "--no-enable-prefix-caching"])
    _, rd = router_of(fleet_of(bge()))
    assert "cache_aware" in rd.spec.command
    _, rd = router_of(fleet_of(bge(router={"policy": "power_of_two"})))
    assert "power_of_two" in rd.spec.command


def test_the_router_runs_where_it_is_told_with_ports_taken_like_api_ports():
    deployment, rd = router_of(fleet_of(bge(router={"host": "npu-3"})))
    assert rd.plan.host_name == "npu-3"
    taken = {ps.assignment.api_port for hp, ps in deployment.plan.services() if hp.host.name == "npu-3"}
    assert taken == {8000} and (rd.plan.port, rd.plan.metrics_port) == (8001, 8002)
    hd = next(h for h in deployment.hosts if h.name == "npu-3")
    assert rd.base_image in hd.images, "the router's base image is pulled where the router is built"


def test_the_router_image_is_the_services_image_plus_the_pinned_wheel_with_its_hashes():
    _, rd = router_of(fleet_of(bge()))
    assert rd.spec.image == image_tag(rd.base_image) and rd.spec.image.startswith(f"ascend-fleet-router:{VERSION}-")
    assert f"FROM {rd.base_image}\n" in rd.build_script
    assert f"vllm-router=={VERSION} --hash=sha256:" in rd.build_script
    assert "--require-hashes" in rd.build_script
    assert image_tag("other:1") != image_tag(rd.base_image)


# --- pin and the plan diff ------------------------------------------------------------------------


def test_pin_pins_every_replica_and_the_routers_ports(tmp_path, cli):
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(
        "config:\n  ascend-fleet:hosts:\n"
        + "".join(f"    - {{name: {h['name']}, address: {h['address']}}}\n" for h in HOSTS)
        + "  ascend-fleet:services:\n    - name: bge\n      model: /m/bge\n      memoryFraction: 0.1\n      replicas: 3\n"
    )
    before = cli("plan", "--config", str(path), "--format", "json").stdout
    assert cli("pin", "--config", str(path)).returncode == 0
    text = path.read_text()
    assert "replicaPins: [{host: npu-1, devices: [0], apiPort: 8000," in text
    assert "routerPort: 8001" in text and "routerMetricsPort: 8002" in text
    assert cli("plan", "--config", str(path), "--format", "json").stdout == before
    assert "nothing new" in cli("pin", "--config", str(path)).stdout


def test_the_diff_names_replicas_added_and_removed_and_router_changes():
    old = plan_json(deploy(plan_of(fleet_of(bge(replicas=2)))))
    new = plan_json(deploy(plan_of(fleet_of(bge(replicas=3)))))
    diff = {d.name: d for d in diff_plans(old, new).services}
    assert diff["bge-3"].added and ("added", "replica of bge, on npu-3 cards 0") in diff["bge-3"].lines()
    assert diff["bge-router"].restart_reasons == (
        "--worker-urls http://192.0.2.11:8000, http://192.0.2.12:8000 -> "
        "http://192.0.2.11:8000, http://192.0.2.12:8000, http://192.0.2.13:8000",
    )
    back = {d.name: d for d in diff_plans(new, old).services}
    assert back["bge-3"].removed and back["bge-3"].lines()[0][1].startswith("replica of bge, was on")


def test_an_old_plan_without_routers_or_replica_keys_reads():
    old = plan_json(deploy(plan_of(fleet_of({"name": "bge", "model": "/m/bge", "memoryFraction": 0.1}))))
    del old["routers"]
    for host in old["hosts"]:
        for s in host["services"]:
            del s["replicaOf"]
    new = plan_json(deploy(plan_of(fleet_of({"name": "bge", "model": "/m/bge", "memoryFraction": 0.1}))))
    assert not diff_plans(json.loads(json.dumps(old)), new).has_changes


# --- the program under Pulumi's mocks -----------------------------------------------------------


def test_the_program_registers_replicas_on_their_hosts_and_one_router_in_front():
    values = fleet_of(bge(routerPort=7007))
    run = run_program("test", values)
    containers = run.by_name(CONTAINER)
    assert sorted(containers) == ["bge-1-container", "bge-2-container", "bge-3-container", "bge-router-container"]
    providers = {containers[f"bge-{i}-container"].provider.split("::")[-1] for i in (1, 2, 3)}
    assert len(providers) == 3, "each replica is created through its own host's provider"

    (router,) = run.of_type(ROUTER)
    container = containers["bge-router-container"]
    assert container.parent == router.urn
    argv = container.inputs["command"]
    assert argv[argv.index("--worker-urls") + 1 : argv.index("--policy")] == [
        "http://192.0.2.11:8000", "http://192.0.2.12:8000", "http://192.0.2.13:8000",
    ]  # fmt: skip
    assert containers["bge-1-container"].urn in container.dependencies, "the router starts after a replica is healthy"
    builds = [r for r in run.of_type(REMOTE_COMMAND) if r.name == "bge-router-image"]
    assert len(builds) == 1 and builds[0].urn in container.dependencies
    assert container.inputs["image"] == fake_image_id(image_tag("quay.io/ascend/vllm-ascend:v0.20.2rc1"))
    ports = [(p["internal"], p["external"]) for p in container.inputs["ports"]]
    assert ports[0] == (7007, 7007) and len(ports) == 2

    services = run.stack_outputs["services"]
    assert services["bge"]["endpoint"] == "http://192.0.2.11:7007/v1"
    assert services["bge"]["replicas"] == ["bge-1", "bge-2", "bge-3"]
    assert services["bge-2"]["endpoint"] == "http://192.0.2.12:8000/v1"
