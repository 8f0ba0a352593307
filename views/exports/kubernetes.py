"""The deployment records as Kubernetes objects: `render --format kubernetes` and the Kubernetes target.

One function from the records (`records.deployment`) to plain dicts, one per object, so what
`kubectl apply` reads, what the Pulumi components create (`components/kubernetes/`) and what the
schema test validates cannot drift apart. Pure. docs/kubernetes.md gives each choice's reason;
the ones that rest on outside behaviour, with their sources:

- Cards. MindCluster's DRA driver (Ascend/mind-cluster `component/ascend-dynamic-resource-allocation`)
  registers as `npu.huawei.com` (`pkg/consts/consts.go`), publishes one device per NPU with the
  attributes `deviceType` (string) and `physicId` (int) (`internal/device/generation_common.go`,
  `generation_910.go`), and its manifest installs the DeviceClass `npu.huawei.com`
  (`build/ascend-dra-driver.yaml`). A ResourceClaim of `resource.k8s.io/v1` asks for devices with
  `spec.devices.requests[].exactly` {`deviceClassName`, `allocationMode: ExactCount`, `count`,
  `selectors[].cel.expression`}, and every pod that names one claim in `spec.resourceClaims` shares
  its allocation (kubernetes/kubernetes `staging/src/k8s.io/api/resource/v1/types.go`). So each
  planned card is one claim selecting its `physicId`, and every pod on the card names that claim: a
  neighbour that comes or goes changes no pod's template (one claim per service would have to be
  split the day a card of it becomes shared). The CEL cannot see the node, so the node comes from
  the pod's `nodeSelector`, and the claim is allocated where its first pod is scheduled.
- Without the driver (`kubernetes.dra: false`): the Ascend Docker Runtime mounts the cards named in
  `ASCEND_VISIBLE_DEVICES` (MindCluster ascend-docker-runtime); nothing tells the scheduler, and
  every object says so in the annotation `UNACCOUNTED`.
- Env: Kubernetes adds `<SERVICE>_PORT=tcp://...` for every Service of the namespace unless
  `enableServiceLinks` is false; a Service named `vllm` would set `VLLM_PORT` (vLLM's docs warn of
  it, docs.vllm.ai/en/stable/configuration/env_vars/), and any new Service would change every pod. It is false.
- Docker's `--init` (a reaper as PID 1) becomes `shareProcessNamespace`: the pod's pause process is
  then PID 1 and reaps orphans (Kubernetes docs, "Share Process Namespace between Containers").
- Docker's CMD is Kubernetes' `args`, its ENTRYPOINT `command` (Kubernetes docs, "Define a Command
  and Arguments for a Container"): the image's entrypoint runs as it does under Docker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from allocation.config import VISIBLE_DEVICES_ENV, FleetConfig
from allocation.errors import ConfigError
from allocation.target import DRA_DRIVER
from records.containers import ContainerSpec, HealthCheck, created_on_host
from records.deployment import Deployment, HostDeployment, RouterDeployment, ServiceDeployment
from records.group import GroupDeployment, MemberDeployment
from records.rollout import WORKERS_MOUNT

RESOURCE_API = "resource.k8s.io/v1"
LWS_API = "leaderworkerset.x-k8s.io/v1"
"""LeaderWorkerSet's group and version (kubernetes-sigs/lws `api/leaderworkerset/v1/groupversion_info.go`)."""
RUNTIME_VISIBLE_ENV = "ASCEND_VISIBLE_DEVICES"
"""Read by the Ascend Docker Runtime: the physical cards it mounts into the container."""
INSTANCE_LABEL = "ascend-fleet/instance"
STACK_LABEL = "ascend-fleet/stack"
HOST_LABEL = "ascend-fleet/host"
REPLICA_OF_LABEL = "ascend-fleet/replica-of"
REPLICA_INDEX_LABEL = "ascend-fleet/replica-index"
AFTER_ANNOTATION = "ascend-fleet/after"
GROUP_LABEL = "ascend-fleet/group"
"""On a multi-host service's LeaderWorkerSet and both its pod templates: the service's name."""
UNACCOUNTED = "ascend-fleet/unaccounted-cards"
DEVICE_SHARE = "ascend-fleet/device-share-cards"
SHM = "dshm"


