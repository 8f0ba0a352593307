"""Taking over a running deployment: the host's `replaces`, from the stack file to the host.

Prod's host runs the original docker compose deployment (`model-emb-vl`, `model-text`: restart
`always`, every card, ports 7007, 9009, 6006). `pulumi up` must disable them for good (restart policy
`no`, then stopped: a bare `docker stop` is undone by the next reboot) before anything needs their
cards or ports, keep them for the way back, and refuse every other container outside the plan that
holds, or after a reboot would hold, what the plan needs. The scripts run here for real against a
stand-in `docker` that answers as Docker's CLI does and logs what it is asked.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

from allocation.config import parse_fleet
from allocation.errors import AllocationError, ConfigError
from views.exports.render import render
from records.host_check import host_check_script
from records.takeover import MAX_SCRIPT_BYTES, takeover_script
from views.diff import diff_plans, render_diff
from records.start_order import longest_start
from views.report import plan_json, render_plan
from tests.support.stacks import host, service
from tests.support.pulumi_harness import ASCEND_HOST, CONTAINER, REMOTE_COMMAND, REMOTE_IMAGE, run_program
from tests.support.stacks import values_of
from tests.support.pipeline import deployment_of
from tests.support.docker_fakes import container_id, resolving_docker


def fleet_values(**host_settings) -> dict:
    return {
        "hosts": [host("npu-a", **host_settings)],
        "services": [service("bge-m3", 1, 0.1, devices=[0], apiPort=7007), service("qwen-long", 4, 0.9, devices=[4, 5, 6, 7], apiPort=6006)],
    }  # fmt: skip


def deployment(**host_settings):
    return deployment_of(fleet_values(**host_settings), "prod")


COMPOSE = (
    "model-emb-vl|running|always|true|/dev/davinci0 /dev/davinci1 |7007 9009 |\n"
    "model-text|running|always|true|/dev/davinci4 |6006 |\n"
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    resolving_docker(tmp_path)
    (tmp_path / "containers").write_text(COMPOSE)
    (tmp_path / "calls").write_text("")
    return tmp_path


def run(root: Path, script: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ROOT": str(root)}
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, timeout=60)


def test_the_takeover_sets_restart_no_before_it_stops_each_container_and_keeps_them(root):
    result = run(root, takeover_script(deployment(replaces=["model-emb-vl", "model-text"]).hosts[0].host,
                                       ["model-emb-vl", "model-text"], root=str(root)))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "took over from model-emb-vl (was running, restart always): restart policy no, stopped, kept" in result.stdout
    calls = [c for c in (root / "calls").read_text().splitlines() if c.split()[1] in ("update", "stop")]
    # Restart policy first: a reboot between the two steps must not bring the container back.
    emb, text = container_id("model-emb-vl"), container_id("model-text")
    assert calls == [
        f"docker update --restart=no -- {emb}", f"docker stop -- {emb}",
        f"docker update --restart=no -- {text}", f"docker stop -- {text}",
    ]  # fmt: skip
    assert (root / "containers").read_text().splitlines()[0].startswith("model-emb-vl|exited|no|")
    again = run(root, takeover_script(deployment().hosts[0].host, ["model-emb-vl", "model-text"], root=str(root)))
    assert again.returncode == 0, "a second run changes nothing and still succeeds"


def test_a_replaced_container_already_removed_is_nothing_to_take_over(root):
    (root / "containers").write_text("")
    result = run(root, takeover_script(deployment().hosts[0].host, ["model-emb-vl"], root=str(root)))
    assert result.returncode == 0 and "no container is named model-emb-vl (removed already)" in result.stdout


def test_a_replaced_name_no_container_has_is_never_read_as_the_beginning_of_another_containers_id(root):
    """Docker reads a name no container has as an ID prefix (moby `GetContainer`): `replaces: [<the
    first letters of an unrelated container's ID>]` must leave that container as it is."""
    (root / "containers").write_text(COMPOSE + "unrelated|running|always|false|||\n")
    prefix = container_id("unrelated")[:6]
    result = run(root, takeover_script(deployment().hosts[0].host, [prefix, "model-text"], root=str(root)))
    assert result.returncode == 0, result.stderr
    assert f"no container is named {prefix} (removed already): nothing to take over" in result.stdout
    assert "unrelated|running|always|" in (root / "containers").read_text()
    assert "took over from model-text" in result.stdout


def test_a_takeover_docker_refuses_fails_with_one_paragraph_naming_the_container(root):
    docker = root / "bin/docker"
    docker.write_text(docker.read_text().replace('elif args[0] == "update":', 'elif args[0] == "update":\n    fail("permission denied")'))
    result = run(root, takeover_script(deployment().hosts[0].host, ["model-emb-vl"], root=str(root)))
    assert result.returncode == 1
    assert result.stderr.startswith("ascend-fleet: host npu-a cannot take over from model-emb-vl:")
    assert "model-emb-vl (running, restart always): docker update --restart=no failed: Error: permission denied" in result.stderr
    assert " stop " not in (root / "calls").read_text(), "never stopped while it would come back"


def check(root: Path, **host_settings) -> subprocess.CompletedProcess:
    hd = deployment(**host_settings).hosts[0]
    containers = [(s.plan, s.spec) for s in hd.services]
    script = host_check_script(hd.host, containers, stack="prod", ports=[7007, 6006], root=str(root))
    return run(root, script)


def test_the_host_check_refuses_containers_outside_the_plan_on_planned_cards_or_ports_with_a_way_out_that_survives_a_reboot(root):
    result = check(root)
    assert result.returncode == 1
    emb = "container model-emb-vl outside the plan (running, restart always) holds every card (privileged) port 7007"
    assert emb in result.stderr
    assert "take it out of service for good (docker update --restart=no model-emb-vl && docker stop model-emb-vl" in result.stderr
    assert "or list it under host npu-a's replaces" in result.stderr
    assert "container model-text outside the plan" in result.stderr


def test_the_host_check_lets_the_containers_the_host_replaces_and_the_stacks_own_pass(root):
    (root / "containers").write_text(COMPOSE + "bge-m3|running|unless-stopped|false|/dev/davinci0 |7007 |prod\n")
    result = check(root, replaces=["model-emb-vl", "model-text"])
    assert "outside the plan" not in result.stderr, result.stderr


def test_a_stopped_container_comes_back_after_a_reboot_only_with_restart_always(root):
    (root / "containers").write_text(
        "old-always|exited|always|false|/dev/davinci4 ||\n"
        "old-unless|exited|unless-stopped|false|/dev/davinci4 ||\n"
        "old-no|exited|no|false|/dev/davinci0 |7007 |\n"
        "elsewhere|running|always|false|/dev/davinci2 |8080 |\n"
    )
    result = check(root)
    assert "container old-always outside the plan (exited, restart always: a reboot starts it again) holds /dev/davinci4" in result.stderr
    for name in ("old-unless", "old-no", "elsewhere"):  # stays down, or holds nothing the plan uses
        assert f"container {name} " not in result.stderr


def test_replaces_is_checked_where_it_is_written():
    with pytest.raises(ConfigError, match=r"replaces names model-text more than once"):
        parse_fleet("prod", fleet_values(replaces=["model-text", "model-text"]))
    with pytest.raises(ConfigError, match=r"replaces"):
        parse_fleet("prod", fleet_values(replaces=["-rm"]))


def own_containers(replaces: list[str], on: str = "npu-a") -> dict:
    """npu-a runs bge-m3, chat's two replicas and its router, qwen-vl (renamed from old-vl, whose
    container it keeps) and the NPU exporter; npu-b runs nothing. Host `on` replaces `replaces`."""
    hosts = [host(h, **({"replaces": replaces} if h == on else {})) for h in ("npu-a", "npu-b")]
    return {
        "hosts": hosts,
        "metrics": {"npuExporter": {"image": "registry.example/npu-exporter:v6.0.0"}},
        "services": [
            service("bge-m3", 1, 0.1, host="npu-a", devices=[0]),
            service("chat", 1, 0.2, replicas=2, replicaPins=[{"host": "npu-a", "devices": [1]}, {"host": "npu-a", "devices": [2]}]),
            service("qwen-vl", 1, 0.3, host="npu-a", devices=[3], previousNames=["old-vl"]),
        ],
    }


@pytest.mark.parametrize(("name", "what"), [
    ("bge-m3", "bge-m3 on cards 0"),
    ("chat-2", "chat-2 on cards 2"),
    ("chat-router", "chat-router as the router of chat"),
    ("ascend-fleet-npu-exporter", "ascend-fleet-npu-exporter as the host's NPU exporter"),
    ("old-vl", "qwen-vl on cards 3"),
])  # fmt: skip
def test_replaces_never_names_a_container_the_plan_creates_on_that_host(name, what):
    """Docker names are unique per host: the takeover would stop the plan's own container for good."""
    with pytest.raises(AllocationError) as refused:
        deployment_of(own_containers(["model-text", name]))
    assert str(refused.value) == (
        f"stack test: cannot take over: host npu-a replaces {name}, the name of the plan's own container there "
        f"({what}), which the takeover would stop for good: rename the old container (docker rename {name} "
        f"{name}-old) and list that name under replaces."
    )
    assert deployment_of(own_containers([name], on="npu-b")).hosts[1].takeover_script, "another host's are its own"


