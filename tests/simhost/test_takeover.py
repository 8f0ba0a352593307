"""Day zero on prod's host, for real: the original compose deployment runs, the program's own steps
take over from it, a reboot brings back exactly the plan, `doctor` sees an old container re-enabled,
and the way back of docs/moving-from-compose.md works.

The original deployment's two containers run as its compose file had them (DOMAIN.md): restart
`always`, every `/dev/davinciN`, ports 7007, 9009 and 6006, `model-emb-vl` serving bge-m3 and qwen-vl,
`model-text` qwen-long, from the simulated vLLM image under the original image's tag. They are
privileged where this machine's dockerd can start privileged containers; here it often cannot (a
sandboxed daemon cannot grant every capability), and every card passed in as a device holds the
cards the same way. The host check runs over SSH; then `render --format docker-run`'s script, the
program's steps in `pulumi up`'s order (takeover, device-share, start order, containers). The reboot
is a real one of the host's dockerd (`SimHost.reboot`): what comes back is its restore's choice.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cli.stackfile import load_fleet
from sim.host import IMAGE, SimHost
from tests.support.sim_stacks import prod_on_the_simulated_host
from tests.support.takeover import OLD, PLANNED, restart_policy, serving, start_the_compose_deployment
from tests.support.pipeline import deployment_of

REPO = Path(__file__).resolve().parents[2]


def doctor(config: Path) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "allocation", "doctor", "--config", str(config)]
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_prod_takes_over_the_compose_deployment_a_reboot_brings_back_the_plan_and_the_way_back_works(
    sim_host: SimHost, tmp_path: Path, boot_files
) -> None:
    config = prod_on_the_simulated_host(sim_host, tmp_path)
    fleet, _ = load_fleet(config=str(config))
    deployment = deployment_of(fleet)
    [hd] = [h for h in deployment.hosts if h.in_use]
    models = sorted({sd.plan.service.model for sd in hd.services})
    for model in models:
        sim_host.make_model(model)
    start_the_compose_deployment(sim_host, "/disk2/bge-m3", "/disk2/Qwen3.6-27B-w8a8")

    # Without `replaces` the host check refuses the old containers, with a way out a reboot keeps.
    assert hd.host.replaces == list(OLD)
    unnamed = deployment_of(fleet.model_copy(update={"hosts": [hd.host.model_copy(update={"replaces": []})]}))
    refused = sim_host.run(unnamed.hosts[0].check_script, check=False, timeout=120)
    assert refused.returncode == 1
    assert "container model-text outside the plan (running, restart always) holds" in refused.stderr
    assert "docker update --restart=no model-emb-vl && docker stop model-emb-vl" in refused.stderr
    checked = sim_host.run(hd.check_script, check=False, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    script = subprocess.run(
        [sys.executable, "-m", "allocation", "render", "--config", str(config), "--format", "docker-run"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    # As rendered: probes every 2 s already (records.health), and doctor must find them as planned.
    started = subprocess.run(["sh", "-c", script], env=sim_host.docker_env(), capture_output=True, text=True)
    assert started.returncode == 0, started.stdout + started.stderr
    for name in PLANNED:
        sim_host.wait_healthy(name, timeout=120)
    assert [restart_policy(sim_host, n) for n in OLD] == [(False, "no"), (False, "no")]

    assert sim_host.reboot().started == sorted(PLANNED)
    for name in PLANNED:
        sim_host.wait_healthy(name, timeout=120)
    assert [restart_policy(sim_host, n)[0] for n in OLD] == [False, False]
    clean = doctor(config)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    sim_host.local_docker("update", "--restart=always", "model-text")  # re-enabled by hand
    found = doctor(config)
    assert found.returncode == 1
    assert "model-text" in found.stdout and "a reboot" in found.stdout, found.stdout

    # The way back (docs/moving-from-compose.md): the stack's containers go (pulumi destroy),
    # the old ones get their restart policy back and start.
    sim_host.local_docker("rm", "-f", *PLANNED)
    sim_host.local_docker("update", "--restart=always", *OLD)
    sim_host.local_docker("start", *OLD)
    for port in (7007, 9009, 6006):
        serving(sim_host, port)


def test_a_replaced_name_no_container_has_leaves_the_container_whose_id_it_begins_or_is_running_as_it_was(
    sim_host: SimHost, tmp_path: Path
) -> None:
    """dockerd itself reads a name no container has as a full ID, else as an ID prefix (moby
    `GetContainer`): `replaces` naming the first letters of one unrelated container's ID and the whole
    ID of another must leave both running with restart `always`."""
    labels = [f"--label={k}={v}" for k, v in sim_host.labels().items()]
    run = ["run", "-d", "--restart", "always", *labels, IMAGE, "sleep", "100000"]
    begun, whole = (sim_host.local_docker(*run).stdout.strip() for _ in range(2))
    prefix = begun[:12]
    for name, container in ((prefix, begun), (whole, whole)):  # what this daemon makes of the names
        assert sim_host.local_docker("inspect", "--format", "{{.Id}}", name).stdout.strip() == container

    config = prod_on_the_simulated_host(sim_host, tmp_path)
    fleet, _ = load_fleet(config=str(config))
    replacing = fleet.model_copy(update={"hosts": [h.model_copy(update={"replaces": [prefix, whole]}) for h in fleet.hosts]})
    [hd] = [h for h in deployment_of(replacing).hosts if h.in_use]
    result = sim_host.run(hd.takeover_script, check=False, timeout=120)  # over SSH, as pulumi up runs it

    assert result.returncode == 0, result.stdout + result.stderr
    for name in (prefix, whole):
        assert f"no container is named {name} (removed already): nothing to take over" in result.stdout
    assert [restart_policy(sim_host, c) for c in (begun, whole)] == [(True, "always"), (True, "always")]
