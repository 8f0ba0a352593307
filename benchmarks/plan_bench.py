"""Plan time, whole-process `plan` time, and packing quality against two lower bounds.

Run: `make bench` (installs `requirements-bench.txt`: HiGHS for the card-level bound), or
`.venv/bin/python benchmarks/plan_bench.py` in a venv that has `highspy`. Prints numbers and
ratios; it asserts nothing, so it is not a test (it stops only if a "lower bound" is ever above
a real placement, which would be a bug in the bound).

The whole-process figure is `python -m allocation plan --format json` on a random mix of 5,333 services
on 1,300 hosts, as a shard runs it: wall and CPU time, median of five runs.

Packing is measured on 15 random mixes, their seeds drawn at each run (printed; `--seeds` replays
them), at three sizes: S services on 1.3 x S x 3/16 hosts, where
S x 3/16 is about the hosts the mix needs (75, 250 and 1,000). Two bounds (`card_bound.py` says
why the second is one):
- closed form: ceil(sum(TP x fraction) / budget / 8);
- card level: ceil(C / 8), C the fewest cards a bin packing of the services' card slots needs,
  proven optimal by HiGHS.
The day-2 part plans 80% of a mix, pins it (host and devices, as `pin` would) and adds the other
20%, with and without the rule that keeps newcomers off pinned services' cards.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from allocation.config import FleetConfig, parse_fleet, units  # noqa: E402
from allocation.instance import Instance, instances  # noqa: E402
from allocation.placeable import Placement  # noqa: E402
from allocation.placement import Placer  # noqa: E402
from allocation.planner import plan_fleet  # noqa: E402
from benchmarks.card_bound import min_hosts  # noqa: E402
from tests.support.pipeline import plan_of  # noqa: E402

# Four services per 8-NPU host, like the seed: two TP=4 chat models and two small ones.
MIX = [(4, 0.85), (4, 0.90), (1, 0.10), (1, 0.05)]
TPS = [1, 1, 1, 2, 2, 4, 4, 8]
FRACTIONS = [0.1, 0.2, 0.3, 0.45, 0.6, 0.85, 0.9]
SCALES = {75: 400, 250: 1333, 1000: 5333}  # hosts needed, about -> services
MIXES = 15


def seed_like_fleet(hosts: int) -> dict:
    services = []
    for h in range(hosts):
        for k, (tp, fraction) in enumerate(MIX):
            s = {"name": f"h{h}-s{k}", "model": "/m", "tensorParallelSize": tp, "memoryFraction": fraction}
            if k % 2 == 0:  # half pinned to a host, half placed by the allocator
                s["host"] = f"npu-{h:04d}"
            services.append(s)
    return {"hosts": [{"name": f"npu-{h:04d}", "address": f"10.0.{h // 250}.{h % 250}"} for h in range(hosts)], "services": services}


def random_mix(seed: int, services: int) -> dict:
    """`services` random services on 30% more hosts than they need."""
    rnd = random.Random(seed)
    mix = [
        {"name": f"s{i:05d}", "model": "/m", "tensorParallelSize": rnd.choice(TPS), "memoryFraction": rnd.choice(FRACTIONS)}
        for i in range(services)
    ]
    hosts = math.ceil(services * 3 / 16 * 1.3)
    return {"hosts": [{"name": f"npu-{h:04d}", "address": f"10.{h // 62500}.{h // 250 % 250}.{h % 250}"} for h in range(hosts)], "services": mix}


def time_plan(values: dict, repeat: int) -> float:
    fleet = parse_fleet("bench", values)
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        plan_fleet(fleet)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def bounds(fleet: FleetConfig) -> tuple[int, int]:
    """(closed-form, card-level) lower bounds on the hosts the fleet's services need."""
    budget = units(fleet.budget(fleet.hosts[0]))
    demand = sum(s.tensor_parallel_size * units(s.memory_fraction) for s in fleet.services)
    card = min_hosts(((s.tensor_parallel_size, units(s.memory_fraction)) for s in fleet.services), budget)
    return math.ceil(demand / budget / 8), card


def hosts_used(placed: list[Placement]) -> int:
    return len({p.host.name for p in placed})


def every_instance(fleet) -> list[Instance]:
    return [i for s in fleet.services for i in instances(s, fleet.defaults)]


def draw_seeds() -> list[int]:
    """Fresh seeds for the mixes, from the system's randomness: the packing is measured on mixes no
    one tuned the placer on; the printed seeds replay them (placement itself is deterministic)."""
    draw = random.SystemRandom()
    return [draw.randrange(2**32) for _ in range(MIXES)]


def check(used: int, bound: int, what: str) -> None:
    if bound > used:
        raise SystemExit(f"BUG: {what}: the card-level 'lower bound' {bound} is above a real placement of {used} hosts")


def packing(seeds: list[int]) -> None:
    print("\npacking on random mixes: hosts used vs lower bounds (closed form; card level, HiGHS)")
    print(f"seeds (--seeds to run these again): {','.join(map(str, seeds))}")
    print(f"{'~hosts':>6} {'services':>8} {'mixes':>5} {'gap to closed':>14} {'gap to card-LB':>15} {'<= card-LB+1':>12} {'plan':>8}")
    for scale, services in SCALES.items():
        closed_gaps, card_gaps, seconds = [], [], []
        for seed in seeds:
            fleet = parse_fleet("pack", random_mix(seed, services))
            start = time.perf_counter()
            plan = plan_fleet(fleet)
            seconds.append(time.perf_counter() - start)
            used = sum(1 for hp in plan.hosts if hp.services)
            closed, card = bounds(fleet)
            check(used, card, f"mix {seed} of {services}")
            closed_gaps.append(used - closed)
            card_gaps.append(used - card)
        within = sum(g <= 1 for g in card_gaps)
        print(
            f"{scale:>6} {services:>8} {len(seeds):>5} {_spread(closed_gaps):>14} {_spread(card_gaps):>15} "
            f"{within:>9}/{len(seeds)} {statistics.median(seconds) * 1e3:>6.0f}ms"
        )


