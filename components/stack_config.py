"""Reading the `ascend-fleet:` namespace from what the Pulumi engine hands the program.

The engine passes the stack's config (stack file, project defaults and values
set with `pulumi config set`) to the program; the program never opens YAML.
Every key of the namespace is passed on, so a misspelt top-level key reaches
`parse_fleet` and is reported instead of silently ignored. Program-only keys
(the SSH private key) are never decoded, logged or handed to the planner.
`fleet_deployment` hands the values to the pipeline the command line runs too
(`records.pipeline`), with the known_hosts file the system ssh reads, keeps this
stack's slice of a fleet deployed as shards, and turns a FleetError into a
`pulumi.RunError`.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pulumi
from pulumi.runtime.config import CONFIG, get_config_env

from allocation.config import NAMESPACE, PROGRAM_ONLY_KEYS, Ssh, read_top_level
from allocation.errors import FleetError
from records.deployment import Deployment
from records.pipeline import deployment_of, trusted
from ops.ssh import known_hosts_text

SSH_PRIVATE_KEY = "sshPrivateKey"


def namespace_keys(namespace: str = NAMESPACE) -> list[str]:
    """Every key of the namespace the engine set, namespace stripped, sorted.

    The language host passes config in the PULUMI_CONFIG environment variable;
    `pulumi.runtime.set_all_config` (tests, automation) fills CONFIG; both count.
    """
    prefix = f"{namespace}:"
    keys = set(CONFIG.get()) | set(get_config_env())
    return sorted(k.removeprefix(prefix) for k in keys if k.startswith(prefix))


def fleet_values(namespace: str = NAMESPACE) -> dict[str, Any]:
    """The namespace's values for `parse_fleet`, without the program-only (secret) keys."""
    config = pulumi.Config(namespace)
    return {
        key: read_top_level(key, config.get(key) or "")
        for key in namespace_keys(namespace)
        if key not in PROGRAM_ONLY_KEYS
    }


def ssh_private_key(ssh: Ssh, namespace: str = NAMESPACE) -> pulumi.Output[str] | None:
    """The host check's key, the one the system ssh of the docker provider uses too: the secret
    `ascend-fleet:sshPrivateKey`, else the file `ssh.identityFile` (read here, kept secret);
    None leaves pulumi-command to the ssh-agent at SSH_AUTH_SOCK, as the system ssh does."""
    secret = pulumi.Config(namespace).get_secret(SSH_PRIVATE_KEY)
    if secret is not None or not ssh.identity_file:
        return secret
    try:
        text = Path(ssh.identity_file).expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise pulumi.RunError(f"ascend-fleet:ssh.identityFile {ssh.identity_file}: cannot read: {exc.strerror}") from None
    return pulumi.Output.secret(text)


def _this_stacks_slice(deployment: Deployment) -> Deployment:
    """The whole fleet's deployment, or a shard's slice of it; a fleet deployed as shards is never
    deployed as one stack (docs/shards.md)."""
    fleet = deployment.plan.fleet
    if fleet.shard_of is not None:
        return deployment.shard(fleet.shard_of.index)
    if fleet.shards is not None:
        raise pulumi.RunError(
            f"stack {deployment.stack} is a fleet deployed as shards (ascend-fleet:shards): it is planned and "
            f"pinned here and deployed by its shards' stacks; run `python -m allocation shards --stack "
            f"{deployment.stack}`, then `pulumi up` on each {deployment.stack}-shard-K stack it writes"
        )
    return deployment


@contextmanager
def _as_run_error() -> Iterator[None]:
    """A FleetError as one RunError paragraph: the message is complete, so no traceback."""
    try:
        yield
    except FleetError as err:
        raise pulumi.RunError(str(err)) from None


def fleet_deployment() -> Deployment:
    """The stack's deployment from the engine's config (`records.pipeline`, as the command line
    builds it), this stack's slice of it, or one RunError paragraph. With `strictHostKeyChecking:
    yes`, a host of the slice whose key is neither configured nor in known_hosts stops the program."""
    with _as_run_error():
        deployment = deployment_of(pulumi.get_stack(), fleet_values(), known_hosts_text)
    # Warnings only: the plan's notes (where a figure comes from) ask nothing of a deploy; `plan` prints them.
    for warning in deployment.plan.warnings:
        pulumi.log.warn(warning)
    with _as_run_error():
        if deployment.plan.fleet.target == "kubernetes":
            from views.exports.kubernetes import refuse_disaggregated, refuse_groups  # before any resource, one paragraph

            refuse_disaggregated(refuse_groups(deployment))
        deployment = _this_stacks_slice(deployment)
        # Only the docker target reaches hosts over SSH; a cluster is reached through its kubeconfig.
        return trusted(deployment) if deployment.plan.fleet.target == "docker" else deployment
