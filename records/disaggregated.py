"""A disaggregated service deployed: one record per prefill or decode instance and one for its proxy, built
once by `records.deployment`.

Each instance is a `vllm serve` on its host's network (`records.containers.role_spec`); the proxy is
vllm-ascend's own `examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py`, run from the
service's image, which carries the repository: vllm-ascend@v0.20.2rc1 `Dockerfile` copies it whole to
`/vllm-workspace/vllm-ascend/` (`COPY . /vllm-workspace/vllm-ascend/`, with no `.dockerignore`) and installs
vLLM, whose dependencies bring the example's only imports beyond the standard library (fastapi, httpx,
uvicorn). The proxy is created after every instance of both roles (components.disaggregated), so it starts
once a prefiller and a decoder serve: it passes each request to a prefiller and then a decoder, and keeps
no list of its own but its flags. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from allocation import names
from allocation.defaults import ROUTER_SHM_SIZE_MIB
from allocation.plan import DisaggregatedPlan, Plan, RolePlan
from allocation.windows import PROXY, ROLE_KINDS
from records.containers import (
    DISAGGREGATED_LABEL, HOST_NETWORK, LABEL_PREFIX, ContainerSpec, Site, health_check, http_probe, role_spec,
)  # fmt: skip

PROXY_SCRIPT = "/vllm-workspace/vllm-ascend/examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py"
"""Where vllm-ascend's images keep the proxy example (the module docstring says why)."""
PROXY_HEALTH = "/healthcheck"
"""The example's health route (`@app.get("/healthcheck")`, v0.20.2rc1): it answers once the proxy serves."""
PROXY_STEADY = (10, 5, 3)
"""The proxy's probes: every 10 s, 5 s to answer, unhealthy after 3 failures, as a router's."""
PROXY_START_SECONDS = 120
"""How long the proxy may take to serve: a Python process importing fastapi, with no model to load."""


@dataclass(frozen=True, eq=False)
class InstanceDeployment:
    """One prefill or decode instance: its container on its host. Compared and hashed by identity, as
    `ServiceDeployment`: the proxy's record holds these very objects."""

    plan: RolePlan
    service: DisaggregatedPlan
    """The disaggregated service it belongs to."""
    spec: ContainerSpec

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def role(self) -> str:
        return self.plan.role_instance.role

    @property
    def earlier_names(self) -> list[str]:
        """The names it had under the service's previous names and no longer has: its resources' aliases."""
        return names.earlier_names(self.name, self.plan.instance.previous_names)

    @property
    def endpoint(self) -> str:
        """Its own OpenAI-compatible base URL, where the proxy reaches it: `http://address:apiPort/v1`."""
        address, port = self.plan.url
        return f"http://{address}:{port}/v1"

    def summary(self) -> dict[str, object]:
        """The instance's stack output: its host, cards and windows (its `kvPort` block among them), and its
        service, role and engine id."""
        a = self.plan.assignment
        windows = {k.key: k.text(a.windows[k.key]) if k.key in a.windows else None for k in ROLE_KINDS}
        return {"disaggregated": self.service.name, "role": self.role, "engineId": self.plan.role_instance.engine_id,
                "host": a.host_name, "devices": list(a.cards), **windows}  # fmt: skip


@dataclass(frozen=True, eq=False)
class ProxyDeployment:
    """The proxy in front of a disaggregated service's instances: its container, and the instances it waits for."""

    plan: DisaggregatedPlan
    spec: ContainerSpec
    instances: tuple[InstanceDeployment, ...]
    """Every instance of both roles, prefill first: created before it."""

    @property
    def name(self) -> str:
        return names.proxy_name(self.plan.name)

    @property
    def earlier_names(self) -> list[str]:
        return [n for n in map(names.proxy_name, self.plan.service.previous_names or ()) if n != self.name]

    @property
    def host_name(self) -> str:
        return self.plan.proxy_host.name

    @property
    def endpoint(self) -> str:
        """The service's OpenAI-compatible base URL: the proxy's."""
        return self.plan.endpoint


@dataclass(frozen=True, eq=False)
class DisaggregatedDeployment:
    """A disaggregated service: its instances' deployments, prefill first, and its proxy's."""

    plan: DisaggregatedPlan
    instances: tuple[InstanceDeployment, ...]
    proxy: ProxyDeployment

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def endpoint(self) -> str:
        return self.plan.endpoint


def proxy_spec(d: DisaggregatedPlan, site: Site) -> ContainerSpec:
    """The proxy's container at `site` (its host): `python3` running the example with the plan's flags
    (`DisaggregatedPlan.proxy_args`: its port, and every instance's address and API port), on Docker's host
    network as the instances, publishing nothing; no card, no mount; its health check the example's own route.
    The image, restart policy and logging are its service's (its first prefill instance's, resolved)."""
    r = d.prefill[0].resolved
    name = names.proxy_name(d.service.original_name)
    labels = {
        f"{LABEL_PREFIX}.stack": site.stack,
        f"{LABEL_PREFIX}.service": name,
        f"{LABEL_PREFIX}.host": site.host.name,
        DISAGGREGATED_LABEL: d.service.original_name,
        f"{LABEL_PREFIX}.{PROXY.label}": str(d.proxy_port),
    }
    return ContainerSpec(
        name=name,
        image=r.image,
        command=("python3", PROXY_SCRIPT, *d.proxy_args()),
        env=MappingProxyType({}),
        device_files=(),
        mounts=(),
        api_port=d.proxy_port,
        labels=MappingProxyType(labels),
        healthcheck=health_check(site, ("CMD-SHELL", http_probe(d.proxy_port, PROXY_HEALTH)), PROXY_STEADY, PROXY_START_SECONDS),
        privileged=False,
        restart=r.restart,
        shm_size_mib=ROUTER_SHM_SIZE_MIB,
        start_timeout_seconds=PROXY_START_SECONDS,
        ipc_mode=r.ipc_mode,
        stop_grace_seconds=r.stop_grace_seconds,
        sysctls=MappingProxyType({}),
        log_opts=r.log_opts,
        network_mode=HOST_NETWORK,
    )


def disaggregated_deployment(plan: Plan, d: DisaggregatedPlan) -> DisaggregatedDeployment:
    """The service's records: each instance's container at its host, and the proxy's at its own."""
    instances = tuple(
        InstanceDeployment(rp, d, role_spec(d, rp, Site.of(plan.fleet, rp.host))) for rp in d.instances  # type: ignore[arg-type]
    )
    proxy = ProxyDeployment(d, proxy_spec(d, Site.of(plan.fleet, d.proxy_host)), instances)
    return DisaggregatedDeployment(d, instances, proxy)


def by_instance(services: tuple[DisaggregatedDeployment, ...]) -> dict[int, InstanceDeployment]:
    """Every instance's deployment, by the identity of its plan (`RolePlan`)."""
    return {id(i.plan): i for d in services for i in d.instances}
