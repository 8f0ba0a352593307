"""The fix, shown for real: the planned layout of Pulumi.prod.yaml starts healthy on a 910B host.

The prod stack file is read as it is in the repository; only what a simulated
host must differ in is swapped (the host's SSH endpoint, the image, and the
simulator's card-NIC folder). The containers are started by running the
`render --format docker-run` script itself against the simulated host.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sim.host import CLAIMS_DIR, SimHost
from tests.simhost.probes import script_probed_often
from tests.support.sim_stacks import REPO, prod_on_the_simulated_host


def test_the_planned_prod_layout_starts_all_three_services_healthy(sim_host: SimHost, tmp_path: Path, boot_files) -> None:
    config = prod_on_the_simulated_host(sim_host, tmp_path)
    plan = json.loads(
        subprocess.run(
            [sys.executable, "-m", "allocation", "plan", "--config", str(config), "--format", "json"],
            cwd=REPO, capture_output=True, text=True, check=True,
        ).stdout
    )  # fmt: skip
    services = {s["name"]: s for s in plan["hosts"][0]["services"]}
    assert services["bge-m3"]["devices"] == [0] and services["qwen-vl"]["devices"] == [0, 1, 2, 3]
    for s in services.values():
        command = s["container"]["command"]  # qwen-vl's runs behind its start gate
        sim_host.make_model(command[command.index("serve") + 1])

    script = subprocess.run(
        [sys.executable, "-m", "allocation", "render", "--config", str(config), "--format", "docker-run"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    script = script_probed_often(script, len(services))
    started = subprocess.run(["sh", "-c", script], env=sim_host.docker_env(), capture_output=True, text=True)
    assert started.returncode == 0, started.stderr

    for name in services:
        sim_host.wait_healthy(name, timeout=90)
    for name, s in services.items():
        models = sim_host.run(f"wget -q -O - http://127.0.0.1:{s['apiPort']}/v1/models").stdout
        assert json.loads(models)["data"][0]["id"] == name
    # bge-m3 and qwen-vl share card 0 on disjoint HCCL ranges: two claims on that card.
    assert len(list((CLAIMS_DIR / "card0").iterdir())) == 2
