"""The prod stack on the simulated 910B host, and starting what `render` writes there: shared by the
simulated-host tests of the start gate, the start order, shared cards and held cards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cli.stackfile import locate, stack_values
from sim.host import CLAIMS_DIR, IMAGE, SimHost
from tests.simhost.probes import script_probed_often

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
