"""The NPU exporter as the fleet deploys it, on the simulated host, scraped by the real Prometheus.

Prod's stack file with `metrics.npuExporter` on (pointed at the simulated host, as
tests/simhost/test_prod_layout.py does) plans one exporter container for its one host; the test
runs exactly that container's `docker run` arguments (views.exports.render.docker_run_args of the record the
Pulumi program uses) over SSH, with the stand-in image (sim/exporter.py) in place of the one the
operator builds. Debian's `prometheus` then reads the files `render --format prometheus` writes,
scrapes the `npu-exporter` job there, and every card panel of the dashboard (views/exports/dashboard.py)
returns data; the HBM in use it reports is the simulated card's, set by a running npu-sim service.

THIS MACHINE CANNOT START `--privileged` CONTAINERS: its root lacks CAP_SYS_RESOURCE in the
bounding set, and runc refuses with "unable to apply caps: operation not permitted". Where that
is so, and only there, `--privileged` is replaced by every capability this daemon can grant
(sim.exporter.as_this_daemon_allows, which names what is left out); every other argument is the
planned one. A daemon that starts privileged containers runs the planned arguments unchanged.
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

from allocation.errors import ConfigError
from cli.safe_write import write_set
from views.exports import dashboard, prometheus
from views.exports.render import docker_run_args
from records.deployment import Deployment
from sim.exporter import IMAGE, as_this_daemon_allows, build_exporter_image, npu_state_in_driver
from sim.host import CLAIMS_DIR, SimHost, free_port
from tests.conftest import require_binary
from tests.support.sim_stacks import prod_values_on_the_simulated_host
from tests.support.pipeline import deployment_of
from tests.support.waits import wait_for



def prod_with_the_exporter(sim: SimHost) -> Deployment:
    """Prod on the simulated host with the exporter on, at a port free on this machine that the
    plan accepts (8082 may be taken by another run; the exporter accepts 1025-40000)."""
    values = prod_values_on_the_simulated_host(sim)
    for _ in range(200):
        port = free_port()
        if not 1025 <= port <= 40000:
            continue
        values["metrics"] = {**values.get("metrics", {}), "npuExporter": {"image": IMAGE}, "npuExporterPort": port}
        try:
            return deployment_of(values, "prod")
        except ConfigError:
            continue  # a port inside a pinned window
    raise AssertionError("no free port in 1025-40000 that prod's plan accepts")


def query(api: str, expr: str) -> list[dict]:
    with urllib.request.urlopen(f"{api}/query?query={urllib.parse.quote(expr)}", timeout=10) as r:
        return json.loads(r.read())["data"]["result"]


def card_panel_queries(deployment: Deployment) -> dict[str, str]:
    """Each card panel's PromQL as the dashboard has it, by panel title and row."""
    board = json.loads(dashboard.render(deployment))
    panels = board["panels"]
    rows = {p["id"]: p["title"] for p in panels if p["type"] == "row"}
    out = {}
    for p in panels:
        if p["type"] != "row" and "of its cards" in p["title"]:
            row = max(i for i in rows if i < p["id"])
            out[f"{rows[row]}: {p['title']}"] = p["targets"][0]["expr"]
    return out


def test_prods_exporter_runs_as_planned_and_prometheus_scrapes_the_simulated_cards(sim_host: SimHost, tmp_path: Path) -> None:
    build_exporter_image()
    deployment = prod_with_the_exporter(sim_host)
    (hd,) = deployment.hosts
    spec = hd.exporter
    assert spec is not None and spec.privileged
    port = deployment.plan.fleet.metrics.npu_exporter_port
    # A model on card 5, so the card's HBM in use is the simulated card's and not a constant.
    model = sim_host.make_model("bge-m3")
    sim_host.start_service("hbm-user", model=model, cards=[5], port=7107, gpu_memory_utilization=0.25, publish=False)
    sim_host.wait_healthy("hbm-user")
    owner = dict(line.split("=", 1) for line in next(CLAIMS_DIR.glob("card5/port*/owner")).read_text().splitlines())

    binary = require_binary("prometheus", "prometheus")
    with npu_state_in_driver():
        args = as_this_daemon_allows(docker_run_args(spec), sim_host.privileged_containers_run())
        sim_host.docker("run", *args[:1], *[f"--label={k}={v}" for k, v in sim_host.labels().items()], *args[1:])
        sim_host.wait_healthy(spec.name, timeout=120)

        out = tmp_path / "prometheus"
        write_set(out, prometheus.files(deployment))
        web = free_port()
        argv = [binary, f"--config.file={out / prometheus.CONFIG}", f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{web}"]  # fmt: skip
        log = (tmp_path / "prometheus.log").open("w")
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        api = f"http://127.0.0.1:{web}/api/v1"
        try:
            detail = lambda: (tmp_path / "prometheus.log").read_text()[-3000:] + sim_host.logs(spec.name)[-2000:]  # noqa: E731

            def exporter_target():
                with urllib.request.urlopen(f"{api}/targets", timeout=10) as r:
                    active = json.loads(r.read())["data"]["activeTargets"]
                found = [t for t in active if t["labels"]["job"] == "npu-exporter"]
                return found if found and all(t["health"] == "up" for t in found) else None

            (target,) = wait_for("the npu-exporter target to be up", exporter_target, detail=detail)
            assert target["scrapeUrl"] == f"http://{sim_host.address}:{port}/metrics"
            assert target["labels"]["host"] == hd.name

            used = wait_for("card 5's HBM in use", lambda: query(api, 'npu_chip_info_hbm_used_memory{id="5"}'), detail=detail)
            assert float(used[0]["value"][1]) == float(owner["mem_mb"]) > 0
            idle = query(api, 'npu_chip_info_hbm_used_memory{id="6"}')
            assert float(idle[0]["value"][1]) == 0

            for panel, expr in card_panel_queries(deployment).items():
                wait_for(f"data for {panel} ({expr})", lambda: query(api, expr), detail=detail)
        finally:
            server.terminate()
            server.wait(30)
            log.close()
            sim_host.docker("rm", "-f", spec.name, check=False)