def test_a_takeover_script_longer_than_a_host_can_be_handed_stops_the_plan_naming_the_host_its_size_and_replaces():
    """pulumi up hands a host script to `sh -c` as one argument, which Linux caps (MAX_ARG_STRLEN):
    the plan stops instead of `pulumi up` after the host check."""
    names = [f"old-{i:04d}-" + "x" * 115 for i in range(560)]  # 124 characters each
    with pytest.raises(AllocationError) as refused:
        deployment(replaces=names)
    size = len(takeover_script(deployment().hosts[0].host, names).encode())
    assert str(refused.value).startswith(
        f"stack prod: cannot take over: host npu-a: its takeover script would be {size:,} bytes, more than the "
        f"131,071 a host script can have (pulumi up hands it to sh -c as one argument, and Linux takes at most "
        f"32 pages, MAX_ARG_STRLEN, with its final NUL); replaces lists 560 names of {560 * 124:,} bytes: list fewer"
    )
    with pytest.raises(OSError) as too_long:
        subprocess.run(["sh", "-c", takeover_script(deployment().hosts[0].host, names)])
    assert too_long.value.errno == errno.E2BIG, "what pulumi up would have met"


def test_the_longest_takeover_the_plan_accepts_runs_under_sh_c(tmp_path: Path):
    names = [f"old-{i:04d}-" + "x" * 115 for i in range(515)]
    script = deployment(replaces=names).hosts[0].takeover_script
    assert MAX_SCRIPT_BYTES - 5000 < len(script.encode()) <= MAX_SCRIPT_BYTES
    (tmp_path / "docker").write_text("#!/bin/sh\n")  # no container at all
    (tmp_path / "docker").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    result = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0 and result.stdout.count("nothing to take over") == 515, result.stderr


