"""`env` cannot set the start gate's own variables: the plan writes them over whatever `env` says (the
container's name, its cards, its health URL, its start wait), so setting one would be lost without a
word; the config check refuses it with the service and the key."""

from __future__ import annotations

import pytest

from allocation.config import GATE_ENV
from allocation.errors import ConfigError
from tests.support.stacks import fleet, host, service
from tests.support.pipeline import deployment_of


def test_every_variable_the_gate_sets_is_one_the_config_refuses():
    (hd,) = deployment_of(fleet([host()], [service("chat")])).hosts
    gate = {k for k in hd.services[0].spec.env if k.startswith("ASCEND_FLEET_")}
    assert gate and gate <= set(GATE_ENV)


@pytest.mark.parametrize("key", sorted(GATE_ENV))
@pytest.mark.parametrize("where", ["service", "defaults"])
def test_env_setting_a_gate_variable_is_refused_naming_the_service_and_key(key, where):
    env = {"env": {key: "x", "OTHER": "1"}}
    with pytest.raises(ConfigError) as caught:
        if where == "service":
            fleet([host()], [service("chat", **env)])
        else:
            fleet([host()], [service("chat")], defaults=env)
    text = str(caught.value)
    assert f"{key} is set by the start gate" in text and "\n" not in text, text
    assert ("(chat)" in text) if where == "service" else ("defaults" in text), text
