"""How a plan is shown: a terminal table, a pull-request markdown table, or JSON."""

from __future__ import annotations

import json
from typing import Any

from allocation.containers import container_spec
from allocation.config import units
from allocation.placement import fmt_units
from allocation.plan import HostPlan, Plan

FORMATS = ("table", "markdown", "json")


def plan_json(plan: Plan) -> dict[str, Any]:
    """The machine-readable plan; each service also carries the container it becomes."""
    hosts = []
    for hp in plan.hosts:
        services = []
        for ps in hp.services:
            spec = container_spec(plan.fleet, ps)
            services.append(
                ps.to_json()
                | {"container": {"image": spec.image, "command": list(spec.command), "env": dict(spec.env)}}
            )
        hosts.append(
            {
                "name": hp.host.name,
                "address": hp.host.address,
                "npus": hp.host.npus,
                "hbmGiB": hp.host.hbm_gi_b,
                "memoryBudget": float(hp.budget),
                "services": services,
            }
        )
    return {"stack": plan.stack, "hosts": hosts}


def _span(span: tuple[int, int] | None) -> str:
    return f"{span[0]}-{span[1]}" if span else "default 16666"


def _card_rows(hp: HostPlan) -> tuple[list[str], list[list[str]]]:
    headers = ["card"] + [str(c) for c in range(hp.host.npus)]
    rows = []
    for ps in hp.services:
        cells = [f"{ps.service.memory_fraction}" if c in ps.assignment.devices else "." for c in range(hp.host.npus)]
        rows.append([ps.name, *cells])
    load = hp.card_load()
    used = [fmt_units(sum(units(s.service.memory_fraction) for s in load[c])) for c in range(hp.host.npus)]
    rows.append([f"used of {hp.budget}", *used])
    return headers, rows


def _port_rows(hp: HostPlan) -> tuple[list[str], list[list[str]]]:
    headers = ["service", "cards", "TP", "HBM/card", "API", "HCCL NPU", "HCCL host", "HCCL IF base", "VLLM_PORT"]
    rows = []
    for ps in hp.services:
        a, s = ps.assignment, ps.service
        gib = float(s.memory_fraction) * hp.host.hbm_gi_b
        rows.append(
            [
                ps.name,
                ",".join(map(str, a.devices)),
                str(s.tensor_parallel_size),
                f"{s.memory_fraction} ({gib:.1f} GiB)",
                str(a.api_port),
                _span(a.hccl_npu_socket_port_range),
                _span(a.hccl_host_socket_port_range) if a.hccl_host_socket_port_range else "-",
                f"{a.hccl_if_base_port}-{a.hccl_if_base_port + 31}",
                f"{a.vllm_port}-{a.vllm_port + a.vllm_port_count - 1}",
            ]
        )
    return headers, rows


def _host_title(hp: HostPlan) -> str:
    count = len(hp.services)
    return (
        f"{hp.host.name} ({hp.host.address}): {hp.host.npus} NPUs x {hp.host.hbm_gi_b} GiB, "
        f"{count} service{'s' if count != 1 else ''}"
    )


def _text_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [headers, *rows]]
    return "\n".join("  " + line for line in lines)


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def render_plan(plan: Plan, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(plan_json(plan), indent=2)
    services = sum(len(hp.services) for hp in plan.hosts)
    summary = f"stack {plan.stack}: {len(plan.hosts)} host(s), {services} service(s)"
    parts = [f"## Allocation plan: {summary}" if fmt == "markdown" else summary]
    for hp in plan.hosts:
        if fmt == "markdown":
            parts.append(f"### {_host_title(hp)}")
            parts.append(_md_table(*_card_rows(hp)))
            parts.append(_md_table(*_port_rows(hp)))
        else:
            parts.append(_host_title(hp))
            parts.append(_text_table(*_card_rows(hp)))
            parts.append(_text_table(*_port_rows(hp)))
    return "\n\n".join(parts)