@dataclass(frozen=True)
class Manifest:
    """One Kubernetes object and what it belongs to: `node/HOST`, `service/NAME` (a service or a
    replica) or `router/NAME` (host and service names may be the same)."""

    owner: str
    obj: Mapping[str, Any]

    @property
    def kind(self) -> str:
        return self.obj["kind"]

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]


def claim_name(host: str, card: int) -> str:
    """The ResourceClaim of one planned card: every pod on the card names it."""
    return f"{host}-npu-{card}"


LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
"""A label value as the API server checks it (apimachinery validation.IsValidLabelValue)."""


def _label_name(name: str, what: str) -> str:
    """A name that is also a label value and a Service name: at most 63 characters."""
    if len(name) > 63:
        raise ConfigError(
            f"{what} {name} is {len(name)} characters long; on Kubernetes it names a Service and labels its pods, "
            "which allow at most 63: shorten the service's name"
        )
    return name


def _stack_label(fleet: FleetConfig) -> str:
    """The stack's name, which labels every object and is the value of the nodes' taint."""
    if not LABEL_VALUE.match(fleet.fleet_name):
        raise ConfigError(
            f"stack {fleet.fleet_name} cannot be a Kubernetes label value (at most 63 letters, digits, '-', '_' or "
            "'.', starting and ending with a letter or digit), which labels every object and the nodes' taint: "
            "plan it under another name (--stack-name, or rename Pulumi.<stack>.yaml)"
        )
    return fleet.fleet_name


def _metadata(name: str, fleet: FleetConfig, labels: Mapping[str, str], annotations: Mapping[str, str] = {}) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": fleet.kubernetes.namespace}
    meta["labels"] = {"app.kubernetes.io/part-of": "ascend-fleet", STACK_LABEL: _stack_label(fleet), **labels}
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def resource_claim(fleet: FleetConfig, host: str, card: int) -> dict:
    """Exactly one device of the driver, the one whose `physicId` is `card`."""
    expression = f"device.attributes['{DRA_DRIVER}'].physicId == {card}"
    request = {
        "name": "npu",
        "exactly": {
            "deviceClassName": fleet.kubernetes.device_class,
            "allocationMode": "ExactCount",
            "count": 1,
            "selectors": [{"cel": {"expression": expression}}],
        },
    }
    labels = {HOST_LABEL: host, "ascend-fleet/card": str(card)}
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaim",
        "metadata": _metadata(claim_name(host, card), fleet, labels),
        "spec": {"devices": {"requests": [request]}},
    }


def _probe(hc: HealthCheck, period: int, failures: int) -> dict:
    # Docker's CMD-SHELL test, run the same way: `sh -c TEST`.
    return {
        "exec": {"command": ["sh", "-c", hc.test[1]]},
        "periodSeconds": period,
        "timeoutSeconds": hc.timeout_seconds,
        "failureThreshold": failures,
    }


