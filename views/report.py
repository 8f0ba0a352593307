"""How a plan is shown: a terminal table, a pull-request markdown table, or JSON."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import orjson

from allocation import names
from views import markdown
from allocation.capacity import GIB, Capacity, gib, runtime_total
from allocation.config import units
from records.deployment import Deployment, HostDeployment
from records.disaggregated import DisaggregatedDeployment
from records.group import GroupDeployment
from records.start_order import longest_start
from records.takeover import PULLED_FIRST, downtime
from allocation.placement import fmt_units
from allocation.graph_estimate import graph_pool
from allocation.measured import applied, overhead_measured
from allocation.plan import HostPlan, MemberPlan, Plan, ServicePlan
from allocation.windows import DP_RPC, KINDS, KV_PORT, PROXY, ROUTER_KINDS, PortWindow, WindowKind, window_text

FORMATS = ("table", "markdown", "json")
WIDTH = 120
"""The columns the table fits (a terminal, a CI log) unless `wide`; the markdown's tables fit a GitHub comment."""


def plan_json(deployment: Deployment) -> dict[str, Any]:
    """The machine-readable plan; each service also carries the container it becomes."""
    hosts = []
    for hd in deployment.hosts:
        services = []
        for sd in hd.services:
            services.append(sd.plan.to_json() | {"container": sd.spec.to_json()})
        hosts.append(
            {
                "name": hd.host.name,
                "address": hd.host.address,
                "npus": hd.host.npus,
                "board": hd.host.board,
                "hbmGiB": hd.host.hbm_gi_b,
                "hbmBytes": runtime_total(hd.host),
                "memoryBudget": float(hd.plan.budget),
                "sharedCards": list(hd.shared_cards),
                "deviceShareCards": list(hd.device_share_cards),
                "cardSharing": hd.host.card_sharing,
                "heldCards": hd.host.held_cards,
                "replaces": list(hd.host.replaces),
                "services": services,
            }
            # Only when deployed (`metrics.npuExporter`): a stack without it prints as before.
            | ({} if hd.exporter is None else {"npuExporter": hd.exporter.to_json()})
            # Only when a pinned service must stop for a card's switch (records.held_cards).
            | ({"mustStop": [h.to_json() for h in hd.held_cards]} if hd.held_cards else {})
            | ({} if hd.plan.shard is None else {"shard": hd.plan.shard})
            # Only on a host that runs a member of a multi-host service (its plan is under `groups`).
            | ({"members": [mp.name for mp in hd.plan.members]} if hd.plan.members else {})
            # Only on a host that runs a prefill or decode instance (its plan is under `disaggregated`).
            | ({"roles": [rp.name for rp in hd.plan.roles]} if hd.plan.roles else {})
        )
    routers = [rd.plan.to_json() | {"endpoint": rd.endpoint, "container": rd.spec.to_json()} for rd in deployment.routers]
    # Only with a multi-host service: a stack without one prints as before.
    groups = {"groups": [_group_json(g) for g in deployment.groups]} if deployment.groups else {}
    plan = deployment.plan
    # Only with a disaggregated service, likewise.
    groups |= {"disaggregated": [_disaggregated_json(d) for d in deployment.disaggregated]} if deployment.disaggregated else {}
    return {"stack": deployment.stack, "hosts": hosts, "routers": routers} | groups | {
        "warnings": list(plan.warnings), "notes": list(plan.notes)
    }


def _group_json(g: GroupDeployment) -> dict[str, Any]:
    """A group's plan JSON, each member with its `container` as a service's."""
    out = g.plan.to_json()
    out["members"] = [m | {"container": md.spec.to_json()} for m, md in zip(out["members"], g.members)]
    return out


def _disaggregated_json(d: DisaggregatedDeployment) -> dict[str, Any]:
    """A disaggregated service's plan JSON, each instance and the proxy with its `container` as a service's."""
    out = d.plan.to_json()
    by_name = {c.name: c.spec for c in (*d.instances, d.proxy)}
    for key in ("prefill", "decode"):
        out[key] = [entry | {"container": by_name[entry["name"]].to_json()} for entry in out[key]]
    out["proxy"] = out["proxy"] | {"container": d.proxy.spec.to_json()}
    return out


def _window_cell(kind: WindowKind, window: PortWindow | None) -> str:
    if window is not None:
        return window_text(window)
    return f"default {kind.unset_port}" if kind.unset_port is not None else "-"


