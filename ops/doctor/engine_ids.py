"""`doctor`'s one judgement across hosts: no two running containers of the stack transfer KV caches under one
engine id. Pure.

The Mooncake connector asks a peer for its metadata and refuses one whose engine id is its own
(vllm-ascend@v0.20.2rc1 `mooncake_connector.py` `KVCacheRecvingThread._get_remote_metadata`: `assert engine_id
!= self.local_engine_id, f"Conflict engine id {engine_id} with local engine id ..."`), and it keys every peer's
KV cache addresses by engine id, so two instances under one id are taken for one; the tutorials ask that
"each node's engine_id is uniquely assigned". The plan gives each instance its container's name. Each running
container of the stack (a planned one, found by its name, or any labelled with the stack: an old instance left
running) is read for the engine id of its `--kv-transfer-config` (`ops.doctor.pd_flags.engine_id`), on every
host that was read; peers may sit on any host of the stack, so this is judged across them, once.
"""

from __future__ import annotations

from typing import Sequence

from ops.doctor.drift import shown
from ops.doctor.facts import HostFacts, LiveContainer
from ops.doctor.findings import Finding
from ops.doctor.pd_flags import engine_id
from records.containers import LABEL_PREFIX
from records.deployment import Deployment

STACK_LABEL = f"{LABEL_PREFIX}.stack"


def engine_id_findings(deployment: Deployment, reads: Sequence[HostFacts | Finding]) -> dict[str, list[Finding]]:
    """Host name -> a `kv-transfer` finding per engine id that more than one running container of the stack
    carries, on the host of the first of them (by host, then name); `reads` are the hosts' facts, in the
    deployment's host order (`ops.doctor.read_hosts`)."""
    holders: dict[str, list[tuple[str, LiveContainer]]] = {}
    for hd, read in zip(deployment.hosts, reads):
        if isinstance(read, Finding) or read.docker_error:
            continue  # the host's own report says why
        planned = {c.spec.name for c in hd.planned}
        for c in sorted(read.containers, key=lambda c: c.name):
            ours = c.name in planned or c.labels.get(STACK_LABEL) == hd.stack
            found = engine_id(c.command) if ours and c.status == "running" else None
            if found is not None:
                holders.setdefault(found, []).append((hd.name, c))
    planned_by = {i.plan.role_instance.engine_id: d.name for d in deployment.disaggregated for i in d.instances}
    out: dict[str, list[Finding]] = {}
    for found, held in holders.items():
        if len(held) < 2:
            continue
        where = ", ".join(f"{shown(c.name, 80)} on {host}" for host, c in held)
        text = (
            f"engine id {shown(found, 80)} is used by {len(held)} running containers of stack {deployment.stack}: {where}; the "
            "Mooncake connector refuses a peer whose engine id is its own ('Conflict engine id'), so transfers between "
            "them fail: the plan gives each instance its own, its container's name"
        )
        host, first = held[0]
        out.setdefault(host, []).append(Finding("kv-transfer", text, service=planned_by.get(found), container=first.name, key="engine_id"))
    return out