def probes(hc: HealthCheck) -> dict:
    """Docker's health check as Kubernetes' three probes. The startup probe covers the start period
    (at the start interval when the host's engine has one) and then Docker's retries; readiness and
    liveness probe at the steady interval and give up after Docker's retries."""
    start = hc.start_interval_seconds or hc.interval_seconds
    during_start = -(-hc.start_period_seconds // start) + hc.retries
    return {
        "startupProbe": _probe(hc, start, during_start),
        "readinessProbe": _probe(hc, hc.interval_seconds, hc.retries),
        "livenessProbe": _probe(hc, hc.interval_seconds, hc.retries),
    }


def _volumes(spec: ContainerSpec, workers: str | None) -> tuple[list[dict], list[dict]]:
    """The spec's bind mounts as hostPath volumes (a source the host check creates is created here
    too), a router's worker folder as its ConfigMap, and `/dev/shm` as memory of the planned size
    (none when the pod shares the host's IPC, where the host's /dev/shm is used, as under Docker)."""
    volumes: list[dict] = []
    mounts: list[dict] = []
    for i, m in enumerate(spec.mounts):
        name = f"host-{i}"
        if workers is not None and m.target == WORKERS_MOUNT:
            volumes.append({"name": name, "configMap": {"name": workers}})
        else:
            kind = "DirectoryOrCreate" if created_on_host(m.source) else ""
            volumes.append({"name": name, "hostPath": {"path": m.source, "type": kind}})
        mounts.append({"name": name, "mountPath": m.target, "readOnly": m.read_only})
    if spec.ipc_mode != "host":
        volumes.append({"name": SHM, "emptyDir": {"medium": "Memory", "sizeLimit": f"{spec.shm_size_mib}Mi"}})
        mounts.append({"name": SHM, "mountPath": "/dev/shm"})
    return volumes, mounts


def container(
    spec: ContainerSpec, name: str, env: Mapping[str, str], claims: Iterable[str], mounts: list[dict], serves: bool = True
) -> dict:
    """The spec's container: image, entrypoint and command, env, ports, claims, mounts and probes. One that
    does not `serve` HTTP (a `--headless` follower, whose spec's API port is its leader's) declares no port:
    on the host network a declared port is taken on the node (Kubernetes docs, "hostNetwork")."""
    out: dict[str, Any] = {"name": name, "image": spec.image}
    if spec.entrypoint is not None:
        out["command"] = list(spec.entrypoint)
    out["args"] = list(spec.command)
    out["env"] = [{"name": k, "value": v} for k, v in sorted(env.items())]
    if serves:
        ports = [{"name": "api", "containerPort": spec.api_port, "protocol": "TCP"}]
        if spec.metrics_port is not None:
            ports.append({"name": "metrics", "containerPort": spec.metrics_port, "protocol": "TCP"})
        out["ports"] = ports
    claim_refs = [{"name": c} for c in claims]
    if claim_refs:
        out["resources"] = {"claims": claim_refs}
    out["volumeMounts"] = mounts
    return out | probes(spec.healthcheck)


def pod_spec(
    fleet: FleetConfig, host: str, spec: ContainerSpec, main: dict, volumes: list[dict], claims: Mapping[str, str],
    host_network: bool = False,
) -> dict:
    """Pinned to the planned node and tolerating its taint; network, IPC and grace as planned: the node's
    network with `kubernetes.network: hostNetwork`, and always for `host_network` (a multi-host member)."""
    k8s = fleet.kubernetes
    out: dict[str, Any] = {
        "nodeSelector": {k8s.hostname_label: host},
        "tolerations": [{"key": k8s.taint_key, "operator": "Equal", "value": _stack_label(fleet), "effect": "NoSchedule"}],
        "enableServiceLinks": False,
        "shareProcessNamespace": spec.init,
        "terminationGracePeriodSeconds": spec.stop_grace_seconds,
        "restartPolicy": "Always",
    }
    if host_network or k8s.network == "hostNetwork":
        out |= {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}
    else:
        # A network namespace of its own: its windows kept out of its ephemeral ports, as under Docker
        # (an unsafe sysctl: the kubelet must allow it, docs/kubernetes.md).
        sysctls = [{"name": k, "value": v} for k, v in spec.sysctls.items() if v]
        if sysctls:
            out["securityContext"] = {"sysctls": sysctls}
    if spec.ipc_mode == "host":
        out["hostIPC"] = True
    if claims:
        out["resourceClaims"] = [{"name": ref, "resourceClaimName": claim} for ref, claim in claims.items()]
    return out | {"containers": [main], "volumes": volumes}


def deployment_object(fleet: FleetConfig, name: str, labels: Mapping[str, str], annotations: Mapping[str, str], pod: dict) -> dict:
    """One pod, replaced by stopping the old one first (`Recreate`): its cards and ports are never
    held twice."""
    selector = {INSTANCE_LABEL: name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(name, fleet, labels, annotations),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": {**labels, **selector}, "annotations": dict(annotations)}, "spec": pod},
        },
    }


