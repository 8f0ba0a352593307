"""ascend-fleet: vLLM-Ascend servers on Ascend 910B hosts, cards and HCCL ports planned once.

Read the stack config the engine hands over, plan the whole fleet, turn the
plan into deployment records once, and build the components from them
(`components.fleet.build`), each fed its own record.
"""

import asyncio
import gc

import pulumi

from components import build, fleet_deployment
from views.report import plan_json

# The SDK keeps ~90 futures and tasks per container alive until the engine answers,
# so the heap only grows while the program runs, and CPython's default thresholds
# (700, 10, 10) rescan it again and again for garbage that is not there: half the
# run at 1,000 services. Young collections every 100,000 allocations; full ones
# stay possible but become rare.
gc.set_threshold(100_000, 20, 10)

deployment = fleet_deployment()


async def main() -> None:
    fleet = build(deployment)
    pulumi.export("services", fleet.endpoints)
    pulumi.export("plan", plan_json(deployment))
    # Let every registration start before the SDK begins its final wait. Module code
    # never yields: the SDK would find no RPC started and instead wait on every
    # pending output at once, re-arming a callback on each after every wakeup
    # (quadratic in the fleet). With the RPCs started it awaits them one by one.
    await asyncio.sleep(0)


pulumi.run(main)
