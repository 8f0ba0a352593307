"""`sudo .venv/bin/python -m sim`: keep a simulated 910B host up for the dev stack.

Lays out the Ascend device files and driver folders, builds the npu-sim image,
creates the model folders of `Pulumi.dev.yaml`, prints how to reach the host,
and holds it until Ctrl-C; then removes what it created (and the sim containers).
"""

from __future__ import annotations

import argparse
import signal
import sys

from allocation.errors import FleetError
from cli.stackfile import load_fleet
from sim.host import LOCK_WAIT_SECONDS, SimHost, SimHostError

DESCRIPTION = f"""\
Keep a simulated Ascend 910B host (8 cards) up on this machine for the dev stack, until Ctrl-C.
It starts an sshd on 127.0.0.1 (docker over SSH), uses or starts dockerd, lays out the Ascend
device files and driver folders, builds the ascend-fleet/npu-sim image and creates the model
folders of Pulumi.dev.yaml; then it prints how to reach the host. One simulated host runs on a
machine at a time: while another (a test run) holds the lock, it says so and waits, up to
{LOCK_WAIT_SECONDS / 60:.0f} minutes. Run `pulumi up -s dev` in another terminal. Ctrl-C removes the sim
containers and everything it created. Needs root. See sim/README.md."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sim", description=DESCRIPTION)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    parse_args(argv)
    try:
        fleet, _ = load_fleet("dev")
    except FleetError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    host = SimHost(own_docker=False)  # the dev stack deploys to this machine's dockerd (Pulumi.dev.yaml)
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
