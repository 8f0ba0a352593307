"""`doctor`: compare what runs on the hosts with the deployment, and say what is wrong.

Three parts: `gather` (the one remote script per host), `facts` (its output
parsed, pure) and `findings` (one judge per kind of finding over a view of the
host built once, pure). A stack whose target is `kubernetes` is read through the cluster's API
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
from ops.doctor.facts import FactsError, parse_facts
from ops.doctor.findings import Finding, host_findings, planned, required
from ops.doctor.gather import gather_script
from ops.doctor.kube import audit_cluster
from ops.ssh import run_script

FORMATS = ("table", "json")


@dataclass(frozen=True)
class HostReport:
    name: str
    reachable: bool
    findings: tuple[Finding, ...]


def audit_host(hd: HostDeployment, *, timeout: float | None = None) -> HostReport:
    """Gather one host's facts in one round trip and judge them."""
    host = hd.host
    routers = [(rd.name, rd.plan.port) for rd in hd.routers]
    images = sorted({spec.image for _, spec, _ in planned(hd)})
    script = gather_script(required(hd), hd.shared_cards, routers, hd.host.board, images)
    result = run_script(hd, script, timeout=timeout)
    if not result.reachable:
        text = f"host {host.name} ({hd.docker_url}) is unreachable: {result.error}"
        return HostReport(host.name, False, (Finding("unreachable", text),))
    try:
        facts = parse_facts(result.stdout)
    except FactsError as exc:
        detail = " ".join(result.stderr.split())[:300]
        text = f"host {host.name}: {exc} (exit {result.returncode}{': ' + detail if detail else ''})"
        return HostReport(host.name, True, (Finding("host", text),))
    return HostReport(host.name, True, tuple(host_findings(hd, facts)))


def audit(deployment: Deployment, *, timeout: float | None = None) -> list[HostReport]:
    """Every host of the deployment, audited in parallel; reports in host-name order."""
    if not deployment.hosts:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(deployment.hosts))) as pool:
        return list(pool.map(lambda hd: audit_host(hd, timeout=timeout), deployment.hosts))


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


def run_kubernetes(deployment: Deployment, kubeconfig: Path, fmt: str = "table") -> tuple[str, int]:
    """`doctor` of a stack whose target is `kubernetes`: the cluster read through its API
    (ops.doctor.kube), reported as the hosts are."""
    reports = [HostReport(*r) for r in audit_cluster(deployment, kubeconfig)]
    return render_reports(deployment.stack, reports, fmt), 0 if not any(r.findings for r in reports) else 1
