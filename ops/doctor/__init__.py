"""`doctor`: compare what runs on the hosts with the deployment, and say what is wrong; and `status`,
what runs where, from the same read of each host.

Three parts: `gather` (the one remote script per host), `facts` (its output
parsed, pure) and `findings` (one judge per kind of finding over a view of the
host built once, pure); `status` shows the facts instead of judging them (pure). A stack whose target is `kubernetes` is read through the cluster's API
instead (`kube`, `kube_facts`, `kube_findings`: docs/doctor.md). This module runs them: hosts in parallel, one round
trip each (ssh, or a local shell for a `unix://` Docker daemon); an
unreachable host is a finding, not a failure of the run. What a host must have
(device files, driver paths) is the table the host check reads too
(records.host_requirements), asked for every configured card.
"""

from __future__ import annotations

import json
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from records.deployment import Deployment, HostDeployment
from allocation.errors import printable
from ops.doctor.facts import FactsError, HostFacts, parse_facts
from ops.doctor.engine_ids import engine_id_findings
from ops.doctor.findings import Finding, host_findings, required
from ops.doctor.gather import gather_script
from ops.doctor import status
from ops.doctor.kube import audit_cluster
from ops.ssh import run_script

FORMATS = ("table", "json")


@dataclass(frozen=True)
class HostReport:
    name: str
    reachable: bool
    findings: tuple[Finding, ...]


def read_host(hd: HostDeployment, *, timeout: float | None = None) -> HostFacts | Finding:
    """One host's facts, gathered in one round trip; or the one finding that says why there are
    none: `unreachable`, or `host` for an answer that cannot be read. `doctor` judges the facts,
    `status` (ops.doctor.status) shows them."""
    host = hd.host
    routers = [(rd.name, rd.plan.port) for rd in hd.routers]
    fixed_kv = [sd.spec.name for sd in hd.services if sd.plan.kv_cache_bytes is not None]
    images = sorted({spec.image for _, spec, _ in hd.containers})
    script = gather_script(required(hd), hd.shared_cards, routers, hd.host.board, images, kv_logs=fixed_kv)
    result = run_script(hd, script, timeout=timeout)
    if not result.reachable:
        return Finding("unreachable", f"host {host.name} ({hd.docker_url}) is unreachable: {result.error}")
    try:
        return parse_facts(result.stdout)
    except FactsError as exc:
        detail = " ".join(result.stderr.split())[:300]
        return Finding("host", f"host {host.name}: {exc} (exit {result.returncode}{': ' + detail if detail else ''})")


def read_hosts(deployment: Deployment, *, timeout: float | None = None) -> list[HostFacts | Finding]:
    """`read_host` of every host of the deployment, in parallel; in the deployment's host order."""
    if not deployment.hosts:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(deployment.hosts))) as pool:
        return list(pool.map(lambda hd: read_host(hd, timeout=timeout), deployment.hosts))


def judged(hd: HostDeployment, read: HostFacts | Finding, across: list[Finding] | None = None) -> HostReport:
    """One host's report: the finding that it could not be read, or what the judges find in its facts, then
    `across`, what the judgement across hosts found there (`ops.doctor.engine_ids`)."""
    if isinstance(read, Finding):
        return HostReport(hd.name, read.kind != "unreachable", (read,))
    return HostReport(hd.name, True, (*host_findings(hd, read), *(across or ())))


def audit(deployment: Deployment, *, timeout: float | None = None) -> list[HostReport]:
    """Every host of the deployment, read in parallel and judged, each on its own and across them; reports in
    host-name order."""
    reads = read_hosts(deployment, timeout=timeout)
    across = engine_id_findings(deployment, reads)
    return [judged(hd, read, across.get(hd.name)) for hd, read in zip(deployment.hosts, reads)]


def render_reports(stack: str, reports: list[HostReport], fmt: str) -> str:
    ok = not any(r.findings for r in reports)
    if fmt == "json":
        hosts = [
            {"name": r.name, "reachable": r.reachable, "findings": [f.to_json() for f in r.findings]} for r in reports
        ]
        return json.dumps({"stack": stack, "hosts": hosts, "ok": ok}, indent=2)
    total = sum(len(r.findings) for r in reports)
    lines = [f"stack {stack}: {len(reports)} host(s), " + ("ok" if ok else f"{total} finding(s)")]
    for r in reports:
        lines += ["", f"host {r.name}: " + ("ok" if not r.findings else f"{len(r.findings)} finding(s)")]
        width = max((len(f.kind) for f in r.findings), default=0)
        lines += [f"  {f.kind:<{width}}  {printable(f.message)}" for f in r.findings]
    return "\n".join(lines)


def run(deployment: Deployment, fmt: str = "table") -> tuple[str, int]:
    """The `doctor` command: (report text, exit code 0 clean / 1 findings)."""
    reports = audit(deployment)
    return render_reports(deployment.stack, reports, fmt), 0 if not any(r.findings for r in reports) else 1


def run_status(
    deployment: Deployment, fmt: str = "table", *, services: frozenset[str] | None = None, timeout: float | None = None
) -> tuple[str, int]:
    """The `status` command: (what runs where, exit code 0 all serving / 1 not / 2 a host not read);
    with `services`, only their containers, read on their hosts."""
    if services is not None:
        deployment = status.hosts_of(deployment, services)
    hosts = [status.host_status(hd, read) for hd, read in zip(deployment.hosts, read_hosts(deployment, timeout=timeout))]
    hosts = hosts if services is None else [status.only(h, services) for h in hosts]
    return status.render(deployment, hosts, fmt), status.exit_code(hosts)


def run_kubernetes(deployment: Deployment, kubeconfig: Path, fmt: str = "table") -> tuple[str, int]:
    """`doctor` of a stack whose target is `kubernetes`: the cluster read through its API
    (ops.doctor.kube), reported as the hosts are."""
    reports = [HostReport(*r) for r in audit_cluster(deployment, kubeconfig)]
    return render_reports(deployment.stack, reports, fmt), 0 if not any(r.findings for r in reports) else 1