def service_object(fleet: FleetConfig, name: str, target: str, labels: Mapping[str, str], spec: ContainerSpec) -> dict:
    """The ports of the pod of Deployment `target`, on `name` in the namespace's DNS."""
    ports = [{"name": "api", "port": spec.api_port, "targetPort": spec.api_port, "protocol": "TCP"}]
    if spec.metrics_port is not None:
        ports.append({"name": "metrics", "port": spec.metrics_port, "targetPort": spec.metrics_port, "protocol": "TCP"})
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(name, fleet, labels),
        "spec": {"type": "ClusterIP", "selector": {INSTANCE_LABEL: target}, "ports": ports},
    }


def unaccounted_text(host: str, cards: Iterable[int]) -> str:
    return (
        f"cards {','.join(map(str, cards))} of node {host} are pinned by nodeSelector and {RUNTIME_VISIBLE_ENV} "
        "(kubernetes.dra is false): the scheduler does not account for them"
    )


def _k8s_env(spec: ContainerSpec, cards: tuple[int, ...], dra: bool) -> dict[str, str]:
    """The container's env as Docker gets it. Pods are never privileged, so a container that Docker
    runs privileged (every card visible under its physical index) sees only its own cards, numbered
    from 0, as every other container does; without DRA the runtime is told its physical cards."""
    env = dict(spec.env)
    if spec.privileged:
        env[VISIBLE_DEVICES_ENV] = ",".join(map(str, range(len(cards))))
    if not dra:
        env[RUNTIME_VISIBLE_ENV] = ",".join(map(str, cards))
    return env


def _model_pod(
    fleet: FleetConfig, host: str, cards: tuple[int, ...], spec: ContainerSpec, serves: bool = True, host_network: bool = False
) -> tuple[dict, dict[str, str]]:
    """A model's pod on `host` holding `cards` (the claim of each, or without DRA the runtime told them),
    and its annotations: Docker's labels, the keys `doctor` reads, and without DRA the unaccounted cards."""
    dra = fleet.kubernetes.dra
    annotations = dict(spec.labels)
    if not dra:
        annotations[UNACCOUNTED] = unaccounted_text(host, cards)
    claims = {f"npu-{c}": claim_name(host, c) for c in cards} if dra else {}
    volumes, mounts = _volumes(spec, None)
    main = container(spec, "vllm", _k8s_env(spec, cards, dra), claims, mounts, serves)
    return pod_spec(fleet, host, spec, main, volumes, claims, host_network), annotations


def _service_manifests(fleet: FleetConfig, sd: ServiceDeployment, order: tuple[int, str | None] | None) -> list[Manifest]:
    """A service's (or replica's) Deployment and Service, its pod naming the claim of each of its cards."""
    name, host = _label_name(sd.name, "service"), sd.plan.assignment.host_name
    labels = {INSTANCE_LABEL: name, HOST_LABEL: host}
    pod, annotations = _model_pod(fleet, host, tuple(sorted(sd.plan.assignment.cards)), sd.spec)
    if order is not None:
        index, previous = order
        labels |= {REPLICA_OF_LABEL: sd.plan.replica_of, REPLICA_INDEX_LABEL: str(index)}
        if previous is not None:
            annotations[AFTER_ANNOTATION] = previous
    return [
        Manifest(f"service/{name}", deployment_object(fleet, name, labels, annotations, pod)),
        Manifest(f"service/{name}", service_object(fleet, name, name, labels, sd.spec)),
    ]


def lws_name(group: str) -> str:
    """The LeaderWorkerSet of multi-host service `group`. Not the service's own name, which its API's Service
    takes: LWS's controller creates a headless Service named after the LeaderWorkerSet (kubernetes-sigs/lws
    v0.9.0 `pkg/controllers/leaderworkerset_controller.go` `reconcileHeadlessServices`)."""
    return f"{group}-lws"