def test_max_script_bytes_is_the_kernels_limit_on_one_argument():
    assert subprocess.run(["sh", "-c", ":" + " " * (MAX_SCRIPT_BYTES - 1)]).returncode == 0
    with pytest.raises(OSError) as too_long:
        subprocess.run(["sh", "-c", ":" + " " * MAX_SCRIPT_BYTES])
    assert too_long.value.errno == errno.E2BIG


def test_the_plan_lists_what_each_host_takes_over_and_the_diff_shows_it_first():
    old = plan_json(deployment())
    new = plan_json(deployment(replaces=["model-emb-vl", "model-text"]))
    assert new["hosts"][0]["replaces"] == ["model-emb-vl", "model-text"]
    table = render_diff(diff_plans(old, new, against="main"), "table").splitlines()
    assert table[1] == (
        "Takes over first: host npu-a stops and disables model-emb-vl, model-text (outside the plan: "
        "restart policy no, then stopped; kept for the way back) once every image of the host is present; "
        "their services are down from then until the new containers answer /health: at most 1800 s "
        "(startTimeoutSeconds of bge-m3)."
    )
    assert table[2].startswith("Will restart")
    markdown = render_diff(diff_plans(old, new, against="main"), "markdown")
    assert markdown.index("**Takes over first:**") < markdown.index("Will restart")
    assert not diff_plans(new, new).has_changes, "taken over already: nothing to say"
    fresh = render_diff(diff_plans(None, new), "table")
    assert "Takes over first: host npu-a stops and disables model-emb-vl" in fresh