def _card_rows(hp: HostPlan) -> tuple[list[str], list[list[str]]]:
    headers = ["card"] + [str(c) for c in range(hp.host.npus)]
    rows = []
    for ps in (*hp.services, *hp.members, *hp.roles):
        cells = [f"{ps.memory_fraction}" if c in ps.assignment.cards else "." for c in range(hp.host.npus)]
        rows.append([ps.name, *cells])
    load = hp.card_load()
    for mp in (*hp.members, *hp.roles):
        for c in mp.assignment.cards:
            load[c] = [*load[c], mp]
    used = [fmt_units(sum(units(s.memory_fraction) for s in load[c])) for c in range(hp.host.npus)]
    rows.append([f"used of {hp.budget}", *used])
    return headers, rows


CAPACITY_COLUMNS = ["weights/card", "KV/card", "block", "KV blocks", "KV tokens", "seqs at maxModelLen", "per request"]


def _capacity_cells(cap: Capacity | None) -> list[str]:
    if cap is None:
        return ["-"] * len(CAPACITY_COLUMNS)
    concurrency, per_request = cap.max_concurrency, cap.bytes_per_request
    return [
        f"{gib(cap.weight_bytes_per_card)} GiB",
        # An encoder keeps no cache: what is left of its fraction is headroom, not cache.
        f"none ({gib(cap.kv_bytes_per_card)} GiB free)" if cap.encoder else f"{gib(cap.kv_bytes_per_card)} GiB"
        + (" fixed" if cap.fixed else ""),  # kvCacheGiB's
        str(cap.block_tokens) if cap.block_tokens else "no cache" if cap.encoder else "-",
        str(cap.kv_blocks) if cap.block_tokens else "-",
        str(cap.kv_tokens) if cap.block_tokens else "-",
        f"{concurrency:.2f}" if concurrency is not None else "-",
        f"{gib(per_request)} GiB" if per_request is not None else "-",
    ]


def _port_rows(hp: HostPlan, capacity: bool = True) -> tuple[list[str], list[list[str]]]:
    """The port windows of each service, with the capacity columns beside them when `capacity` (wide)."""
    sized = capacity and any(ps.capacity for ps in (*hp.services, *hp.members, *hp.roles))
    headers = ["service", "cards", "TP", "HBM/card", *(k.column for k in KINDS)]
    headers += CAPACITY_COLUMNS if sized else []
    total = runtime_total(hp.host) or hp.host.hbm_gi_b * GIB
    rows = []
    for ps in (*hp.services, *hp.roles):  # a prefill or decode instance's row is a service's
        a, fraction = ps.assignment, ps.memory_fraction
        rows.append(
            [
                ps.name,
                ",".join(map(str, a.cards)),
                str(ps.service.tensor_parallel_size),
                f"{fraction} ({gib(int(fraction * total))} GiB)",
                *(_window_cell(k, a.windows.get(k.key)) for k in KINDS),
                *(_capacity_cells(ps.capacity) if sized else []),
            ]
        )
    rows += [_member_row(mp, sized, total) for mp in hp.members]
    # A column of its own only on a host with a member (DP RPC) or a prefill or decode instance (KV port).
    extra = [kind for kind, present in ((DP_RPC, hp.members), (KV_PORT, hp.roles)) if present]
    windows = {p.name: p.assignment.windows for p in (*hp.services, *hp.members, *hp.roles)}
    at = 4 + len(KINDS)
    headers[at:at] = [kind.column for kind in extra]
    for row in rows:
        row[at:at] = [_window_cell(kind, windows[row[0]].get(kind.key)) for kind in extra]
    return headers, rows


def _member_row(mp: MemberPlan, sized: bool, total: int) -> list[str]:
    """A member's row of the ports table: `TP` is its ranks x their tensor-parallel size, and its cards,
    an aligned block, are written as a range (`0-7`)."""
    a, fraction = mp.assignment, mp.memory_fraction
    contiguous = list(a.cards) == list(range(a.cards[0], a.cards[-1] + 1))
    return [
        mp.name, window_text((a.cards[0], a.cards[-1])) if contiguous else ",".join(map(str, a.cards)),
        f"{len(mp.member.ranks)}x{mp.service.tensor_parallel_size}",
        f"{fraction} ({gib(int(fraction * total))} GiB)",
        *(_window_cell(k, a.windows.get(k.key)) for k in KINDS),
        *(_capacity_cells(mp.capacity) if sized else []),
    ]  # fmt: skip


