"""ascend-fleet: vLLM-Ascend servers on Ascend 910B hosts, cards and HCCL ports planned once.

Read the stack config the engine hands over, plan the whole fleet, turn the
plan into deployment records once, then one AscendHost per host in use and one
ModelService per service, each fed its own record. See components/.
"""

import pulumi

from allocation.report import plan_json
from components import AscendHost, ModelService, fleet_deployment, ssh_private_key

deployment = fleet_deployment()
key = ssh_private_key(deployment.ssh)
services: dict[str, ModelService] = {}
for hd in (hd for hd in deployment.hosts if hd.services):
    host = AscendHost(hd.name, hd, deployment.ssh, private_key=key)
    for sd in hd.services:
        after = [services[name] for name in sd.after]
        services[sd.name] = ModelService(sd.name, sd, host, after=after)

pulumi.export("services", {name: s.summary for name, s in services.items()})
pulumi.export("plan", plan_json(deployment))