def _spread(gaps: list[int]) -> str:
    return f"{min(gaps)}-{max(gaps)} (avg {statistics.mean(gaps):.1f})"


def day_two(seeds: list[int]) -> None:
    print("\nday 2 at ~1,000 hosts: 80% of each mix planned and pinned, then 20% newcomers added")
    print(f"{'newcomers keep off pinned cards':>32} {'gap to card-LB':>15} {'<= card-LB+1':>12} {'newcomers on a pinned card':>27}")
    results: dict[bool, list[int]] = {True: [], False: []}
    shared: dict[bool, list[int]] = {True: [], False: []}
    for seed in seeds:
        values = random_mix(seed, SCALES[1000])
        old = values["services"][: len(values["services"]) * 4 // 5]
        day1 = parse_fleet("day1", values | {"services": old})
        first = {p.instance.name: p for p in Placer(day1).run(every_instance(day1)).value}
        pinned = [s | {"host": first[s["name"]].host.name, "devices": list(first[s["name"]].cards)} for s in old]
        fleet = parse_fleet("day2", values | {"services": pinned + values["services"][len(old) :]})
        card = bounds(fleet)[1]
        for rule in (True, False):
            placer = Placer(fleet, keep_off_running=rule)
            placed = placer.run(every_instance(fleet)).value
            used = hosts_used(placed)
            check(used, card, f"day-2 mix {seed}")
            results[rule].append(used - card)
            newcomers = [p for p in placed if p.instance.devices is None]
            shared[rule].append(sum(any(placer.cards[p.host.name].held(c) for c in p.cards) for p in newcomers))
    for rule in (True, False):
        gaps = results[rule]
        print(
            f"{'yes (as planned)' if rule else 'no':>32} {_spread(gaps):>15} {sum(g <= 1 for g in gaps):>9}/{len(seeds)} "
            f"{statistics.mean(shared[rule]):>15.0f} of {len(newcomers)}"
        )


WHOLE_RUNS = 5


def whole_process() -> None:
    """`python -m allocation plan --format json` as an operator runs it, stack file to JSON: the wall time
    and the CPU time (user + system, the kernel's account of the finished child) of each run, median of
    WHOLE_RUNS after one run not counted (it warms the file cache). On a shared machine the wall time
    waits for a core too; the CPU time is the process's own work."""
    print(f"\nwhole process: python -m allocation plan --format json (median of {WHOLE_RUNS}, one warm-up not counted)")
    for services in (SCALES[1000],):
        values = random_mix(0, services)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "Pulumi.bench.yaml"
            path.write_text(_stack_yaml(values), encoding="utf-8")
            command = [sys.executable, "-m", "allocation", "plan", "--config", str(path), "--format", "json"]
            walls, cpus = [], []
            for run in range(WHOLE_RUNS + 1):
                wall, cpu = _timed(command)
                if run:
                    walls.append(wall)
                    cpus.append(cpu)
        print(
            f"  {len(values['hosts'])} hosts, {services} services: wall {statistics.median(walls):.2f}s "
            f"(min {min(walls):.2f}s), CPU {statistics.median(cpus):.2f}s (min {min(cpus):.2f}s)"
        )


def _timed(command: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one run of `command`, its output thrown away."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=os.environ | {"PYTHONPATH": str(ROOT)})  # fmt: skip
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _stack_yaml(values: dict) -> str:
    """A stack file in block style, one key a line, as operators and `pin` write them."""
    lines = ["config:", "  ascend-fleet:hosts:"]
    for h in values["hosts"]:
        lines += [f"    - name: {h['name']}", f"      address: {h['address']}"]
    lines.append("  ascend-fleet:services:")
    for s in values["services"]:
        lines.append(f"    - name: {s['name']}")
        lines += [f"      {k}: {json.dumps(v)}" for k, v in s.items() if k != "name"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", help=f"the {MIXES} mixes' seeds, comma-separated (default: drawn now)")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else draw_seeds()
    print("plan time (median; 8 NPUs/host, 4 services/host, half auto-placed)")
    print(f"{'hosts':>6} {'services':>9} {'parse+plan':>11} {'plan':>9} {'per host':>10}")
    times = {}
    for hosts in (10, 100, 1000):
        values = seed_like_fleet(hosts)
        start = time.perf_counter()
        plan_of(values, "bench")
        total = time.perf_counter() - start
        times[hosts] = time_plan(values, repeat=5 if hosts < 1000 else 3)
        print(f"{hosts:>6} {len(values['services']):>9} {total * 1e3:>9.1f}ms {times[hosts] * 1e3:>7.1f}ms {times[hosts] / hosts * 1e6:>8.1f}us")
    print(f"ratio 100/10 hosts: {times[100] / times[10]:.1f}x, 1000/100 hosts: {times[1000] / times[100]:.1f}x (linear = 10x)")
    packing(seeds)
    day_two(seeds)
    whole_process()


if __name__ == "__main__":
    main()