LWS_NAME_MAX = 50
"""LWS names the leaders' StatefulSet after the LeaderWorkerSet (v0.9.0 `pkg/controllers/leaderworkerset_controller.go`)
and the workers' after the leader pod, `<name>-0` (`pkg/controllers/pod_controller.go`); a StatefulSet labels its pods
`controller-revision-hash: <statefulset>-<hash>`, the hash a uint32 of up to 10 digits (kubernetes v1.37.2
`pkg/controller/history/controller_history.go` `ControllerRevisionName`, `HashControllerRevision`), a label value
of at most 63 characters: so at most 50."""


def _member_template(fleet: FleetConfig, md: MemberDeployment) -> dict:
    """One member's pod template: its host, its cards' claims, its container with the plan's flags and env,
    on the node's network as the docker target runs a member (every port a rank binds is a planned host
    port, outside the ephemeral range, docs/multi-host.md). Its pods carry the member's name as their
    instance label, which `doctor` looks them up by."""
    host = md.plan.assignment.host_name
    labels = {INSTANCE_LABEL: _label_name(md.name, "member"), HOST_LABEL: host, GROUP_LABEL: md.group.name}
    cards = tuple(sorted(md.plan.assignment.cards))
    pod, annotations = _model_pod(fleet, host, cards, md.spec, serves=md.plan.member.leader, host_network=True)
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod}


def _group_manifests(fleet: FleetConfig, gd: GroupDeployment) -> list[Manifest]:
    """A multi-host service as one LeaderWorkerSet of one group (kubernetes-sigs/lws v0.9.0
    `api/leaderworkerset/v1/leaderworkerset_types.go`) and the Service of its leader's API:

    - `size`: its members; `leaderTemplate` member 0's pod (the API, the DP RPC port), `workerTemplate`
      member 1's (`--headless --data-parallel-start-rank`), each pinned to its own host. One worker template
      is every worker's, so a group of more members is refused (`refuse_groups`). With one member the worker
      template is the leader's, unused: LWS runs no worker for `size: 1`.
    - `--data-parallel-address` is the plan's, as on the docker target: the leader binds it, so it must be an
      address of the leader's own host, and it is the address `HCCL_IF_IP` names on the planned NIC. LWS's
      `LWS_LEADER_ADDRESS` is a DNS name (`<lws>-0.<subdomain>.<namespace>`, v0.9.0 `pkg/utils/pod/pod_utils.go`
      `AddLWSVariables`), and on the host network a pod's `status.podIP` is the node's address, which need not
      be the NIC's; the leader's node is fixed by its `nodeSelector`, so its NIC address is known at plan time.
    - `restartPolicy: RecreateGroupOnPodRestart`: "recreate all the pods in the group if any individual pod
      in the group is recreated" or any container restarts, so the group restarts as one, as the docker target
      re-creates every member (vLLM's leader takes no follower back, docs/multi-host.md).
    - `startupPolicy: LeaderCreated`: the workers start as soon as the leader pod exists. `LeaderReady` would
      wait forever: the leader is ready only once its followers' engines have joined its handshake.
    - `rolloutStrategy`: one group, `maxSurge: 0`, so a changed template deletes the group before the new one
      starts and no card is needed twice (as a Deployment's `Recreate`)."""
    name = lws_name(gd.name)
    if len(name) > LWS_NAME_MAX:
        raise ConfigError(
            f"service {gd.name} is {len(gd.name)} characters long; on Kubernetes it is the LeaderWorkerSet {name}, "
            f"whose StatefulSets' revision labels allow at most {LWS_NAME_MAX}: shorten the service's name"
        )
    templates = [_member_template(fleet, md) for md in gd.members]
    leader = gd.members[0]
    lws = {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": _metadata(name, fleet, {GROUP_LABEL: gd.name}),
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}},
            "leaderWorkerTemplate": {
                "size": len(templates),
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": templates[0],
                "workerTemplate": templates[-1],
            },
        },
    }
    labels = {INSTANCE_LABEL: leader.name, HOST_LABEL: leader.plan.assignment.host_name, GROUP_LABEL: gd.name}
    service = service_object(fleet, _label_name(gd.name, "service"), leader.name, labels, leader.spec)
    return [Manifest(f"group/{gd.name}", lws), Manifest(f"group/{gd.name}", service)]


