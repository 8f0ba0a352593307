"""Plan time for fleets of 10, 100 and 1,000 hosts, and packing quality on random mixes.

Run: `.venv/bin/python benchmarks/plan_bench.py` (or `make bench`). Prints numbers and
ratios; it asserts nothing, so it is not a test.
"""

from __future__ import annotations

import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from allocation.config import parse_fleet  # noqa: E402
from allocation.planner import plan_fleet  # noqa: E402

# Four services per 8-NPU host, like the seed: two TP=4 chat models and two small ones.
MIX = [(4, 0.85), (4, 0.90), (1, 0.10), (1, 0.05)]


def seed_like_fleet(hosts: int) -> dict:
    services = []
    for h in range(hosts):
        for k, (tp, fraction) in enumerate(MIX):
            s = {"name": f"h{h}-s{k}", "model": "/m", "tensorParallelSize": tp, "memoryFraction": fraction}
            if k % 2 == 0:  # half pinned to a host, half placed by the allocator
                s["host"] = f"npu-{h:04d}"
            services.append(s)
    return {"hosts": [{"name": f"npu-{h:04d}", "address": f"10.0.{h // 250}.{h % 250}"} for h in range(hosts)], "services": services}


def time_plan(values: dict, repeat: int) -> float:
    fleet = parse_fleet("bench", values)
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        plan_fleet(fleet)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def packing(seed: int, services: int) -> tuple[int, int]:
    rnd = random.Random(seed)
    mix = [
        {
            "name": f"s{i}",
            "model": "/m",
            "tensorParallelSize": rnd.choice([1, 1, 1, 2, 2, 4, 4, 8]),
            "memoryFraction": rnd.choice([0.1, 0.2, 0.3, 0.45, 0.6, 0.85, 0.9]),
        }
        for i in range(services)
    ]
    values = {"hosts": [{"name": f"npu-{h:04d}", "address": f"10.1.{h // 250}.{h % 250}"} for h in range(services)], "services": mix}
    plan = plan_fleet(parse_fleet("pack", values))
    used = sum(1 for hp in plan.hosts if hp.services)
    demand = sum(s["tensorParallelSize"] * s["memoryFraction"] for s in mix) / 0.95
    return used, math.ceil(demand / 8)


def main() -> None:
    print("plan time (median; 8 NPUs/host, 4 services/host, half auto-placed)")
    print(f"{'hosts':>6} {'services':>9} {'parse+plan':>11} {'plan':>9} {'per host':>10}")
    times = {}
    for hosts in (10, 100, 1000):
        values = seed_like_fleet(hosts)
        start = time.perf_counter()
        plan_fleet(parse_fleet("bench", values))
        total = time.perf_counter() - start
        times[hosts] = time_plan(values, repeat=5 if hosts < 1000 else 3)
        print(f"{hosts:>6} {len(values['services']):>9} {total * 1e3:>9.1f}ms {times[hosts] * 1e3:>7.1f}ms {times[hosts] / hosts * 1e6:>8.1f}us")
    print(f"ratio 100/10 hosts: {times[100] / times[10]:.1f}x, 1000/100 hosts: {times[1000] / times[100]:.1f}x (linear = 10x)")

    print("\npacking on random mixes: hosts used vs lower bound ceil(sum(TP x fraction) / 0.95 / 8)")
    for seed in range(5):
        used, bound = packing(seed, services=400)
        print(f"  mix {seed}: 400 services -> {used} hosts, lower bound {bound}, ratio {used / bound:.3f}")


if __name__ == "__main__":
    main()