def _capacity_rows(hp: HostPlan) -> list[tuple[list[str], list[list[str]]]]:
    """The capacity columns as a table of their own, none when no service on the host is sized."""
    every = (*hp.services, *hp.members, *hp.roles)
    if not any(ps.capacity for ps in every):
        return []
    return [(["service", *CAPACITY_COLUMNS], [[ps.name, *_capacity_cells(ps.capacity)] for ps in every])]


FIGURE_COLUMNS = ["weights/card", "runtime overhead", "NPU graphs", "measured"]


def _figure_cells(ps: ServicePlan) -> list[str]:
    """Each figure the check counts, with where it comes from: `measured` (its startup log, through
    `calibrate`), the profile (`unverified profile` when it says so), `runtimeOverheadGiB`,
    `graphMemoryGiB` or an `estimate`."""
    cap, pool, measured, profile = ps.capacity, graph_pool(ps.instance), ps.service.measured, ps.service.profile
    read = "unverified profile" if profile is not None and profile.unverified else "profile"
    weights = "-" if cap is None else f"{gib(cap.weight_bytes_per_card)} GiB {'measured' if applied(ps.instance) else read}"
    overhead = "-" if cap is None else f"{gib(cap.overhead_bytes)} GiB " + (
        "measured" if overhead_measured(ps.instance) else "runtimeOverheadGiB"
    )
    if pool is None:
        graphs = "not counted (no profile)"
    else:
        graphs = "none (--enforce-eager)" if pool.source == "--enforce-eager" else f"{gib(pool.bytes)} GiB {pool.source}"
    if measured is None:
        taken = "-"
    elif applied(ps.instance) is None:
        taken = f"not used: measured at tensorParallelSize {measured.tensor_parallel_size}"
    else:
        kv = "" if measured.kv_cache_gi_b is None else f": KV cache {measured.kv_cache_gi_b} GiB/card"
        at = "" if measured.memory_fraction is None else f" at memoryFraction {measured.memory_fraction}"
        taken = f"{measured.container}, {measured.date}{kv}{at}"
    return [weights, overhead, graphs, taken]


def _counts_figures(ps: ServicePlan) -> bool:
    """The plan counts a memory figure of the service: it is sized, measured, or has an NPU graph pool."""
    pool = graph_pool(ps.instance)
    return ps.capacity is not None or ps.service.measured is not None or (pool is not None and pool.bytes > 0)


def _figure_rows(hp: HostPlan) -> list[tuple[list[str], list[list[str]]]]:
    """Where each service's memory figures come from, as a table on a host where the plan counts any: so
    the plan says which figures are measured and which are the profile's, an allowance or an estimate.
    A host without one (no profile, nothing measured) has a note instead (`planner._not_sized`)."""
    if not any(map(_counts_figures, hp.services)):
        return []
    return [(["figures", *FIGURE_COLUMNS], [[ps.name, *_figure_cells(ps)] for ps in hp.services])]


def _host_tables(hp: HostPlan, wide: bool) -> list[tuple[list[str], list[list[str]]]]:
    """Cards, then ports with capacity beside them (`wide`), or ports and capacity as two narrower
    tables; then where the figures come from, on a host where the plan counts any."""
    if wide:
        return [_card_rows(hp), _port_rows(hp), *_figure_rows(hp)]
    return [_card_rows(hp), _port_rows(hp, capacity=False), *_capacity_rows(hp), *_figure_rows(hp)]


def fit(text: str, first: str = "", rest: str = "  ") -> str:
    """`text` wrapped to WIDTH columns, words never split, each line after the first indented by `rest`."""
    return textwrap.fill(text, WIDTH, initial_indent=first, subsequent_indent=rest, break_long_words=False,
                         break_on_hyphens=False)  # fmt: skip


def _host_title(hp: HostPlan) -> str:
    count = len(hp.services)
    shared = hp.shared_cards()
    sharing = f", shared cards {','.join(map(str, shared))} ({hp.host.card_sharing})" if shared else ""
    takeover = f", takes over from {', '.join(hp.host.replaces)}" if hp.host.replaces else ""
    takeover += f", shard {hp.shard}" if hp.shard is not None else ""
    takeover += f", members {', '.join(mp.name for mp in hp.members)} (host network)" if hp.members else ""
    takeover += f", prefill/decode {', '.join(rp.name for rp in hp.roles)} (host network)" if hp.roles else ""
    unit = hp.device_share_cards()
    if hp.host.card_sharing == "deviceShare" and unit != shared:
        sharing += f", device-share mode on cards {','.join(map(str, unit))} (both chips of each NPU)"
    board = " (Atlas A3: card k is NPU k//2, chip k%2)" if hp.host.board == "a3" else ""
    # What the HBM/card column's fractions are of: the total the runtime reports, below the label's GiB.
    total = runtime_total(hp.host)
    usable = f" ({gib(total)} GiB usable)" if total is not None else ""
    return (
        f"{hp.host.name} ({hp.host.address}){board}: {hp.host.npus} NPUs x {hp.host.hbm_gi_b} GiB{usable}, "
        f"{count} service{'s' if count != 1 else ''}{sharing}{takeover}"
    )


