"""What one shard costs under the real engine, by its number of hosts: docs/performance.md "Shards".

Run where the Pulumi CLI and plugins are on PATH (as for tests/engine, docs/testing.md), as root:
`.venv/bin/python benchmarks/shard_bench.py [--hosts 10,25,50] [--pair 25]`. Each simulated host
(sim/fleet.py) is its own SSH endpoint with its own host key and docker provider, with four
stand-in containers (tests/engine/shard_fleet.py). For each size, one shard of that many hosts:

- `up s`: wall time of the first `pulumi up --parallel P`, P = the shard's resources (no
  container waits for a slot);
- `preview s`: wall time of the `pulumi preview` after it (which must change nothing);
- `providers`: the peak number of resource plugin processes (`pulumi-resource-*`: a docker
  provider per host, one command provider); `plugins`: the same with the language host
  (`pulumi-language-*`, one per program run)
  under the `pulumi` process during the `up`, sampled every 0.2 s;
- `RSS MB`, `PSS MB`: the peak sum over the `pulumi` process tree (RSS counts the pages the
  plugin processes share once per process; PSS shares them out);
- `state KB`: the size of the shard's checkpoint as the file backend stores it (compact JSON,
  rewritten after every step: pulumi `pkg/backend/diy/state.go`, `compactJSONMarshaler`);
- `export KB`: `pulumi stack export | wc -c` (the same state, indented).

After each size, 10 hosts join the fleet (unpinned, so they fill a new shard) and every shard
already up is previewed again: it must change nothing (the run stops if it does).

Then `--pair N`: two shards of N hosts, `up` side by side (both processes trees summed). Each shard
is destroyed before the next size. Timings are single runs on a shared machine: read the growth,
not the last digit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.fleet import SimFleet  # noqa: E402
from sim.host import SimHost  # noqa: E402
from tests.engine.engine import Project  # noqa: E402
from tests.engine.shard_fleet import MODEL, SERVICES_PER_HOST, ShardedFleet, fleet_values  # noqa: E402

PROVIDER_PREFIX = "pulumi-resource"
PLUGIN_PREFIXES = (PROVIDER_PREFIX, "pulumi-language")
RESOURCES_PER_HOST = 4 + 2 * SERVICES_PER_HOST  # provider, check, image, component; service + container
GROWTH = 10  # hosts that join the fleet after each size


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, comm) of every process now."""
    table = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            table[int(entry.name)] = (int(stat[stat.rindex(")") + 2 :].split()[1]), comm)
    return table


