"""ascend-fleet: vLLM-Ascend servers on Ascend 910B hosts, cards and HCCL ports planned once.

Read the stack config the engine hands over, plan the whole fleet, turn the
plan into deployment records once, then one AscendHost per host in use, one
ModelService per service (or replica) and one Router per replicated service, each
fed its own record. See components/.
"""

import asyncio
import gc

import pulumi

from views.report import plan_json
from components import AscendHost, ModelService, Rollout, Router, fleet_deployment, ssh_private_key

# The SDK keeps ~90 futures and tasks per container alive until the engine answers,
# so the heap only grows while the program runs, and CPython's default thresholds
# (700, 10, 10) rescan it again and again for garbage that is not there: half the
# run at 1,000 services. Young collections every 100,000 allocations; full ones
# stay possible but become rare.
gc.set_threshold(100_000, 20, 10)

deployment = fleet_deployment()


async def main() -> None:
    key = ssh_private_key(deployment.ssh)
    services: dict[str, ModelService] = {}
    hosts = {hd.name: AscendHost(hd.name, hd, private_key=key) for hd in deployment.hosts if hd.in_use}
    rollout = Rollout(deployment.routers)  # a replica's container waits for the one before it to serve again
    for hd in (hd for hd in deployment.hosts if hd.services):
        for sd in hd.services:
            after = [services[name] for name in sd.after]
            waits = rollout.waits_for(sd.name)
            services[sd.name] = ModelService(sd.name, sd, hosts[hd.name], after=after, depends_on=waits)
    routers = {
        rd.plan.service.name: Router(
            rd.name, rd, hosts[rd.plan.host_name], [services[name] for name in rd.plan.replicas], rollout
        )
        for rd in deployment.routers
    }

    # A replicated service's endpoint is its router's; each replica keeps its own entry.
    pulumi.export("services", {name: s.summary for name, s in services.items()} | {n: r.summary for n, r in routers.items()})
    pulumi.export("plan", plan_json(deployment))
    # Let every registration start before the SDK begins its final wait. Module code
    # never yields: the SDK would find no RPC started and instead wait on every
    # pending output at once, re-arming a callback on each after every wakeup
    # (quadratic in the fleet). With the RPCs started it awaits them one by one.
    await asyncio.sleep(0)


pulumi.run(main)
