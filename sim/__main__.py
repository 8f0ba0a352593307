"""`sudo .venv/bin/python -m sim`: keep a simulated 910B host up for the dev stack.

Lays out the Ascend device files and driver folders, builds the npu-sim image,
creates the model folders of `Pulumi.dev.yaml`, prints how to reach the host,
and holds it until Ctrl-C; then removes what it created (and the sim containers).
"""

from __future__ import annotations

import signal
import sys

from allocation.errors import FleetError
from cli.stackfile import load_fleet
from sim.host import SimHost, SimHostError


def main() -> int:
    try:
        fleet, _ = load_fleet("dev")
    except FleetError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    host = SimHost()
    try:
        host.start()
    except SimHostError as err:
        print(f"error: cannot start the simulated host: {err}", file=sys.stderr)
        return 1
    try:
        for model in sorted({s.model for s in fleet.services}):
            host.make_model(model)
        print(f"simulated 910B host up: 8 cards, image ascend-fleet/npu-sim:latest, docker over {host.docker_host}")
        print(f"  ssh options: {' '.join(host.ssh_opts)}")
        print("  now, in another terminal: pulumi up -s dev   (Ctrl-C here tears the host down)")
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        host.reset()
        host.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