def text_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [headers, *rows]]
    return "\n".join("  " + line for line in lines)


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(markdown.text(cell) for cell in r) + " |" for r in rows]
    return "\n".join(out)


def json_text(doc: Any) -> str:
    """`json.dumps(doc, indent=2)`, byte for byte, made by orjson where that is the same text.

    With an indent, the standard library encodes in pure Python: 0.7 s of a 3 s `plan` at 1,300
    hosts, against 0.05 s for orjson's C encoder. The two print ASCII text, integers and floats in
    [1e-4, 1e16) alike (same separators, shortest round-trip digits). Elsewhere they differ: the
    standard library writes 1e-05 and NaN, escapes other characters as \\uXXXX and turns integer
    keys into strings; orjson writes 0.00001 and null, writes UTF-8 and DEL (0x7f, which the standard
    library escapes as \\u007f) as they are, and refuses such keys and integers beyond 64 bits. A document
    holding any of those takes the standard library's path."""
    return _orjson_text(doc) or json.dumps(doc, indent=2)


def _orjson_text(doc: Any) -> str | None:
    """orjson's text of `doc` when it is the standard library's; None when they could differ."""
    if not _orjson_prints_alike(doc):
        return None
    try:
        text = orjson.dumps(doc, option=orjson.OPT_INDENT_2)
    except orjson.JSONEncodeError:  # a key that is not a string, an integer beyond 64 bits
        return None
    return text.decode() if text.isascii() and b"\x7f" not in text else None


_SCALARS = frozenset({str, int, bool, type(None)})
"""Values orjson prints as the standard library does, or refuses (an integer beyond 64 bits)."""
_ALIKE = _SCALARS | {float, dict, list}


def _orjson_prints_alike(doc: Any) -> bool:
    """Only JSON's own types, every float in the range both print alike. The keys and the integers'
    range are orjson's to refuse. One pass over the containers, each one's values' types taken at
    once: a plan is mostly strings and integers, so few values are looked at alone."""
    pending = [doc]
    while pending:
        value = pending.pop()
        kind = type(value)
        value = value.values() if kind is dict else value if kind is list else (value,)
        kinds = set(map(type, value))
        if kinds <= _SCALARS:
            continue
        if not kinds <= _ALIKE:
            return False
        if float in kinds and not all(x == 0 or 1e-4 <= abs(x) < 1e16 for x in value if type(x) is float):
            return False
        pending += [x for x in value if type(x) is dict or type(x) is list]
    return True


def _must_stop(hd: HostDeployment, fmt: str, wide: bool) -> str:
    """The running services the host's plan stops for a card's switch to device-share mode, one line each."""
    if fmt == "markdown":
        return "\n".join(f"- must stop: {markdown.text(h.text())}" for h in hd.held_cards)
    return "\n".join(f"  must stop: {h.text()}" if wide else fit(h.text(), "  must stop: ", "    ") for h in hd.held_cards)


def _takeover(hp: HostPlan) -> str:
    """What the host's takeover does and what it costs (records.takeover)."""
    chain = longest_start((ps.name, ps.assignment.cards, ps.resolved.start_timeout_seconds) for ps in hp.services)
    return f"{', '.join(hp.host.replaces)} stop {PULLED_FIRST}; their services are {downtime(chain)}"


def _group_rows(plan: Plan) -> tuple[list[str], list[list[str]]]:
    """One row per member of each multi-host service: its role and ranks, and where the followers join."""
    rows = []
    for g in plan.groups:
        dp = g.service.data_parallel
        assert dp is not None
        shape = f"DP {dp.size} x TP {g.service.tensor_parallel_size}" + (", EP" if dp.expert_parallel else "")
        join = f"{g.address}:{g.rpc_port}" if g.rpc_port is not None else "-"
        for mp in g.members:
            ranks = f"{mp.member.ranks.start}-{mp.member.ranks.stop - 1}"
            rows.append([g.name if mp.member.leader else "", shape if mp.member.leader else "", mp.name, mp.role,
                         mp.host.name, ranks, join if mp.member.leader else f"joins {join}"])  # fmt: skip
    return ["service", "shape", "member", "role", "host", "ranks", "DP address"], rows