@pytest.mark.parametrize(
    ("services", "longest"),
    [
        ([], (0, ())),
        ([("a", [0], 600)], (600, ("a",))),
        # One card shared: in name order, one after another; the cards apart load together.
        ([("vl", [0, 1, 2, 3], 1200), ("emb", [0], 600), ("long", [4, 5, 6, 7], 1500)], (1800, ("emb", "vl"))),
        ([("vl", [0, 1, 2, 3], 1200), ("emb", [0], 600), ("long", [4, 5, 6, 7], 2400)], (2400, ("long",))),
        # A chain through two shared cards: a (0), b (0, 1), c (1).
        ([("c", [1], 100), ("b", [0, 1], 100), ("a", [0], 100), ("d", [5], 250)], (300, ("a", "b", "c"))),
    ],
)
def test_the_new_containers_serve_at_most_their_start_timeouts_along_the_longest_chain_that_loads_in_turn(services, longest):
    assert longest_start(services) == longest


def test_the_plan_and_the_diff_say_how_long_the_taken_over_services_are_down():
    values = fleet_values(replaces=["model-emb-vl"])
    values["services"] += [service("qwen-vl", 4, 0.8, devices=[0, 1, 2, 3], apiPort=9009, startTimeoutSeconds=900)]
    down = "down from then until the new containers answer /health: at most 2700 s (startTimeoutSeconds of bge-m3, then qwen-vl)"
    new = deployment_of(values, "prod")
    table = " ".join(render_plan(new, "table", wide=True).split())
    assert f"takes over: model-emb-vl stop once every image of the host is present; their services are {down}" in table
    assert f"- takes over: model-emb-vl stop once every image" in render_plan(new, "markdown")
    diff = diff_plans(plan_json(deployment_of(fleet_values(), "prod")), plan_json(new), against="main")
    assert f"their services are {down}." in render_diff(diff, "table")
    assert json.loads(render_diff(diff, "json"))["hosts"][0]["takeoverDownSeconds"] == 2700


def test_pulumi_up_takes_over_after_the_check_and_before_every_container_and_the_device_share():
    run_ = run_program("prod", values_of("prod"))
    commands, containers = run_.by_name(REMOTE_COMMAND), run_.by_name(CONTAINER)
    takeover = commands["npu-a-takeover"]
    assert commands["npu-a-check"].urn in takeover.dependencies
    assert "\"$docker\" update --restart=no -- \"$id\"" in takeover.inputs["create"]
    assert "for name in model-emb-vl model-text; do" in takeover.inputs["create"]
    assert takeover.urn in commands["npu-a-device-share"].dependencies
    for name, container in containers.items():
        assert takeover.urn in container.dependencies, name
    assert "delete" not in takeover.inputs, "destroying the stack re-enables nothing by itself"


def test_the_takeover_waits_for_every_image_its_host_needs_pulled_or_built_and_nothing_of_another_host():
    values = {
        "hosts": [host("npu-a", replaces=["model-emb-vl"]), host("npu-b")],
        "services": [
            service("bge", 1, 0.1, replicas=2, router={"host": "npu-a"}),
            service("chat", 1, 0.5, host="npu-a", image="quay.io/ascend/vllm-ascend:v0.18.0rc1"),
        ],
        "metrics": {"npuExporter": {"image": "registry.example/npu-exporter:v6.0.0"}},
    }
    run_ = run_program("test", values)
    [hd] = [hd for hd in deployment_of(values, "test").hosts if hd.name == "npu-a"]
    hosts, commands = run_.by_name(ASCEND_HOST), run_.by_name(REMOTE_COMMAND)
    takeover = commands["npu-a-takeover"]
    images = {r.inputs["name"]: r.urn for r in run_.of_type(REMOTE_IMAGE) if r.parent == hosts["npu-a"].urn}
    assert sorted(images) == sorted(hd.images) and len(images) == 3, "two model images and the exporter's"
    build = commands["bge-router-image"]  # the router's image, built on npu-a from a pulled one
    assert "docker build" in build.inputs["create"]
    assert set(takeover.dependencies) == {commands["npu-a-check"].urn, *images.values(), build.urn}
    for image in images.values():
        assert takeover.urn not in run_.by_urn()[image].dependencies, "the pulls never wait for the takeover"


def test_the_docker_run_export_takes_over_before_the_device_share_and_the_containers():
    script = render(deployment(replaces=["model-emb-vl"]), "docker-run")
    assert script.index("for name in model-emb-vl; do") < script.index("docker run")
    compose = render(deployment(replaces=["model-emb-vl"]), "compose")
    assert "# first take model-emb-vl out of service for good: docker update --restart=no NAME && docker stop NAME" in compose
