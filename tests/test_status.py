"""`status`: what runs where, from the facts `doctor` gathers (tests/support/doctor.py's fixtures), as a
table that fits 120 columns, as JSON, and as an exit code a script can act on."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from pathlib import Path

import pytest

from cli.stackfile import load_fleet
from ops import doctor
from ops.doctor.facts import HostFacts, parse_facts
from ops.doctor.findings import Finding, required
from ops.doctor.gather import gather_script
from ops.doctor.status import cards_text, duration, exit_code, host_status, hosts_of, only, render, seconds_since
from ops.requested import services_named
from tests.conftest import live_container
from tests.support.cli import spawn
from tests.support.doctor import clean_facts, gathered, group_values, inspect_of, make_fleet, running_facts, with_container, workers_body
from tests.support.pipeline import deployment_of
from tests.support.stacks import SEED_UNPINNED, fleet, host, service
from views.report import WIDTH

CLOCK = 1_767_225_600  # 2026-01-01T00:00:00Z
STARTED = "2025-12-31T22:57:30.123456789Z"  # 1 h 2 min 30 s before CLOCK
CONTAINER_KEYS = {
    "name", "planned", "kind", "service", "cards", "privileged", "state", "health", "serving", "exitCode", "image",
    "startedAt", "uptimeSeconds", "endpoint", "role",
}  # fmt: skip


@pytest.fixture(scope="module")
def deployment():
    return deployment_of(make_fleet())


def facts_of(deployment, **changes) -> HostFacts:
    return dataclasses.replace(clean_facts(deployment), clock=CLOCK, **changes)


def status_of(deployment, facts):
    hosts = [host_status(hd, facts) for hd in deployment.hosts]
    return hosts, render(deployment, hosts, "table"), json.loads(render(deployment, hosts, "json")), exit_code(hosts)


def test_a_host_running_its_plan_lists_every_planned_container_serving_and_exits_zero(deployment):
    hosts, table, doc, code = status_of(deployment, facts_of(deployment))
    assert code == 0 and doc["ok"] is True
    [h] = doc["hosts"]
    assert (h["name"], h["reachable"], h["error"], h["routers"]) == ("npu-a", True, None, [])
    assert [c["name"] for c in h["containers"]] == ["alpha", "beta", "gamma"]
    assert all(set(c) == CONTAINER_KEYS for c in h["containers"])
    gamma = h["containers"][2]
    assert (gamma["kind"], gamma["cards"], gamma["state"], gamma["health"], gamma["serving"]) == ("service", [2, 3], "running", "healthy", True)
    assert gamma["endpoint"] == next(sd.endpoint for sd in deployment.services() if sd.name == "gamma")
    assert "npu-a (npu-a.example): 3 of 3 planned containers running and healthy" in table
    assert "  container  cards  status" in table and max(map(len, table.splitlines())) <= WIDTH


def test_the_uptime_is_counted_on_the_hosts_clock_from_the_containers_start(deployment):
    alpha = next(sd.spec for sd in deployment.services() if sd.name == "alpha")
    started = inspect_of(alpha, cid="alpha-id", pid=1000)
    started["State"]["StartedAt"] = STARTED
    hosts, table, doc, _ = status_of(deployment, dataclasses.replace(with_container(facts_of(deployment), started)))
    row = next(c for c in doc["hosts"][0]["containers"] if c["name"] == "alpha")
    assert (row["uptimeSeconds"], row["startedAt"]) == (3750, STARTED)
    assert "up 1h2m (healthy)" in table
    assert seconds_since(STARTED, None) is None and seconds_since("0001-01-01T00:00:00Z", CLOCK) is None
    assert seconds_since("not a time", CLOCK) is None and seconds_since("2026-01-01T00:00:00", CLOCK) is None


@pytest.mark.parametrize(
    "status, health, shown",
    [("exited", None, "exited (137) 5m ago"), ("running", "unhealthy", "(unhealthy)"), ("running", "starting", "(starting)"),
     ("restarting", None, "restarting (137)"), ("created", None, "created")],
)  # fmt: skip
def test_a_planned_container_not_running_or_not_healthy_is_shown_so_and_exits_one(deployment, status, health, shown):
    beta = next(sd.spec for sd in deployment.services() if sd.name == "beta")
    inspect = inspect_of(beta, cid="beta-id", pid=2000, status=status, health=health)
    inspect["State"]["FinishedAt"] = "2025-12-31T23:55:00Z"
    hosts, table, doc, code = status_of(deployment, with_container(facts_of(deployment), inspect))
    row = next(c for c in doc["hosts"][0]["containers"] if c["name"] == "beta")
    assert (row["state"], row["health"], row["serving"], code, doc["ok"]) == (status, health, False, 1, False)
    line = next(line for line in table.splitlines() if line.startswith("  beta "))
    assert shown in line
    assert "2 of 3 planned containers running and healthy" in table


def test_a_planned_container_the_host_lacks_is_missing(deployment):
    facts = facts_of(deployment)
    facts = dataclasses.replace(facts, containers=tuple(c for c in facts.containers if c.name != "gamma"))
    _, table, doc, code = status_of(deployment, facts)
    gamma = next(c for c in doc["hosts"][0]["containers"] if c["name"] == "gamma")
    assert (gamma["state"], gamma["image"], code) == ("missing", None, 1)
    assert any(line.startswith("  gamma ") and "missing" in line for line in table.splitlines())


def test_a_host_that_cannot_be_read_shows_its_planned_containers_as_unknown_and_exits_two():
    deployment = deployment_of(fleet([host("npu-a"), host("npu-b")], [service("a", host="npu-a"), service("b", host="npu-b")]))
    a, b = deployment.hosts
    gone = Finding("unreachable", "host npu-b (ssh://root@npu-b.example:22) is unreachable: Connection timed out")
    hosts = [host_status(a, HostFacts(containers=(live_container(a.services[0].spec),))), host_status(b, gone)]
    assert exit_code(hosts[:1]) == 0 and exit_code(hosts) == 2
    doc = json.loads(render(deployment, hosts, "json"))
    assert doc["hosts"][1]["reachable"] is False and "Connection timed out" in doc["hosts"][1]["error"]
    assert [(c["name"], c["state"]) for c in doc["hosts"][1]["containers"]] == [("b", "unknown")]
    table = render(deployment, hosts, "table")
    assert "1 host(s) could not be read" in table.splitlines()[0]
    assert "host npu-b (ssh://root@npu-b.example:22) is unreachable: Connection timed out" in table
    broken = host_status(a, HostFacts(docker_error="Cannot connect to the Docker daemon"))
    assert (broken.reachable, exit_code([broken])) == (True, 2) and "docker does not answer" in broken.error


def test_a_container_outside_the_plan_on_a_card_is_listed_apart_and_changes_no_exit_code(deployment):
    alpha = next(sd.spec for sd in deployment.services() if sd.name == "alpha")
    intruder = inspect_of(alpha, cid="x-id", pid=9000, name="model-text\x1b[2J", image="old/vllm:\x07v1", devices=["/dev/davinci3"])
    privileged = inspect_of(alpha, cid="p-id", pid=9100, name="model-emb", devices=[], privileged=True)
    facts = with_container(with_container(facts_of(deployment), intruder), privileged)
    _, table, doc, code = status_of(deployment, facts)
    others = [c for c in doc["hosts"][0]["containers"] if not c["planned"]]
    assert {(c["name"], tuple(c["cards"]), c["privileged"]) for c in others} == {
        ("model-text\x1b[2J", (3,), False), ("model-emb", tuple(range(8)), True)
    }
    assert code == 0
    after = table.split("not in the plan, holding cards of this host:")[1]
    assert "model-text\\x1b[2J  3" in after and "\x1b" not in table and "\x07" not in table
    assert any(line.startswith("  model-emb ") and " all " in line for line in after.splitlines())


def test_each_routers_workers_are_shown_and_a_replica_it_sees_unhealthy_exits_one():
    deployment = deployment_of(fleet([host("npu-a")], [service("bge", 1, 0.1, replicas=2)]))
    [hd] = deployment.hosts
    (rd,) = hd.routers
    running = tuple(live_container(sd.spec) for sd in (*hd.services, rd))

    def shown(body):
        return status_of(deployment, HostFacts(containers=running, router_workers={rd.name: body}, clock=CLOCK))

    _, table, doc, code = shown(workers_body({url: True for url in rd.workers}))
    assert code == 0 and "router bge-router sees: bge-1 healthy, bge-2 healthy" in table
    [router] = doc["hosts"][0]["routers"]
    assert router["workers"] == [{"replica": f"bge-{i}", "url": rd.workers[i - 1], "seen": "healthy"} for i in (1, 2)]
    _, table, doc, code = shown(workers_body({rd.workers[0]: True, rd.workers[1]: False, "http://10.9.9.9:1": True}))
    assert code == 1 and "bge-2 unhealthy, http://10.9.9.9:1 (not a planned replica) healthy" in table
    _, table, doc, code = shown(workers_body({rd.workers[0]: True}))
    assert code == 1 and "bge-2 not listed" in table
    _, table, doc, code = shown("curl: (7) Failed to connect")
    assert code == 1 and "router bge-router: its /workers could not be read" in table
    assert doc["hosts"][0]["routers"][0]["workers"] is None


def test_the_table_fits_120_columns_for_the_committed_stacks_and_a_large_fleet_of_long_names():
    """Every host of prod and staging running its plan, and 40 hosts of long service names, long images
    and a container outside the plan: the image column gives way (its start cut), nothing else does."""
    long_image = "swr.cn-south-1.myhuaweicloud.com/ascendhub/vllm-ascend:v0.20.2rc1-800I-A2-openeuler24.03-lts-py3.11"
    big = fleet(
        [host(f"npu-rack{r:02d}-node{n:02d}", address=f"10.120.{r}.{100 + n}") for r in range(8) for n in range(5)],
        [service(f"qwen25-72b-instruct-w8a8-team{i:02d}", 8, 0.85, image=long_image) for i in range(35)]
        + [service("bge-m3-embedding-multilingual", 1, 0.1, replicas=5)],
    )
    stacks = [deployment_of(load_fleet(s)[0]) for s in ("prod", "staging")] + [deployment_of(big)]
    tables = []
    for deployment in stacks:
        hosts = []
        for hd in deployment.hosts:
            running = [live_container(spec) for _, spec, _ in hd.containers]
            foreign = dataclasses.replace(running[0], id="f", name="model-text-of-the-old-compose-deployment", image=long_image) if running else None
            hosts.append(host_status(hd, HostFacts(containers=(*running, *([foreign] if foreign else ())), clock=CLOCK)))
        tables.append(render(deployment, hosts, "table"))
        lines = tables[-1].splitlines()
        assert max(map(len, lines)) <= WIDTH, "\n".join(line for line in lines if len(line) > WIDTH)
    assert "qwen-long  4-7    up (healthy)  quay.io/ascend/vllm-ascend:v0.20.2rc1  http://192.0.2.10:6006/v1" in tables[0]
    assert re.search(r"^  qwen-72b +0-7 +up \(healthy\)", tables[1], re.M) and "router bge-m3-router" in tables[1]
    assert "...2-openeuler24.03-lts-py3.11  http://10.120.0.100:8001/v1" in tables[2]
    doc = json.loads(render(deployment, hosts, "json"))
    assert doc["hosts"][0]["containers"][1]["image"] == long_image  # whole in the JSON


def test_durations_and_card_lists_read_as_an_operator_writes_them():
    assert [duration(s) for s in (0, 59, 60, 3600, 3750, 86400, 90000 + 59)] == ["0s", "59s", "1m", "1h", "1h2m", "1d", "1d1h"]
    assert [cards_text(c) for c in ((), (0,), (0, 1, 2, 3), (0, 2, 4, 5, 6, 7))] == ["-", "0", "0-3", "0,2,4-7"]
    assert cards_text(tuple(range(8)), 8) == "all"


def test_the_gather_script_frames_the_hosts_clock_and_the_facts_read_it(deployment):
    script = gather_script(required(deployment.hosts[0]))
    assert "date +%s 2>&1 | f clock" in script and subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
    assert parse_facts(gathered(("clock", "", f"{CLOCK}\n"), ("npu-smi-rc", "", "0"))).clock == CLOCK
    for bad in ("²", "-5", "1" * 13, "date: not found"):
        assert parse_facts(gathered(("clock", "", bad), ("npu-smi-rc", "", "0"))).clock is None


def test_status_reads_every_host_in_the_one_gather_round_trip_doctor_makes(monkeypatch, deployment):
    scripts = []

    def fake_run_script(hd, script, *, timeout=None):
        scripts.append(script)
        from ops.ssh import RemoteResult
        return RemoteResult(True, 0, gathered(("docker-inspect", "", "[]"), ("npu-smi-rc", "", "0")), "", 0.1)

    monkeypatch.setattr(doctor, "run_script", fake_run_script)
    text, code = doctor.run_status(deployment, "json")
    hd = deployment.hosts[0]
    images = sorted({spec.image for _, spec, _ in hd.containers})
    assert scripts == [gather_script(required(hd), hd.shared_cards, [], "a2", images)]
    assert code == 1 and [c["state"] for c in json.loads(text)["hosts"][0]["containers"]] == ["missing"] * 3


def test_python_m_allocation_status_shows_an_unreachable_host_and_exits_two(tmp_path):
    path = tmp_path / "Pulumi.t.yaml"
    # Port 1 on loopback refuses at once: the host is unreachable without waiting.
    path.write_text(SEED_UNPINNED.replace("address: 192.0.2.10", "address: 127.0.0.1\n      sshPort: 1"))
    result = spawn("status", "--config", str(path))
    assert result.returncode == 2, result.stderr
    assert "host npu-a (ssh://root@127.0.0.1:1) is unreachable" in result.stdout
    assert "unknown" in result.stdout and result.stderr == ""


def test_status_on_the_kubernetes_target_is_refused_in_one_paragraph_naming_kubectl(cli, tmp_path):
    path = tmp_path / "Pulumi.k.yaml"
    path.write_text(SEED_UNPINNED + "  ascend-fleet:target: kubernetes\n")
    result = cli("status", "--config", str(path))
    assert result.returncode == 1 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("error: status: stack k targets kubernetes") and "kubectl get pods -o wide" in line


def test_status_of_named_services_reads_only_their_hosts_and_shows_only_their_containers(monkeypatch):
    deployment = deployment_of(load_fleet("staging")[0])
    read = []

    def fake_run_script(hd, script, *, timeout=None):
        from ops.ssh import RemoteResult
        read.append(hd.name)
        running = [inspect_of(spec, cid=f"{name}-id", pid=10) for name, spec, _ in hd.containers]
        return RemoteResult(True, 0, gathered(("docker-inspect", "", json.dumps(running)), ("npu-smi-rc", "", "0")), "", 0.1)

    monkeypatch.setattr(doctor, "run_script", fake_run_script)
    text, code = doctor.run_status(deployment, "json", services=frozenset({"qwen-vl"}))
    assert read == ["npu-s2"]
    [h] = json.loads(text)["hosts"]
    assert [c["name"] for c in h["containers"]] == ["qwen-vl"] and h["routers"] == [] and code == 0
    text, _ = doctor.run_status(deployment, "json", services=frozenset({"bge-m3"}))
    shown = {h["name"]: [c["name"] for c in h["containers"]] for h in json.loads(text)["hosts"]}
    assert shown == {"npu-s1": ["bge-m3-1", "bge-m3-router"], "npu-s2": ["bge-m3-2"], "npu-s3": ["bge-m3-3"]}


def test_status_of_an_unknown_service_is_refused_in_one_paragraph_naming_the_services(cli):
    result = cli("status", "--stack", "staging", "bge-m3", "qwen-vll")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        "error: status qwen-vll: stack staging has no service of that name (did you mean 'qwen-vl'?); "
        "its services: bge-m3 (replicas 1 to 3, router bge-m3-router), qwen-72b, qwen-long, qwen-vl\n"
    )


def test_the_example_in_the_commands_page_is_what_status_prints():
    """docs/commands.md shows staging with one container stopped and one host unreachable: this output."""
    deployment = deployment_of(load_fleet("staging")[0])
    hosts = []
    for hd in deployment.hosts:
        running = [dataclasses.replace(live_container(spec), started_at="2025-12-29T21:12:00Z") for _, spec, _ in hd.containers]
        running = [dataclasses.replace(c, status="exited", exit_code=137, finished_at="2025-12-31T23:48:00Z") if c.name == "qwen-long" else c
                   for c in running]  # fmt: skip
        workers = {rd.name: workers_body({url: True for url in rd.workers}) for rd in hd.routers}
        gone = Finding("unreachable", f"host {hd.name} (ssh://root@{hd.host.address}:22) is unreachable: ssh: connect to host "
                       f"{hd.host.address} port 22: Connection timed out")  # fmt: skip
        read = gone if hd.name == "npu-s3" else HostFacts(containers=tuple(running), router_workers=workers, clock=CLOCK)
        hosts.append(host_status(hd, read))
    page = (Path(__file__).resolve().parents[1] / "docs" / "commands.md").read_text()
    assert f"```\n{render(deployment, hosts, 'table')}\n```" in page


def test_the_hosts_npu_exporter_is_a_planned_container_with_no_endpoint():
    deployment = deployment_of(fleet([host("npu-a")], [service("a")], metrics={"npuExporter": {"image": "registry.example/npu-exporter:v6.0.0"}}))
    [hd] = deployment.hosts
    running = tuple(live_container(spec) for _, spec, _ in hd.containers)
    [h] = json.loads(render(deployment, [host_status(hd, HostFacts(containers=running, clock=CLOCK))], "json"))["hosts"]
    exporter = h["containers"][-1]
    assert (exporter["name"], exporter["kind"], exporter["service"], exporter["endpoint"], exporter["serving"]) == (
        hd.exporter.name, "exporter", None, None, True,
    )  # fmt: skip


def test_each_member_of_a_multi_host_service_is_listed_with_its_role_host_cards_and_state():
    deployment = deployment_of(group_values())
    hosts = [host_status(hd, dataclasses.replace(running_facts(hd), clock=CLOCK)) for hd in deployment.hosts]
    doc, table = json.loads(render(deployment, hosts, "json")), render(deployment, hosts, "table")
    assert exit_code(hosts) == 0
    member = {"cards": [0, 1, 2, 3], "state": "running", "health": "healthy", "serving": True}
    assert doc["groups"] == [{"name": "ds", "endpoint": "http://10.0.0.1:8000/v1", "serving": True, "members": [
        {"name": "ds-node0", "role": "leader", "host": "npu-a", **member}, {"name": "ds-node1", "role": "follower", "host": "npu-b", **member},
    ]}]  # fmt: skip
    rows = {c["name"]: (c["kind"], c["service"], c["role"], c["endpoint"]) for h in doc["hosts"] for c in h["containers"]}
    assert rows == {"solo": ("service", "solo", None, "http://10.0.0.1:8001/v1"),
                    "ds-node0": ("member", "ds", "leader", "http://10.0.0.1:8000/v1"), "ds-node1": ("member", "ds", "follower", None)}  # fmt: skip
    assert table.endswith(
        "group ds (http://10.0.0.1:8000/v1): 2 of 2 members running and healthy\n"
        "  member    role      host   cards  status\n"
        "  ds-node0  leader    npu-a  0-3    up (healthy)\n"
        "  ds-node1  follower  npu-b  0-3    up (healthy)"
    )
    hosts[1] = host_status(deployment.hosts[1], HostFacts(clock=CLOCK))
    [group] = json.loads(render(deployment, hosts, "json"))["groups"]
    assert exit_code(hosts) == 1 and group["serving"] is False and group["members"][1]["state"] == "missing"
    assert "group ds (http://10.0.0.1:8000/v1): 1 of 2 members running and healthy" in render(deployment, hosts, "table")


def test_status_of_a_multi_host_service_reads_every_host_of_its_members_and_only_theirs():
    deployment = deployment_of(group_values())
    assert services_named(deployment, ["ds"]) == {"ds"}
    assert [hd.name for hd in hosts_of(deployment, frozenset({"ds"})).hosts] == ["npu-a", "npu-b"]
    assert [hd.name for hd in hosts_of(deployment, frozenset({"solo"})).hosts] == ["npu-a"]
    hosts = [only(host_status(hd, running_facts(hd)), frozenset({"solo"})) for hd in deployment.hosts[:1]]
    assert json.loads(render(deployment, hosts, "json"))["groups"] == []


def test_each_instance_of_a_disaggregated_service_is_listed_with_its_role_and_the_proxy_after_them():
    from tests.support.disaggregated import example

    deployment = example()
    hosts = [host_status(hd, dataclasses.replace(running_facts(hd), clock=CLOCK)) for hd in deployment.hosts]
    doc, table = json.loads(render(deployment, hosts, "json")), render(deployment, hosts, "table")
    assert exit_code(hosts) == 0 and services_named(deployment, ["qwen-pd"]) == {"qwen-pd"}
    up = {"state": "running", "health": "healthy", "serving": True, "host": "npu-a"}
    assert doc["disaggregated"] == [{"name": "qwen-pd", "endpoint": "http://10.20.0.11:8002/v1", "serving": True, "containers": [
        {"name": "qwen-pd-prefill", "role": "prefill", "cards": [0, 1, 2, 3], **up},
        {"name": "qwen-pd-decode", "role": "decode", "cards": [4, 5, 6, 7], **up},
        {"name": "qwen-pd-proxy", "role": "proxy", "cards": [], **up},
    ]}]  # fmt: skip
    rows = {c["name"]: (c["kind"], c["service"], c["role"]) for h in doc["hosts"] for c in h["containers"]}
    assert rows == {"qwen-pd-prefill": ("role", "qwen-pd", "prefill"), "qwen-pd-decode": ("role", "qwen-pd", "decode"),
                    "qwen-pd-proxy": ("proxy", "qwen-pd", None)}  # fmt: skip
    assert table.endswith(
        "disaggregated qwen-pd (http://10.20.0.11:8002/v1): 3 of 3 containers running and healthy\n"
        "  container        role     host   cards  status\n"
        "  qwen-pd-prefill  prefill  npu-a  0-3    up (healthy)\n"
        "  qwen-pd-decode   decode   npu-a  4-7    up (healthy)\n"
        "  qwen-pd-proxy    proxy    npu-a  -      up (healthy)"
    )
    gone = dataclasses.replace(running_facts(deployment.hosts[0]), containers=())
    [pd] = json.loads(render(deployment, [host_status(deployment.hosts[0], gone)], "json"))["disaggregated"]
    assert pd["serving"] is False and [c["state"] for c in pd["containers"]] == ["missing"] * 3
