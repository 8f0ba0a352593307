"""Reading the `ascend-fleet:` namespace from what the Pulumi engine hands the program.

The engine passes the stack's config (stack file, project defaults and values
set with `pulumi config set`) to the program; the program never opens YAML.
Every key of the namespace is passed on, so a misspelt top-level key reaches
`parse_fleet` and is reported instead of silently ignored. Program-only keys
(the SSH private key) are never decoded, logged or handed to the planner.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
from pulumi.runtime.config import CONFIG, get_config_env

from allocation.config import NAMESPACE, PROGRAM_ONLY_KEYS

SSH_PRIVATE_KEY = "sshPrivateKey"


def _decode(raw: Any) -> Any:
    """JSON-decode as `Config.get_object` does; a plain string (`pulumi config set k v`)
    that is not JSON stays a string, so parse_fleet can say what is wrong with it."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


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
        key: _decode(config.get(key))
        for key in namespace_keys(namespace)
        if key not in PROGRAM_ONLY_KEYS
    }


def ssh_private_key(namespace: str = NAMESPACE) -> pulumi.Output[str] | None:
    """`ascend-fleet:sshPrivateKey` as a secret Output (None when unset: ssh-agent is used)."""
    return pulumi.Config(namespace).get_secret(SSH_PRIVATE_KEY)
