"""Moving a host's resources between shard stacks (ops/state_move.py) on exported deployments."""

from __future__ import annotations

import pytest

from allocation.errors import ConfigError
from ops.state_move import move_host


def urn(stack: str, path: str, name: str) -> str:
    return f"urn:pulumi:{stack}::ascend-fleet::{path}::{name}"


def shard(stack: str, hosts: list[str]) -> dict:
    """A shard's deployment as `pulumi stack export` shapes it: per host, its component, the docker
    provider as the component's child, a check using the command default provider, and a service
    whose container uses the docker provider and depends on the check."""
    root = urn(stack, "pulumi:pulumi:Stack", f"ascend-fleet-{stack}")
    cmd = urn(stack, "pulumi:providers:command", "default_1_2_1")
    out = [{"urn": root, "type": "pulumi:pulumi:Stack"}, {"urn": cmd, "type": "pulumi:providers:command", "id": f"id-{stack}", "parent": root}]
    for h in hosts:
        comp = urn(stack, "ascend-fleet:index:AscendHost", h)
        prov = urn(stack, "ascend-fleet:index:AscendHost$pulumi:providers:docker", f"{h}-docker")
        check = urn(stack, "ascend-fleet:index:AscendHost$command:remote:Command", f"{h}-check")
        svc = urn(stack, "ascend-fleet:index:ModelService", f"{h}-m0")
        cont = urn(stack, "ascend-fleet:index:ModelService$docker:index/container:Container", f"{h}-m0-container")
        out += [
            {"urn": comp, "type": "ascend-fleet:index:AscendHost", "parent": root},
            {"urn": prov, "type": "pulumi:providers:docker", "id": f"p-{h}", "parent": comp},
            {"urn": check, "type": "command:remote:Command", "parent": comp, "provider": f"{cmd}::id-{stack}"},
            {"urn": svc, "type": "ascend-fleet:index:ModelService", "parent": root},
            {"urn": cont, "type": "docker:index/container:Container", "id": f"c-{h}", "parent": svc,
             "provider": f"{prov}::p-{h}", "dependencies": [check], "propertyDependencies": {"image": [check]}},
        ]  # fmt: skip
    return {"resources": out}


def test_a_moved_host_lands_whole_in_the_destination_with_every_reference_rewritten():
    src, dst = move_host(shard("f-shard-0", ["a", "b"]), shard("f-shard-1", ["c"]), {"b", "b-m0"}, "f-shard-0", "f-shard-1")
    assert src == shard("f-shard-0", ["a"])
    assert dst == shard("f-shard-1", ["c", "b"]), "the destination's own command provider, not a copy"


def test_the_destination_gets_a_copy_of_a_default_provider_it_lacks():
    empty = {"resources": [{"urn": urn("f-shard-1", "pulumi:pulumi:Stack", "ascend-fleet-f-shard-1"), "type": "pulumi:pulumi:Stack"}]}
    _, dst = move_host(shard("f-shard-0", ["a"]), empty, {"a", "a-m0"}, "f-shard-0", "f-shard-1")
    copied = shard("f-shard-1", ["a"])["resources"]
    copied[1]["id"] = "id-f-shard-0"
    for r in copied:
        if r.get("provider", "").startswith(copied[1]["urn"]):
            r["provider"] = f"{copied[1]['urn']}::id-f-shard-0"
    assert dst["resources"] == copied


def test_a_resource_left_behind_that_depends_on_a_moved_one_is_refused_naming_it():
    source = shard("f-shard-0", ["a", "b"])
    source["resources"][-1]["dependencies"] = [urn("f-shard-0", "ascend-fleet:index:AscendHost$command:remote:Command", "a-check")]
    with pytest.raises(ConfigError, match=r"b-m0-container stays and depends on a moved resource"):
        move_host(source, shard("f-shard-1", []), {"a", "a-m0"}, "f-shard-0", "f-shard-1")


def test_a_host_already_in_the_destination_is_refused_and_nothing_named_is_refused_too():
    with pytest.raises(ConfigError, match=r"AscendHost::a already exists in f-shard-1"):
        move_host(shard("f-shard-0", ["a"]), shard("f-shard-1", ["a"]), {"a", "a-m0"}, "f-shard-0", "f-shard-1")
    with pytest.raises(ConfigError, match="holds none of zz"):
        move_host(shard("f-shard-0", ["a"]), shard("f-shard-1", []), {"zz"}, "f-shard-0", "f-shard-1")
