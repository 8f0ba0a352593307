"""Prefill and decode apart on the simulated host, started from the deployment's records, judged by `doctor`:
requests answered through the proxy and doctor clean; a decoder re-created without `/etc/hccn.conf` answers
wrong and doctor names it (`hccn-conf`); a decoder planted with the prefiller's engine id fails each request
with the connector's words and doctor names the id (`kv-transfer`).

The stack is the committed 1P1D example (examples/Pulumi.pd-1p1d.yaml) on the simulated host: its address
and sshd, the image `ascend-fleet/npu-sim-pd` (the npu-sim stand-in with vllm-ascend's own proxy example,
sim/pd_proxy_image.py; the proxy runs from the service's image), a model folder made there, the simulated
cards' state mounted, models loading at once, the API ports, `kvPort` blocks and the proxy's port pinned free
on this machine. Every container of the host is started from the records (`HostDeployment.containers`) with
the `docker run` arguments views/exports/render.py builds (`tests.support.sim_stacks.run_args`): the instances
first, then the proxy once both serve, as the deployment creates it after them. The instances mount the
simulated host's `/etc/hccn.conf` (sim/ascend_files.py). Every wait is for a condition with a generous bound,
and a failure shows the containers' logs; the `sim_host` fixture removes every container after the test.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from cli.stackfile import locate, stack_values
from ops import doctor
from ops.doctor.findings import Finding
from ops.doctor.pd_flags import KV_TRANSFER_CONFIG
from records.deployment import Deployment, HostDeployment
from records.disaggregated import InstanceDeployment
from sim.host import SimHost
from sim.pd_proxy_image import PD_IMAGE, build_pd_image
from tests.simhost.probes import probed_deployment
from tests.support.disaggregated import EXAMPLE
from tests.support.pipeline import deployment_of
from tests.support.rolling import LOCAL_DOCKER
from tests.support.sim_groups import free_port_outside_ephemeral, replaced
from tests.support.sim_pd import ANSWER, HCCN_CONF, PROMPT, complete_at, free_block
from tests.support.sim_stacks import fleet_defaults, run_args
from tests.support.waits import wait_for

pytestmark = pytest.mark.simhost

STACK = "pd-doctor"
SERVICE = "qwen-pd"
TP = 4
"""Each role's tensor parallel size in the example: its `kvPort` block's size."""


def values(sim: SimHost) -> dict[str, Any]:
    """The example's `ascend-fleet:` values on the simulated host (cards, roles and connector as committed)."""
    values = stack_values(locate(None, EXAMPLE))
    [host] = values["hosts"]
    host.update(address=sim.address, sshPort=sim.ssh_port)
    values["ssh"] = {"identityFile": str(sim.identity_file), "knownHostsFile": str(sim.known_hosts_file),
                     "connectTimeoutSeconds": 10}  # fmt: skip
    values["defaults"] = {**fleet_defaults(300), "image": PD_IMAGE, "vllmAscendVersion": "0.20.2rc1"}
    [service] = values["services"]
    pd = service["disaggregated"]
    service["model"] = str(sim.make_model(f"{SERVICE}-model"))
    taken: set[int] = set()
    for role, kv_base in (("prefill", 28000), ("decode", 28100)):
        [pin] = pd[role]["replicaPins"]
        pin.update(apiPort=free_port_outside_ephemeral(18000, taken), kvPort=free_block(kv_base, TP, taken))
    pd["proxy"] = {"proxyPort": free_port_outside_ephemeral(18100, taken)}
    return values


def logs(sim: SimHost, *names: str) -> str:
    return "\n".join(f"--- {n}:\n{sim.logs(n)}" for n in names)


def host_of(deployment: Deployment) -> HostDeployment:
    [hd] = deployment.hosts
    return hd


def instance(deployment: Deployment, role: str) -> InstanceDeployment:
    [found] = [i for i in host_of(deployment).instances if i.role == role]
    return found


def everything(deployment: Deployment) -> list[str]:
    return [name for name, _, _ in host_of(deployment).containers]


def wait_healthy(sim: SimHost, deployment: Deployment, *names: str) -> None:
    wait_for(
        f"{', '.join(names)} healthy",
        lambda: all(sim.state(n).get("Health", {}).get("Status") == "healthy" for n in names),
        detail=lambda: logs(sim, *everything(deployment)),
    )


@pytest.fixture
def deployment(sim_host: SimHost) -> Deployment:
    """Every planned container of the host started from its record: the instances, then, once they are
    healthy, the proxy (and any other container the host plans)."""
    build_pd_image(LOCAL_DOCKER)
    deployment = deployment_of(values(sim_host), STACK)
    hd = host_of(deployment)
    assert [i.role for i in hd.instances] == ["decode", "prefill"] and [p.name for p in hd.proxies] == [f"{SERVICE}-proxy"]
    for i in hd.instances:
        sim_host.docker(*run_args(sim_host, i.spec))
    wait_healthy(sim_host, deployment, *(i.name for i in hd.instances))
    rest = [spec for name, spec, _ in hd.containers if name not in {i.name for i in hd.instances}]
    for spec in rest:
        sim_host.docker(*run_args(sim_host, spec))
    wait_healthy(sim_host, deployment, *(spec.name for spec in rest))
    return deployment


