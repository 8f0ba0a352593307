"""Replicas: one service served by several containers on different hosts, behind one vLLM router.

The planner, the router's container, `pin`, `plan --against` and the Pulumi program under
Pulumi's official mocks. The router's own behaviour (flags, endpoints, retries) is tested
against the real `vllm-router` in test_router_e2e.py.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocation.config import parse_fleet
from records.deployment import deploy
from views.diff import diff_plans
from allocation.errors import AllocationError, ConfigError
from allocation.planner import plan_fleet
from views.report import plan_json
from records.rollout import LAUNCH, SERVE_MARGIN_SECONDS, WORKERS_ENV, WORKERS_MOUNT
from allocation.kv_cache import prefix_caching
from records.router import VERSION, image_tag
from cli.pin import stack_pins
from cli.stackfile import load_fleet
from components.router import SERVES_SUFFIX
from tests.support.pulumi_harness import CONTAINER, REMOTE_COMMAND, ROUTER, fake_image_id, plain_occurrences, run_program, unwrap
from tests.support.replicas import HOSTS, bge, fleet_of, router_of
from tests.support.pipeline import plan_of


def placement(plan) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {ps.name: (hp.host.name, ps.assignment.cards) for hp, ps in plan.services()}


def test_three_replicas_go_to_three_hosts_each_named_and_marked_as_a_replica():
    plan = plan_of(fleet_of(bge()))
    assert placement(plan) == {"bge-1": ("npu-1", (0,)), "bge-2": ("npu-2", (0,)), "bge-3": ("npu-3", (0,))}
    services = {s["name"]: s for h in plan_json(deploy(plan))["hosts"] for s in h["services"]}
    assert {n: s["replicaOf"] for n, s in services.items()} == {"bge-1": "bge", "bge-2": "bge", "bge-3": "bge"}
    assert not [w for w in plan.warnings if ": replicas, hosts: " in w]  # one a host: none crowded
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
    assert plan.warnings[-1] == (
        "hosts npu-1, npu-2: replicas, hosts: bge: 5 replicas on 3 hosts, more than one on each of these, so losing "
        "one loses several"
    )


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


def vllm_router_argv(spec) -> list[str]:
    """The vllm-router argv of the router's command, after the sh wrapper that adds the workers."""
    argv = list(spec.command)
    assert argv[:3] == ["sh", "-c", LAUNCH], "the wrapper reads the worker file and execs vllm-router"
    return argv[4:]


def test_the_router_reads_every_replica_from_its_worker_file_and_binds_everything_on_all_addresses():
    _, rd = router_of(fleet_of(bge(routerPort=7007, args=["--no-enable-prefix-caching"])))
    argv = vllm_router_argv(rd.spec)
    assert argv[0] == "vllm-router" and "--worker-urls" not in argv, "the command names no worker"
    assert rd.workers == ("http://192.0.2.11:8000", "http://192.0.2.12:8000", "http://192.0.2.13:8000")
    assert rd.spec.env == {WORKERS_ENV: f"{WORKERS_MOUNT}/workers"}
    assert [(m.source, m.target, m.read_only) for m in rd.spec.mounts] == [
        ("/var/lib/ascend-fleet/routers/bge-router", WORKERS_MOUNT, True)
    ]
    assert "printf '%s' 'http://192.0.2.11:8000\nhttp://192.0.2.12:8000\nhttp://192.0.2.13:8000\n' |" in rd.workers_script
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


def test_each_replica_has_a_step_that_re_registers_it_and_waits_its_start_timeout_plus_a_margin():
    _, rd = router_of(fleet_of(bge(routerPort=7007, startTimeoutSeconds=600)))
    assert [(h.replica, h.url) for h in rd.handovers] == [(sd.name, sd.url) for sd in rd.replicas]
    serve = rd.handovers[1].serve_script
    assert serve.startswith("set -u\ndocker exec bge-router python3 -c ")
    assert f"serve 7007 {600 + SERVE_MARGIN_SECONDS} http://192.0.2.12:8000 bge-2 ||" in serve
    assert rd.handovers[1].drain_script.rstrip().endswith("exit 0"), "a drain never fails a deletion"