def _kb(pid: int, path: str, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/{path}").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class TreeSampler(threading.Thread):
    """Samples the process trees of every `pulumi` child of this process until stopped: the peak
    plugin count and the peak RSS and PSS sums.

    Plugins are the `pulumi` processes' own children: the CLI starts each plugin. A docker
    provider forks an `ssh` for each session, and until that child has exec'd it carries the
    provider's name; counting the whole tree by name caught such forks on a loaded machine."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.providers = self.plugins = self.rss_kb = self.pss_kb = 0
        self._done = threading.Event()

    def run(self) -> None:
        me = os.getpid()
        while not self._done.wait(0.2):
            table = _proc_table()
            clis = {pid for pid, (ppid, comm) in table.items() if ppid == me and comm == "pulumi"}
            tree = set(clis)
            grew = True
            while grew:
                more = {pid for pid, (ppid, _) in table.items() if ppid in tree} - tree
                tree |= more
                grew = bool(more)
            names = [comm for ppid, comm in table.values() if ppid in clis]
            self.providers = max(self.providers, sum(n.startswith(PROVIDER_PREFIX) for n in names))
            self.plugins = max(self.plugins, sum(n.startswith(PLUGIN_PREFIXES) for n in names))
            self.rss_kb = max(self.rss_kb, sum(_kb(p, "status", "VmRSS:") for p in tree))
            self.pss_kb = max(self.pss_kb, sum(_kb(p, "smaps_rollup", "Pss:") for p in tree))

    def stop(self) -> None:
        self._done.set()
        self.join()


def measure(shards: list[Project], hosts_per_shard: int) -> dict[str, float]:
    """Up the shards side by side, then preview each; the figures."""
    parallel = str(RESOURCES_PER_HOST * hosts_per_shard)
    sampler = TreeSampler()
    sampler.start()
    started = time.monotonic()
    with ThreadPoolExecutor(len(shards)) as pool:
        for future in [pool.submit(s.run, "up", "--parallel", parallel) for s in shards]:
            future.result()
    up = time.monotonic() - started
    sampler.stop()
    started = time.monotonic()
    for shard in shards:
        steps = [s for s in shard.preview_json().get("steps") or () if s["op"] != "same"]
        if steps:
            raise SystemExit(f"the preview after up of {shard.stack} changes {len(steps)} resources: {steps[:3]}")
    preview = (time.monotonic() - started) / len(shards)
    state = sum(checkpoint(s).stat().st_size for s in shards)
    export = sum(len(s.cli("stack", "export", "--stack", s.stack).stdout) for s in shards)
    return {
        "up s": up, "preview s": preview, "providers": sampler.providers, "plugins": sampler.plugins,
        "RSS MB": sampler.rss_kb / 1024, "PSS MB": sampler.pss_kb / 1024,
        "state KB": state / len(shards) / 1024, "export KB": export / len(shards) / 1024,
    }  # fmt: skip


def checkpoint(shard: Project) -> Path:
    """The shard's checkpoint file in the project's file backend (`.pulumi/stacks/PROJECT/STACK.json`)."""
    backend = Path(urllib.parse.urlparse(shard.env["PULUMI_BACKEND_URL"]).path)
    project = yaml.safe_load((shard.root / "Pulumi.yaml").read_text())["name"]
    return backend / ".pulumi" / "stacks" / project / f"{shard.stack}.json"


def grow_by(sim: SimFleet, fleet: ShardedFleet, pins: dict[str, int], per_shard: int, more: int) -> None:
    """`more` hosts join the fleet unpinned; every shard stack already up must preview no change."""
    before = dict(fleet.shards)
    wanted = len(pins) + more
    if len(sim.endpoints) < wanted:
        sim.add(wanted - len(sim.endpoints))
    fleet.write(fleet_values(sim, per_shard, pins, wanted))
    fleet.cut()
    for shard in before.values():
        steps = [s for s in shard.preview_json().get("steps") or () if s["op"] != "same"]
        if steps:
            raise SystemExit(f"{more} hosts more changed {len(steps)} resources of {shard.stack}: {steps[:3]}")


def run_case(sim: SimFleet, workdir: Path, shards: int, per_shard: int) -> dict[str, float]:
    """`shards` shards of `per_shard` hosts each, measured, then destroyed."""
    wanted = shards * per_shard
    if len(sim.endpoints) < wanted:
        sim.add(wanted - len(sim.endpoints))
    pins = {e.name: i // per_shard for i, e in enumerate(sim.endpoints[:wanted])}
    fleet = ShardedFleet(workdir, fleet_values(sim, per_shard, pins, wanted), dict(os.environ))
    stacks = list(fleet.cut().values())
    try:
        row = measure(stacks, per_shard)
        grow_by(sim, fleet, pins, per_shard, GROWTH)
        return row
    finally:
        for shard in stacks:
            shard.cli("destroy", "--stack", shard.stack, "--yes", "--parallel", "64", check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default="10,25,50", help="hosts per shard, one shard each (default 10,25,50)")
    parser.add_argument("--pair", type=int, default=25, help="then two shards of this many hosts side by side (0: none)")
    args = parser.parse_args()
    cases = [(1, int(n)) for n in args.hosts.split(",") if n] + ([(2, args.pair)] if args.pair else [])
    print(f"# {os.cpu_count()} cores; {SERVICES_PER_HOST} containers per host; {json.dumps(os.uname()[2])}")
    columns = ["shards x hosts", "containers", "up s", "preview s", "providers", "plugins", "RSS MB", "PSS MB"]
    columns += ["state KB", "export KB"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    with tempfile.TemporaryDirectory(prefix="shard-bench-") as tmp, SimHost(Path(tmp) / "host", lock_timeout=3600) as host:
        host.make_model(MODEL)
        with SimFleet(host, Path(tmp) / "fleet") as sim:
            for i, (shards, per_shard) in enumerate(cases):
                row = run_case(sim, Path(tmp) / f"case{i}", shards, per_shard)
                cells = " | ".join(f"{v:.0f}" if k in ("providers", "plugins") else f"{v:.1f}" for k, v in row.items())
                print(f"| {shards} x {per_shard} | {shards * per_shard * SERVICES_PER_HOST} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
