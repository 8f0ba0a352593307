"""The one pipeline from a stack's values to its deployment: parse, plan, deploy; and the trust
check a deployment passes before it reaches hosts. Pure.

The Pulumi program (`components.stack_config`) and the command line (`cli.main`) both call it, so a
stack is planned and deployed the same way whichever of them reads it. Each brings what only it can
read (the engine's config or the stack file; the known_hosts file) and reports a FleetError its own
way (`pulumi.RunError`, or one paragraph on stderr).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from allocation.config import Ssh, parse_fleet
from allocation.errors import ConfigError
from allocation.planner import plan_fleet
from allocation.plan import Plan
from records.deployment import Deployment, deploy, untrusted_hosts


def _no_known_hosts(ssh: Ssh) -> str:
    return ""


def plan_of(stack: str, values: Mapping[str, Any]) -> Plan:
    """The plan of stack `stack` from its `ascend-fleet:` values, for what needs no records (`shards`
    cuts stack files from the hosts' shards; a fleet's records cost as much again as its plan)."""
    return plan_fleet(parse_fleet(stack, values))


def deployment_of(
    stack: str, values: Mapping[str, Any], known_hosts: Callable[[Ssh], str] = _no_known_hosts
) -> Deployment:
    """The deployment of stack `stack` from its `ascend-fleet:` values. `known_hosts` returns the text
    of the known_hosts file the stack's `ssh` settings name, for host keys the config does not give
    (the program reads it; the command line trusts no key file and gives none)."""
    plan = plan_of(stack, values)
    return deploy(plan, known_hosts(plan.fleet.ssh))


def trusted(deployment: Deployment) -> Deployment:
    """The deployment, unless `strictHostKeyChecking: yes` and a host it reaches over SSH has a key
    neither configured nor in known_hosts: the host check's Go client would otherwise trust any key."""
    untrusted = untrusted_hosts(deployment)
    if untrusted:
        raise ConfigError(
            f"stack {deployment.stack}: no SSH host key known for host(s) {', '.join(untrusted)} while "
            "ascend-fleet:ssh.strictHostKeyChecking is yes: set the host's hostKey (`ssh-keyscan -p PORT "
            "ADDRESS`), or add it to the known_hosts file (ssh.knownHostsFile, default ~/.ssh/known_hosts)."
        )
    return deployment