def test_the_policy_follows_prefix_caching_unless_set():
    assert prefix_caching([]) and prefix_caching(["--no-enable-prefix-caching", "--enable-prefix-caching"])
    assert not prefix_caching(["--enable-prefix-caching", "--no-enable-prefix-caching"])
    _, rd = router_of(fleet_of(bge()))
    assert "cache_aware" in rd.spec.command
    _, rd = router_of(fleet_of(bge(router={"policy": "power_of_two"})))
    assert "power_of_two" in rd.spec.command


HYBRID = {
    "weightBytes": 2_000_000_000, "numHiddenLayers": 8, "attention": "hybrid", "modelType": "qwen3_5_text",
    "numFullAttentionLayers": 2, "numKeyValueHeads": 4, "headDim": 256, "linearNumKeyHeads": 16,
    "linearNumValueHeads": 32, "linearKeyHeadDim": 128, "linearValueHeadDim": 128, "linearConvKernelDim": 4,
    "mambaSsmDtype": "float32",
}  # fmt: skip


def test_a_hybrid_model_caches_no_prefixes_unless_asked_so_its_router_round_robins():
    """vLLM leaves prefix caching off for hybrid linear-attention models (allocation.kv_cache)."""
    assert not prefix_caching([], hybrid=True) and prefix_caching(["--enable-prefix-caching"], hybrid=True)
    _, rd = router_of(fleet_of(bge(profile=HYBRID)))
    assert "round_robin" in rd.spec.command
    _, rd = router_of(fleet_of(bge(profile=HYBRID, args=["--enable-prefix-caching"])))
    assert "cache_aware" in rd.spec.command


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
    assert "      replicaPins:\n        - host: npu-1\n          devices: [0]\n          apiPort: 8000\n" in text
    assert "routerPort: 8001" in text and "routerMetricsPort: 8002" in text
    assert cli("plan", "--config", str(path), "--format", "json").stdout == before
    assert "nothing new" in cli("pin", "--config", str(path)).stdout


def test_the_diff_names_replicas_added_and_removed_and_leaves_the_router_alone():
    old = plan_json(deploy(plan_of(fleet_of(bge(replicas=2)))))
    new = plan_json(deploy(plan_of(fleet_of(bge(replicas=3)))))
    diff = {d.name: d for d in diff_plans(old, new).services}
    assert diff["bge-3"].added and ("added", "replica of bge, on npu-3 cards 0") in diff["bge-3"].lines()
    router = diff["bge-router"]
    assert router.restart_reasons == () and router.lines() == [], "the router's container stays: its workers are a file"
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
    assert "--worker-urls" not in container.inputs["command"]
    assert containers["bge-1-container"].urn in container.dependencies, "the router starts after a replica is healthy"
    commands = run.by_name(REMOTE_COMMAND)
    assert commands["bge-router-image"].urn in commands["bge-router-workers"].dependencies
    assert commands["bge-router-workers"].urn in container.dependencies, "its worker file is written before it starts"
    assert commands["bge-router-workers"].inputs["create"] == deploy(plan_of(values)).routers[0].workers_script
    assert container.inputs["image"] == fake_image_id(image_tag("quay.io/ascend/vllm-ascend:v0.20.2rc1"))
    ports = [(p["internal"], p["external"]) for p in container.inputs["ports"]]
    assert ports[0] == (7007, 7007) and len(ports) == 2

    services = run.stack_outputs["services"]
    assert services["bge"]["endpoint"] == "http://192.0.2.11:7007/v1"
    assert services["bge"]["replicas"] == ["bge-1", "bge-2", "bge-3"]
    assert services["bge-2"]["endpoint"] == "http://192.0.2.12:8000/v1"


def pinned_bge(**extra) -> dict:
    """bge with every replica and the router's ports pinned where the planner put them."""
    (pins,) = stack_pins(plan_of(fleet_of(bge(**extra)))).values()
    return bge(**extra, **pins)