def group_url(fleet: FleetConfig, gd: GroupDeployment) -> str:
    """A multi-host service's URL in the cluster: the Service of its leader's API (`_group_manifests`)."""
    return f"http://{gd.name}.{fleet.kubernetes.namespace}.svc:{gd.plan.leader.assignment.api_port}"


def worker_url(fleet: FleetConfig, replica: ServiceDeployment) -> str:
    """A replica's URL for its router: its own Service, by its name in the namespace's DNS."""
    return f"http://{replica.name}.{fleet.kubernetes.namespace}.svc:{replica.plan.assignment.api_port}"


def router_url(fleet: FleetConfig, rd: RouterDeployment) -> str:
    """A replicated service's URL in the cluster: the Service in front of its router, by the
    service's name in the namespace's DNS (`_router_manifests`)."""
    return f"http://{_label_name(rd.plan.service.name, 'service')}.{fleet.kubernetes.namespace}.svc:{rd.spec.api_port}"


def _router_manifests(fleet: FleetConfig, rd: RouterDeployment) -> list[Manifest]:
    """The router's worker list (a ConfigMap, outside its pod template: replicas that come and go
    restart nothing), its Deployment, and the service's Service in front of it."""
    name, host = _label_name(rd.name, "router"), rd.plan.host_name
    workers = f"{name}-workers"
    labels = {INSTANCE_LABEL: name, HOST_LABEL: host, REPLICA_OF_LABEL: rd.plan.service.name}
    urls = "".join(f"{worker_url(fleet, replica)}\n" for replica in rd.replicas)
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(workers, fleet, labels),
        "data": {"workers": urls},
    }
    volumes, mounts = _volumes(rd.spec, workers)
    main = container(rd.spec, "router", rd.spec.env, (), mounts)
    pod = pod_spec(fleet, host, rd.spec, main, volumes, {})
    service = _label_name(rd.plan.service.name, "service")
    return [
        Manifest(f"router/{name}", config_map),
        Manifest(f"router/{name}", deployment_object(fleet, name, labels, dict(rd.spec.labels), pod)),
        Manifest(f"router/{name}", service_object(fleet, service, name, labels, rd.spec)),
    ]


def _device_share(fleet: FleetConfig, hd: HostDeployment) -> Manifest | None:
    """The cards of a host that more than one pod uses, which must be in device-share mode before
    those pods start: stated in the cluster, with the host script that sets it (records.device_share)."""
    cards = hd.device_share_cards or hd.shared_cards
    if not cards:
        return None
    data = {"host": hd.name, "cards": ",".join(map(str, cards))}
    if hd.device_share_script is not None:
        data["script"] = hd.device_share_script
    meta = _metadata(f"{hd.name}-device-share", fleet, {HOST_LABEL: hd.name}, {DEVICE_SHARE: data["cards"]})
    return Manifest(f"node/{hd.name}", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})


def _replica_order(deployment: Deployment) -> dict[ServiceDeployment, tuple[int, str | None]]:
    """Each replica's place in its service's one-at-a-time order, and the name of the replica before it."""
    return {
        replica: (i, rd.replicas[i - 1].name if i else None)
        for rd in deployment.routers
        for i, replica in enumerate(rd.replicas)
    }


MAX_GROUP_MEMBERS = 2
"""A LeaderWorkerSet has one worker template for all its workers, and each follower has its own host, cards,
windows and NIC address: one template pins one follower (`_group_manifests`)."""