def _disaggregated_rows(plan: Plan) -> tuple[list[str], list[list[str]]]:
    """One row per prefill or decode instance of each disaggregated service (its KV handshake block and
    engine id, and with the KV pool its lookup_rpc_port), then its proxy's."""
    rows = []
    for d in plan.disaggregated:
        pool = d.service.disaggregated is not None and d.service.disaggregated.kv_pool is not None
        for rp in d.instances:
            ri = rp.role_instance
            rows.append([d.name, ri.role, rp.name, rp.assignment.host_name, f"{rp.url[0]}:{rp.url[1]}",
                         window_text(rp.kv_ports), ri.engine_id, str(rp.lookup_rpc_port) if pool else "-"])  # fmt: skip
        rows.append([d.name, PROXY.column, names.proxy_name(d.name), d.proxy_host.name, d.endpoint, "-", "-", "-"])
    return ["service", "role", "instance", "host", "serves", "KV ports", "engine id", "lookup_rpc_port"], rows


def render_plan(deployment: Deployment, fmt: str, wide: bool = False) -> str:
    """The plan as `fmt`; table and markdown fit WIDTH columns for the committed stacks, or keep one wide
    table of ports and capacity per host and unwrapped lines when `wide` (the output before `--wide` existed)."""
    if fmt == "json":
        return json_text(plan_json(deployment))
    plan = deployment.plan
    services = sum(len(hp.services) for hp in plan.hosts)
    summary = f"stack {plan.stack}: {len(plan.hosts)} host(s), {services} service(s)"
    summary += f", {len(plan.groups)} multi-host service(s)" if plan.groups else ""
    summary += f", {len(plan.disaggregated)} disaggregated service(s)" if plan.disaggregated else ""
    parts = [f"## Allocation plan: {markdown.text(summary)}" if fmt == "markdown" else summary]
    for hd in deployment.hosts:
        hp = hd.plan
        if fmt == "markdown":
            parts.append(f"### {markdown.text(_host_title(hp))}")
            parts += [_md_table(*table) for table in _host_tables(hp, wide)]
        else:
            parts.append(_host_title(hp) if wide else fit(_host_title(hp)))
            parts += [text_table(*table) for table in _host_tables(hp, wide)]
        if hd.held_cards:
            parts.append(_must_stop(hd, fmt, wide))
        if hp.host.replaces:
            text = _takeover(hp)
            parts.append(f"- takes over: {markdown.text(text)}" if fmt == "markdown" else
                         f"  takes over: {text}" if wide else fit(text, "  takes over: ", "    "))  # fmt: skip
    if plan.routers:
        ports = [[window_text(r.windows[k.key]) for k in ROUTER_KINDS] for r in plan.routers]
        rows = [[r.service.name, r.host_name, *p, ", ".join(ps.name for ps in r.replicas)] for r, p in zip(plan.routers, ports)]
        table = (["service", "router host", *(k.column for k in ROUTER_KINDS), "replicas"], rows)
        parts += ["### Routers", _md_table(*table)] if fmt == "markdown" else ["routers", text_table(*table)]
    if plan.groups:
        table = _group_rows(plan)
        parts += ["### Multi-host services", _md_table(*table)] if fmt == "markdown" else ["multi-host services", text_table(*table)]
    if plan.disaggregated:
        table = _disaggregated_rows(plan)
        parts += ["### Disaggregated services", _md_table(*table)] if fmt == "markdown" else ["disaggregated services", text_table(*table)]
    parts += _said(plan.notes, "note", fmt, wide) + _said(plan.warnings, "warning", fmt, wide)
    return "\n\n".join(parts)


def _said(lines: tuple[str, ...], kind: str, fmt: str, wide: bool) -> list[str]:
    """The plan's notes or warnings (`kind`) as a section of their own, after the tables: a heading and
    one item each, wrapped under its first words (`kind: ...`) unless `wide`; none without any."""
    if not lines:
        return []
    if fmt == "markdown":
        return [f"### {kind.capitalize()}s", "\n".join(f"- {markdown.text(line)}" for line in lines)]
    return [f"{kind}s", "\n".join(f"  {kind}: {line}" if wide else fit(line, f"  {kind}: ", "    ") for line in lines)]

