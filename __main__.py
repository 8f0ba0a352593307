"""ascend-fleet: vLLM-Ascend servers on Ascend 910B hosts, cards and HCCL ports planned once.

Read the stack config the engine hands over, plan the whole fleet, turn the
plan into deployment records once, then one AscendHost per host in use and one
ModelService per service, each fed its own record. See components/.
"""

import pulumi

from allocation.config import parse_fleet
from allocation.deployment import deploy
from allocation.errors import FleetError
from allocation.planner import plan_fleet
from allocation.report import plan_json
from components import AscendHost, ModelService, fleet_values, ssh_private_key

try:
    deployment = deploy(plan_fleet(parse_fleet(pulumi.get_stack(), fleet_values())))
except FleetError as err:
    raise pulumi.RunError(str(err)) from None  # the message is complete; no traceback

key = ssh_private_key()
services: dict[str, ModelService] = {}
for hd in (hd for hd in deployment.hosts if hd.services):
    host = AscendHost(hd.name, hd, deployment.ssh, private_key=key)
    for sd in hd.services:
        after = [services[name] for name in sd.after]
        services[sd.name] = ModelService(sd.name, sd, host, after=after)

pulumi.export("services", {name: s.summary for name, s in services.items()})
pulumi.export("plan", plan_json(deployment))
