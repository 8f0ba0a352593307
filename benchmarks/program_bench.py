"""Time of the Pulumi program under Pulumi's mocks for fleets of 10, 100 and 1,000 services.

Run: `.venv/bin/python benchmarks/program_bench.py` (or `make bench`). Each fleet has
8-NPU hosts with four services each (the seed's mix: two TP=4 models, two small ones
sharing their cards), half pinned to a host and half placed by the allocator. The time
covers what `pulumi preview`/`up` spends in the program: config reading, planning,
every component and resource registration, and the exports, against the mock monitor
(so no engine, provider or network time). Prints numbers and ratios; asserts nothing.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.pulumi_harness import CONTAINER, run_program  # noqa: E402
from tests.support.pipeline import plan_of  # noqa: E402

# Four services per 8-NPU host, like the seed: two TP=4 chat models and two small ones.
MIX = [(4, 0.85), (4, 0.90), (1, 0.10), (1, 0.05)]
SIZES = (10, 100, 1000)


def fleet(services: int) -> dict:
    hosts = -(-services // len(MIX))
    out = []
    for i in range(services):
        h, k = divmod(i, len(MIX))
        tp, fraction = MIX[k]
        s = {"name": f"h{h}-s{k}", "model": f"/models/m{k}", "tensorParallelSize": tp, "memoryFraction": fraction}
        if k % 2 == 0:
            s["host"] = f"npu-{h:04d}"
        out.append(s)
    return {
        "hosts": [{"name": f"npu-{h:04d}", "address": f"10.0.{h // 250}.{h % 250}", "npus": 8} for h in range(hosts)],
        "services": out,
    }


def time_program(values: dict, repeat: int) -> tuple[float, int, int]:
    runs, resources, containers = [], 0, 0
    for _ in range(repeat):
        gc.collect()  # not the previous run's garbage: a language host's process ends with its program
        start = time.perf_counter()
        run = run_program("bench", values)
        runs.append(time.perf_counter() - start)
        resources, containers = len(run.registrations), len(run.of_type(CONTAINER))
    return statistics.median(runs), resources, containers


def time_plan(values: dict) -> float:
    gc.collect()
    start = time.perf_counter()
    plan_of(values, "bench")
    return time.perf_counter() - start


def main() -> None:
    run_program("bench", fleet(4))  # warm-up: imports
    results = {}
    print(f"{'services':>8} {'hosts':>6} {'resources':>9} {'seconds':>9} {'ms/service':>10} {'of which plan':>13}")
    for n in SIZES:
        values = fleet(n)
        seconds, resources, containers = time_program(values, repeat=3 if n < 1000 else 1)
        assert containers == n, f"{containers} containers for {n} services"
        results[n] = seconds
        plan = time_plan(values)
        print(
            f"{n:>8} {len(values['hosts']):>6} {resources:>9} {seconds:>9.3f} {1000 * seconds / n:>10.2f} "
            f"{plan:>12.3f}s"
        )
    for small, big in zip(SIZES, SIZES[1:]):
        print(f"time({big}) / time({small}) = {results[big] / results[small]:.1f} (x{big // small} services)")


if __name__ == "__main__":
    main()
