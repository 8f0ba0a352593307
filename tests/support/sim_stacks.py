"""The prod stack on the simulated 910B host, and starting what `render` writes there: shared by the
simulated-host tests of the start gate, the start order, shared cards and held cards; a planned
container started as `render`'s docker-run does (`run_args`: doctor's and status's tests); and the
staging stack on three simulated hosts (sim/fleet.py) with its real router."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cli.stackfile import locate, stack_values
from ops.ssh import run_script
from records.deployment import Deployment
from sim.fleet import SimFleet, card_state_env
from sim.host import CLAIMS_DIR, IMAGE, SimHost, free_port
from sim.router_image import build_router_image
from tests.simhost.probes import probed_often, script_probed_often
from tests.support.pipeline import deployment_of
from tests.support.rolling import LOCAL_DOCKER
from views.exports.render import docker_run_args

REPO = Path(__file__).resolve().parents[2]
LABEL = "ascend-fleet.stack=prod-on-sim"  # the stack of Pulumi.prod-on-sim.yaml
DCMI_BUSY = "dcmi module initialize failed. ret is -8005"
WAITING = "ascend-fleet: start gate: waiting for"
NO_MEMORY = "No available memory for the cache blocks"


def prod_values_on_the_simulated_host(sim: SimHost) -> dict:
    """The prod stack's `ascend-fleet:` values with the host's SSH endpoint, the image and the
    simulator's card-NIC folder swapped for the simulated host's (tests/engine deploys them too)."""
    values = stack_values(locate("prod", None))
    [host] = values["hosts"]
    host.update(address=sim.address, sshPort=sim.ssh_port)
    values["ssh"] = {"identityFile": str(sim.identity_file), "knownHostsFile": str(sim.known_hosts_file)}
    values["defaults"] = {
        **values.get("defaults", {}),
        "image": IMAGE,
        "mounts": [{"source": str(CLAIMS_DIR), "target": str(CLAIMS_DIR), "readOnly": False}],
    }
    return values


def prod_on_the_simulated_host(sim: SimHost, tmp_path: Path) -> Path:
    """The prod stack file for the simulated host. Its models load in 1 s; a test that needs two
    loads on a card to meet stretches them (tests/simhost/loads.py)."""
    values = prod_values_on_the_simulated_host(sim)
    values["defaults"]["env"] = {**values["defaults"].get("env", {}), "NPU_SIM_LOAD_SECONDS": "1"}
    path = tmp_path / "Pulumi.prod-on-sim.yaml"
    path.write_text(json.dumps({"config": {f"ascend-fleet:{k}": v for k, v in values.items()}}))  # JSON is YAML
    return path


def allocation(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "allocation", *args], cwd=REPO, capture_output=True, text=True)


def start_rendered(sim: SimHost, config) -> None:
    """The models of the stack file `config` made, and its `render --format docker-run` script run,
    probed often (tests/simhost/probes.py)."""
    plan = json.loads(allocation("plan", "--config", str(config), "--format", "json").stdout)
    for s in plan["hosts"][0]["services"]:
        command = s["container"]["command"]
        sim.make_model(command[command.index("serve") + 1])
    script = allocation("render", "--config", str(config), "--format", "docker-run").stdout
    script = script_probed_often(script, len(plan["hosts"][0]["services"]))
    started = subprocess.run(["sh", "-c", script], env=sim.docker_env(), capture_output=True, text=True)
    assert started.returncode == 0, started.stderr


def start_prod(sim: SimHost, tmp_path) -> dict:
    """The prod layout running healthy on the simulated host (card 0 in device-share mode)."""
    config = prod_on_the_simulated_host(sim, tmp_path)
    start_rendered(sim, config)
    for name in ("bge-m3", "qwen-vl", "qwen-long"):
        sim.wait_healthy(name, timeout=120)
    return json.loads(config.read_text())


def run_args(
    sim: SimHost, spec, *, env: dict[str, str] | None = None, volume: tuple[str, str] | None = None,
    options: tuple[str, ...] = (), image: str | None = None,
) -> list[str]:
    """`docker run` args of a spec, labelled for the fixture's cleanup, health probed every second
    (tests/simhost/probes.py; doctor judges against those specs, `probed_deployment`). The extra label
    is not in the spec (doctor compares only the spec's labels). `env`: values of the spec's own keys
    changed by hand; `volume`: (old, new) `--volume` argument, a mount changed by hand; `options`: more
    `docker run` options (what a simulated host needs that a real one would not); `image`: the image to
    create it from instead of the spec's name (an ID, as the docker provider creates it)."""
    args = docker_run_args(probed_often(spec))
    for key, value in (env or {}).items():
        args = [f"--env={key}={value}" if a.startswith(f"--env={key}=") else a for a in args]
    if volume is not None:
        assert volume[0] in args, args
        args = [volume[1] if a == volume[0] else a for a in args]
    end = args.index("--")  # options end there; the image follows
    assert args[end + 1] == spec.image
    test_labels = [f"--label={k}={v}" for k, v in sim.labels().items()]
    return ["run", *args[:end], *test_labels, *options, "--", image or spec.image, *args[end + 2 :]]


STAGING_HOSTS = ("npu-s1", "npu-s2", "npu-s3")
PINNED_WINDOWS = ((16000, 17000), (60000, 63000))
"""Around the HCCL and vLLM windows staging pins: no API port of the simulated staging goes there."""


def _api_port(taken: set[int]) -> int:
    """A port free on this machine, outside PINNED_WINDOWS and not `taken` (then it is)."""
    while (port := free_port()) in taken or any(a <= port <= b for a, b in PINNED_WINDOWS):
        pass
    taken.add(port)
    return port


def fleet_defaults(start_timeout_seconds: int) -> dict:
    """The `defaults` of a stack on simulated hosts (sim/fleet.py): the npu-sim image, loading at once, the
    simulated cards' state folder mounted, a short stop grace and a small /dev/shm."""
    return {
        "image": IMAGE,
        "mounts": [{"source": str(CLAIMS_DIR), "target": str(CLAIMS_DIR), "readOnly": False}],
        "env": {"NPU_SIM_LOAD_SECONDS": "0"},
        "startTimeoutSeconds": start_timeout_seconds,
        "stopGraceSeconds": 10,
        "shmSizeMiB": 64,
    }


def staging_on_the_simulated_fleet(fleet: SimFleet, tmp_path: Path, connect_timeout: int = 10) -> Path:
    """The staging stack file on `fleet`'s first three simulated hosts: each host's SSH endpoint, the
    fleet's key and known_hosts, the npu-sim image, and ports of their own for every API port and the
    router's (one dockerd publishes every simulated host's ports); cards, windows and replicas as pinned."""
    values = stack_values(locate("staging", None))
    endpoints = dict(zip(STAGING_HOSTS, fleet.endpoints))
    for h in values["hosts"]:
        h.update(address=endpoints[h["name"]].address, sshPort=endpoints[h["name"]].ssh_port)
    values["ssh"] = {"identityFile": str(fleet.identity_file), "knownHostsFile": str(fleet.known_hosts_file),
                     "connectTimeoutSeconds": connect_timeout}  # fmt: skip
    values["defaults"] = {
        "image": IMAGE, "startTimeoutSeconds": 120, "shmSizeMiB": 64, "env": {"NPU_SIM_LOAD_SECONDS": "1"},
        "mounts": [{"source": str(CLAIMS_DIR), "target": str(CLAIMS_DIR), "readOnly": False}],
    }  # fmt: skip
    taken: set[int] = set()
    for service in values["services"]:
        for pin in service.get("replicaPins", ()):
            pin["apiPort"] = _api_port(taken)
        keys = ("routerPort", "routerMetricsPort") if "replicaPins" in service else ("apiPort",)
        service.update({key: _api_port(taken) for key in keys})
    path = tmp_path / "Pulumi.staging-on-sim.yaml"
    path.write_text(json.dumps({"config": {f"ascend-fleet:{k}": v for k, v in values.items()}}))  # JSON is YAML
    return path


def start_staging(sim: SimHost, fleet: SimFleet, config: Path) -> Deployment:
    """Every planned container of the staging file `config` running healthy on its simulated host: the
    services with their host's cards (`card_state_env`; each host's shared card in device-share mode,
    as its device-share step leaves it), then the router, the real vllm-router in its stand-in image
    (sim/router_image.py) after its worker list is written by the program's own script. The router
    runs in the host's network: its workers' addresses (127.0.1.K) are loopback addresses of this
    machine, which a container's own network cannot reach."""
    deployment = deployment_of(_values(config), "staging-on-sim")
    endpoints = dict(zip(STAGING_HOSTS, fleet.endpoints))
    for hd in deployment.hosts:
        shared = endpoints[hd.name].card_state / "device-share"
        shared.mkdir(exist_ok=True)
        for card in hd.shared_cards:
            (shared / f"card{card}").write_text("1")
        for sd in hd.services:
            sim.make_model(sd.plan.service.model)
    for hd in deployment.hosts:  # on each host, the services alone on their cards first, then the neighbours
        env = card_state_env(endpoints[hd.name])
        for sd in sorted(hd.services, key=lambda sd: bool(sd.after)):
            sim.docker(*run_args(sim, sd.spec, options=tuple(f"--env={k}={v}" for k, v in env.items())))
            sim.wait_healthy(sd.spec.name, timeout=120)
    (rd,) = deployment.routers
    build_router_image(LOCAL_DOCKER, rd.base_image)
    hd = next(hd for hd in deployment.hosts if hd.name == rd.plan.host_name)
    written = run_script(hd, rd.workers_script)
    assert written.returncode == 0, written.stderr
    sim.docker(*run_args(sim, rd.spec, options=("--network=host",)))
    sim.wait_healthy(rd.spec.name, timeout=120)
    return deployment


def _values(config: Path) -> dict:
    """The `ascend-fleet:` values of a stack file written here (JSON)."""
    return {k.removeprefix("ascend-fleet:"): v for k, v in json.loads(config.read_text())["config"].items()}