def serves_steps(run) -> dict[str, object]:
    return {r.name.removesuffix(SERVES_SUFFIX): r for r in run.of_type(REMOTE_COMMAND) if r.name.endswith(SERVES_SUFFIX)}


def test_each_replica_waits_for_the_one_before_it_to_serve_again_through_the_router():
    values = fleet_of(bge(routerPort=7007))
    run = run_program("test", values)
    containers, steps = run.by_name(CONTAINER), serves_steps(run)
    (rd,) = deploy(plan_of(values)).routers
    assert sorted(steps) == ["bge-1", "bge-2", "bge-3"]
    router, workers = containers["bge-router-container"], run.by_name(REMOTE_COMMAND)["bge-router-workers"]

    def waits(replica: str) -> list[str]:
        deps = containers[f"{replica}-container"].dependencies
        return [name for name, step in steps.items() if step.urn in deps]

    assert {r: waits(r) for r in steps} == {"bge-1": [], "bge-2": ["bge-1"], "bge-3": ["bge-2"]}
    for i, (name, step) in enumerate(sorted(steps.items())):
        container = containers[f"{name}-container"]
        # On the router's host, after its replica and the router; again whenever the replica's container is new.
        assert unwrap(step.inputs["connection"])["host"] == "192.0.2.11"
        assert {container.urn, router.urn, workers.urn} <= set(step.dependencies)
        assert step.inputs["triggers"] == [f"{name}-container-id"]
        assert step.inputs["create"] == rd.handovers[i].serve_script
        assert step.inputs["delete"] == rd.handovers[i].drain_script
        assert step.delete_before_replace, "the old step's drain runs before the new one registers"
    # The chain is options, not inputs: a replica's container has the same inputs as a lone service's.
    assert plain_occurrences(containers["bge-2-container"].inputs, "bge-1") == []


@pytest.mark.parametrize(("before", "after", "created"), [(3, 4, {"bge-4"}), (3, 2, set()), (2, 3, {"bge-3"})])
def test_scaling_a_pinned_service_re_creates_no_other_container_and_updates_the_worker_list_in_place(
    before, after, created
):
    pins = pinned_bge(replicas=max(before, after))
    values = {n: fleet_of({**pins, "replicas": n, "replicaPins": pins["replicaPins"][:n]}) for n in (before, after)}
    runs = {n: run_program("test", v) for n, v in values.items()}
    old, new = runs[before].containers(), runs[after].containers()
    assert {n for n in old.keys() & new.keys() if old[n] != new[n]} == set(), "the router and every replica stay"
    assert set(new) - set(old) == created and set(old) - set(new) == {f"bge-{i}" for i in range(after + 1, before + 1)}
    old_workers, new_workers = (runs[n].by_name(REMOTE_COMMAND)["bge-router-workers"].inputs for n in (before, after))
    assert old_workers["create"] != new_workers["create"] and "update" not in new_workers
    (rd,) = deploy(plan_of(values[after])).routers
    assert new_workers["create"] == rd.workers_script


def test_an_image_change_re_creates_the_replicas_in_a_chain_and_the_router_once():
    pins = pinned_bge()
    old = run_program("test", fleet_of(pins))
    new = run_program("test", fleet_of({**pins, "image": "quay.io/ascend/vllm-ascend:v0.20.3"}))
    before, after = old.containers(), new.containers()
    assert {n for n in before if before[n] != after[n]} == {"bge-1", "bge-2", "bge-3", "bge-router"}
    containers, steps = new.by_name(CONTAINER), serves_steps(new)
    chain = [
        (name, next(s for s, step in steps.items() if step.urn in containers[f"{name}-container"].dependencies))
        for name in ("bge-2", "bge-3")
    ]
    assert chain == [("bge-2", "bge-1"), ("bge-3", "bge-2")], "each waits for the one before it"
    assert all(c.delete_before_replace for c in containers.values())