def answered(sim: SimHost, deployment: Deployment) -> str:
    """The text of the first completion of PROMPT answered through the proxy (HTTP 200)."""
    [d] = deployment.disaggregated

    def text() -> str | None:
        status, body = complete_at(d.proxy.endpoint, PROMPT, 6)
        return json.loads(body)["choices"][0]["text"] if status == 200 else None

    return wait_for(f"a completion answered through {d.proxy.name}", text, detail=lambda: logs(sim, *everything(deployment)))


def findings(deployment: Deployment) -> list[Finding]:
    """`doctor`'s findings on the host, which it reached."""
    [report] = doctor.audit(probed_deployment(deployment))
    assert report.reachable, [f.message for f in report.findings]
    return list(report.findings)


def shown(found: list[Finding]) -> str:
    return json.dumps([f.to_json() for f in found], indent=2)


def the_one(found: list[Finding], kind: str) -> Finding:
    """The one finding of `kind`; the findings shown when there is not exactly one."""
    of_kind = [f for f in found if f.kind == kind]
    assert len(of_kind) == 1, shown(found)
    return of_kind[0]


def recreated(sim: SimHost, deployment: Deployment, spec) -> None:
    """The container of `spec`'s name removed and created from `spec`, healthy."""
    sim.docker("rm", "-f", spec.name)
    sim.docker(*run_args(sim, spec))
    wait_healthy(sim, deployment, spec.name)


def with_engine_id(spec, engine_id: str):
    """The spec with its `--kv-transfer-config`'s `engine_id` replaced."""
    command = list(spec.command)
    config = json.loads(command[command.index(KV_TRANSFER_CONFIG) + 1]) | {"engine_id": engine_id}
    return dataclasses.replace(spec, command=tuple(replaced(command, KV_TRANSFER_CONFIG, json.dumps(config, separators=(",", ":")))))


def test_the_1p1d_example_serves_through_its_proxy_and_doctor_names_a_decoder_without_hccn_conf_and_a_duplicate_engine_id(
    sim_host: SimHost, deployment: Deployment
) -> None:
    prefill, decode = instance(deployment, "prefill"), instance(deployment, "decode")
    [d] = deployment.disaggregated

    # 1. A request through the proxy is prefilled, then decoded from the prefiller's KV; doctor finds nothing.
    assert answered(sim_host, deployment) == ANSWER
    assert "KV cache transfer for request" in sim_host.logs(decode.name), logs(sim_host, decode.name)
    found = findings(deployment)
    assert found == [], shown(found)

    # 2. The decoder re-created by hand without /etc/hccn.conf: it serves, answers wrong (vllm-ascend issue
    # 7711), and doctor names it, beside its mounts' drift.
    bare = dataclasses.replace(decode.spec, mounts=tuple(m for m in decode.spec.mounts if m.target != HCCN_CONF))
    assert len(bare.mounts) == len(decode.spec.mounts) - 1
    recreated(sim_host, deployment, bare)
    text = answered(sim_host, deployment)
    assert text != ANSWER and len(set(text.split())) == 1, text  # a wrong token, repeated
    found = findings(deployment)
    hccn = the_one(found, "hccn-conf")
    assert (hccn.service, hccn.container, hccn.key) == (SERVICE, decode.name, "mounts"), shown(found)
    assert hccn.message.startswith(
        f"container {decode.name} (decode instance of {SERVICE}) does not mount {HCCN_CONF}: "
    ), shown(found)
    others = [(f.kind, f.container) for f in found if f is not hccn]
    assert others == [("drift", decode.name)], shown(found)

    # 3. The planned decoder back: the right answer, doctor clean.
    recreated(sim_host, deployment, decode.spec)
    assert answered(sim_host, deployment) == ANSWER
    found = findings(deployment)
    assert found == [], shown(found)

    # 4. The decoder planted with the prefiller's engine id: the connector refuses the prefiller's metadata,
    # each request fails, and doctor names the id both run under.
    engine = prefill.plan.role_instance.engine_id
    assert engine == prefill.name
    recreated(sim_host, deployment, with_engine_id(decode.spec, engine))
    status, body = complete_at(d.proxy.endpoint, PROMPT, 6)
    assert ANSWER not in body, (status, body)
    log = sim_host.logs(decode.name)
    assert f"AssertionError: Conflict engine id {engine} with local engine id {engine}." in log, logs(sim_host, decode.name, d.proxy.name)
    assert "Error during streaming from decoder" in sim_host.logs(d.proxy.name)  # the example's words for it
    found = findings(deployment)
    duplicate = the_one(found, "kv-transfer")
    assert (duplicate.service, duplicate.container, duplicate.key) == (SERVICE, decode.name, "engine_id"), shown(found)
    assert duplicate.message.startswith(
        f"engine id {engine} is used by 2 running containers of stack {STACK}: {decode.name} on npu-a, "
        f"{prefill.name} on npu-a; the Mooncake connector refuses a peer whose engine id is its own"
    ), shown(found)
    drift = [(f.kind, f.container, f.key) for f in found if f is not duplicate]
    assert [(k, c) for k, c, _ in drift] == [("drift", decode.name)] and drift[0][2].startswith("command"), shown(found)
