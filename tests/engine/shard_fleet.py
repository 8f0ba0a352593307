"""A fleet deployed as shards onto simulated hosts (sim/fleet.py), and its shard stacks under the engine.

Shared by tests/engine/test_shards_engine.py and benchmarks/shard_bench.py. The fleet file is the
operator's: `ascend-fleet:shards`, hosts pinned to their shards (`shard:`), four small
services per host (TP 1, each on a card of its own) with `apiPort` pins distinct across the
fleet (one dockerd publishes every simulated host's ports). `python -m allocation shards` cuts it,
and each cut file becomes the stack file of a shard stack, all in one project and one backend, so
`pulumi state move` can move resources between them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from sim.fleet import SimEndpoint, SimFleet, card_state_env
from tests.engine.engine import Project
from tests.support.sim_stacks import fleet_defaults

FLEET = "fleet"
SERVICES_PER_HOST = 4
FIRST_API_PORT = 20000
MODEL = "/srv/models/shard-sim"


def service_values(endpoint: SimEndpoint, index: int) -> list[dict[str, Any]]:
    """Host number `index`'s services: one card each, the host's cards (`card_state_env`). Even hosts
    use cards 0-3, odd ones 4-7: the start gate's card locks are a folder of the one machine
    (records.containers `LOCK_DIR_HOST`), so every simulated host's container on card N queues for
    the same lock until it serves; alternating halves that queue."""
    return [
        {
            "name": f"{endpoint.name}-m{k}",
            "host": endpoint.name,
            "model": MODEL,
            "tensorParallelSize": 1,
            "memoryFraction": 0.9,
            "apiPort": FIRST_API_PORT + SERVICES_PER_HOST * index + k,
            "devices": [4 * (index % 2) + k],
            "env": card_state_env(endpoint),
        }
        for k in range(SERVICES_PER_HOST)
    ]


def fleet_values(fleet: SimFleet, size: int, pins: dict[str, int], count: int | None = None) -> dict[str, Any]:
    """The fleet file's `ascend-fleet:` values: every endpoint of `fleet` (the first `count`) a host,
    pinned to its shard when `pins` names it; shards of `size` hosts."""
    hosts = []
    services: list[dict[str, Any]] = []
    for index, e in enumerate(fleet.endpoints[:count]):
        host = {"name": e.name, "address": e.address, "sshPort": e.ssh_port, "user": "root", "npus": 8, "hbmGiB": 64}
        if e.name in pins:
            host["shard"] = pins[e.name]
        hosts.append(host)
        services += service_values(e, index)
    return {
        "hosts": hosts,
        "services": services,
        "shards": {"size": size},
        "ssh": {"identityFile": str(fleet.identity_file), "knownHostsFile": str(fleet.known_hosts_file)},
        "defaults": fleet_defaults(300),
    }


class ShardedFleet:
    """The fleet's file and its shard stacks in one project (one backend, one passphrase)."""

    def __init__(self, workdir: Path, values: dict[str, Any], env: dict[str, str]) -> None:
        # The fleet stack is a stack of the project too: `shards` reads its file, and it refuses `up`.
        self.fleet = Project.create(workdir, FLEET, values, env)
        self.root = self.fleet.root
        self.shards: dict[int, Project] = {}

    def write(self, values: dict[str, Any]) -> None:
        self.fleet.write_values(values)

    def cut(self) -> dict[int, Project]:
        """`python -m allocation shards --stack fleet` in the project; a stack for each new shard file."""
        proc = subprocess.run(
            [sys.executable, "-m", "allocation", "shards", "--stack", FLEET], cwd=self.root,
            capture_output=True, text=True, env={**self.fleet.env, "PYTHONPATH": str(self.root)},
        )  # fmt: skip
        if proc.returncode != 0:
            raise AssertionError(f"shards --stack {FLEET} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        for path in sorted(self.root.glob(f"Pulumi.{FLEET}-shard-*.yaml")):
            index = int(path.stem.rsplit("-", 1)[1])
            if index not in self.shards:
                self.shards[index] = self._stack(path.stem.removeprefix("Pulumi."))
        return self.shards

    def _stack(self, name: str) -> Project:
        """A stack for an existing shard file: `stack init` keeps the file (it holds the fleet's salt)."""
        text = (self.root / f"Pulumi.{name}.yaml").read_text()
        project = Project(root=self.root, stack=name, env=self.fleet.env)
        project.cli("stack", "init", name, "--secrets-provider", "passphrase")
        (self.root / f"Pulumi.{name}.yaml").write_text(text)
        return project