def refuse_groups(deployment: Deployment) -> Deployment:
    """The deployment, unless it holds a multi-host service of more than two members. Such a service is one
    LeaderWorkerSet (kubernetes-sigs/lws v0.9.0 `api/leaderworkerset/v1/leaderworkerset_types.go`: a leader
    template and one worker template for every worker), and its followers cannot share a template: each is
    pinned to its own host (a `nodeSelector` in the template) and names its own cards' claims, and its HCCL
    windows and NIC address are its host's. Rendering them as Deployments of their own would let the cluster
    restart one alone, which its leader does not take back (docs/multi-host.md), and leaving it out would
    deploy half the stack: so every Kubernetes path (`render --format kubernetes`, the Kubernetes target,
    `doctor`) stops here, before any object is written or applied."""
    wide = [g for g in deployment.plan.groups if len(g.members) > MAX_GROUP_MEMBERS]
    if wide:
        members = "; ".join(f"{g.name} over {', '.join(mp.host.name for mp in g.members)}" for g in wide)
        raise ConfigError(
            f"stack {deployment.stack}: the Kubernetes target deploys a service over at most {MAX_GROUP_MEMBERS} hosts: "
            f"{members} (dataParallel). Such a service is one LeaderWorkerSet (kubernetes-sigs/lws, "
            "api/leaderworkerset/v1), whose one worker template cannot pin each follower to its own host, cards and "
            "windows, and its members as Deployments of their own would restart one at a time, which vLLM's leader "
            "does not take back; nothing was written or applied. Deploy the stack with the docker target "
            "(ascend-fleet:target: docker), or give the service at most two hosts (dataParallel.size at most twice "
            "perHost); see docs/kubernetes.md."
        )
    return deployment


def refuse_disaggregated(deployment: Deployment) -> Deployment:
    """The deployment, unless it holds a disaggregated service: its prefill and decode instances and proxy start
    and roll together, which Kubernetes describes as LeaderWorkerSet's DisaggregatedSet (kubernetes-sigs/lws
    `api/disaggregatedset/v1`: named roles, each an LWS template), and this version renders none. Leaving it out
    would deploy half the stack: so every Kubernetes path stops here, before any object is written or applied."""
    planned = deployment.plan.disaggregated
    if planned:
        where = "; ".join(f"{d.name} ({', '.join(rp.name for rp in d.instances)}, proxy)" for d in planned)
        raise ConfigError(
            f"stack {deployment.stack}: the Kubernetes target does not deploy prefill and decode apart: {where} "
            "(disaggregated). Such a service is one DisaggregatedSet (kubernetes-sigs/lws, api/disaggregatedset/v1), "
            "which this version does not render; nothing was written or applied. Deploy the stack with the docker "
            "target (ascend-fleet:target: docker), or remove disaggregated (or the service) to deploy the rest on "
            "Kubernetes; see docs/kubernetes.md."
        )
    return deployment


def manifests(deployment: Deployment) -> tuple[Manifest, ...]:
    """Every object of the stack, in the order to apply them: per host in use, its device-share
    ConfigMap, its cards' claims (its members' too), its services; then each multi-host service's
    LeaderWorkerSet and Service; then the routers. A multi-host service of more than two members or a
    disaggregated service stops it (`refuse_groups`, `refuse_disaggregated`)."""
    fleet = refuse_disaggregated(refuse_groups(deployment)).plan.fleet
    order = _replica_order(deployment)
    out: list[Manifest] = []
    for hd in (hd for hd in deployment.hosts if hd.in_use):
        share = _device_share(fleet, hd)
        out += [share] if share is not None else []
        if fleet.kubernetes.dra:
            cards = sorted({c for model in (*hd.services, *hd.members) for c in model.plan.assignment.cards})
            out += [Manifest(f"node/{hd.name}", resource_claim(fleet, hd.name, c)) for c in cards]
        for sd in hd.services:
            out += _service_manifests(fleet, sd, order.get(sd))
    for gd in deployment.groups:
        out += _group_manifests(fleet, gd)
    for rd in deployment.routers:
        out += _router_manifests(fleet, rd)
    return tuple(out)
