"""ascend-fleet: vLLM-Ascend servers on Ascend 910B hosts, cards and HCCL ports planned once.

Read the stack config the engine hands over, plan the whole fleet, then one
AscendHost per host in use and one ModelService per service. See components/.
"""

import pulumi

from allocation.config import parse_fleet
from allocation.errors import FleetError
from allocation.planner import plan_fleet
from allocation.report import plan_json
from components import AscendHost, ModelService, fleet_values, ssh_private_key, start_after

try:
    fleet = parse_fleet(pulumi.get_stack(), fleet_values())
    plan = plan_fleet(fleet)
except FleetError as err:
    raise pulumi.RunError(str(err)) from None  # the message is complete; no traceback

key = ssh_private_key()
services: dict[str, ModelService] = {}
for hp in (hp for hp in plan.hosts if hp.services):
    host = AscendHost(hp.host.name, fleet, hp, private_key=key)
    after = start_after(hp)
    for ps in hp.services:
        deps = [services[n] for n in after[ps.name]]
        services[ps.name] = ModelService(ps.name, fleet, ps, host, after=deps)

pulumi.export("services", {name: s.summary for name, s in services.items()})
pulumi.export("plan", plan_json(plan))
