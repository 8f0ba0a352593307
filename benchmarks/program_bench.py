"""Time of the Pulumi program under Pulumi's mocks for fleets of 10, 100 and 1,000 services,
and at 1,000 services side by side with the SDK's floor for the same containers.

Run: `.venv/bin/python benchmarks/program_bench.py` (or `make bench`). Each fleet has
8-NPU hosts with four services each (the seed's mix: two TP=4 models, two small ones
sharing their cards), half pinned to a host and half placed by the allocator. The time
covers what `pulumi preview`/`up` spends in the program: config reading, planning,
every component and resource registration, and the exports, against the mock monitor
(so no engine, provider or network time). Prints numbers and ratios; asserts nothing.

The floor (`floor_program.py`) registers what the engine needs at the least for the same fleet:
one docker provider per host and one bare container per service, with the program's two SDK
tunings. The program registers more per service (its component, the host's check, device-share,
start-order and image steps), so the ratio is printed per run and per registration.
Then single shards of a fleet of 1,000 hosts / 4,000 services deployed as shards of 50 hosts, and
all 20 of them against the same fleet as one stack: together they must register exactly its
resources.
`--run KIND N` times one program alone (`program`, `floor` or `plain`, the untuned floor of
`floor_plain.py`), for timing whole processes from outside.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from allocation.config import parse_fleet  # noqa: E402
from tests.support.pipeline import plan_of  # noqa: E402
from tests.support.pulumi_harness import CONTAINER, MAIN, run_program  # noqa: E402

HERE = Path(__file__).resolve().parent
PROGRAMS = {"program": MAIN, "floor": HERE / "floor_program.py", "plain": HERE / "floor_plain.py"}

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


def time_once(values: dict, main: Path = MAIN) -> tuple[float, int, int]:
    """Seconds, registrations and containers of one run of `main`."""
    gc.collect()  # not the previous run's garbage: a language host's process ends with its program
    start = time.perf_counter()
    run = run_program("bench", values, main=main)
    return time.perf_counter() - start, len(run.registrations), len(run.of_type(CONTAINER))


def time_program(values: dict, repeat: int) -> tuple[float, int, int]:
    runs = [time_once(values) for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), runs[-1][1], runs[-1][2]


def against_floor(services: int, pairs: int, kind: str) -> None:
    """The program and a floor in turn, the ratio pair by pair (so drift in the machine's speed
    cancels), as whole runs and per registration."""
    values = fleet(services)
    ratios, per_registration = [], []
    for _ in range(pairs):
        program, program_registered, _ = time_once(values)
        floor, floor_registered, floor_containers = time_once(values, PROGRAMS[kind])
        assert floor_containers == services, f"{floor_containers} {kind} containers for {services} services"
        ratios.append(program / floor)
        per_registration.append((program / program_registered) / (floor / floor_registered))
        print(f"program {program:.2f}s ({program_registered} resources), {kind} {floor:.2f}s ({floor_registered})")
    print(
        f"program / {kind} at {services} services: {statistics.median(ratios):.2f} (median of {pairs}); "
        f"per registration: {statistics.median(per_registration):.2f}"
    )


def time_plan(values: dict) -> float:
    gc.collect()
    start = time.perf_counter()
    plan_of(values, "bench")
    return time.perf_counter() - start


def shard_values(values: dict, index: int) -> dict:
    """Shard `index` of fleet `bench`'s values, as `python -m allocation shards` cuts it, for stack
    `bench-shard-<index>`."""
    cut = parse_fleet("bench", values).shard_hash("bench", index)
    return values | {"shardOf": {"fleet": "bench", "index": index, "fleetHash": cut}}


def one_shard(services: int, size: int, shards: tuple[int, ...]) -> None:
    """The program of single shards of a fleet deployed as shards: each plans the whole fleet and
    registers only its hosts' slice (docs/shards.md). The allocator packs the unpinned half of the
    services onto the first hosts, so shard 0 holds the most."""
    values = fleet(services) | {"shards": {"size": size}}
    for k in shards:
        shard = shard_values(values, k)
        gc.collect()
        start = time.perf_counter()
        run = run_program(f"bench-shard-{k}", shard)
        seconds = time.perf_counter() - start
        print(
            f"shard {k} of {len(values['hosts'])} hosts / {services} services (size {size}): "
            f"{len(run.of_type(CONTAINER))} containers, {len(run.registrations)} resources, {seconds:.2f}s"
        )


def union_of_shards(services: int, size: int) -> None:
    """Every shard of the fleet registered, against the same fleet as one stack (one shard of all
    its hosts, as tests/test_shards_program.py builds it): the union must be the one stack's
    registrations, resource for resource. The run stops at the first difference."""
    values = fleet(services) | {"shards": {"size": size}}
    count = -(-len(values["hosts"]) // size)
    union: list[str] = []
    for k in range(count):
        union += run_program(f"bench-shard-{k}", shard_values(values, k)).registered()
    whole = values | {"shards": {"size": len(values["hosts"])}}
    one = run_program("bench-shard-0", shard_values(whole, 0)).registered()
    union.sort()
    if union != one:
        first = next((a, b) for a, b in zip(union + [""] * len(one), one + [""] * len(union)) if a != b)
        raise SystemExit(f"the {count} shards register other resources than one stack; first difference:\n{first}")
    print(f"the {count} shards of {len(values['hosts'])} hosts / {services} services together: {len(one)} registrations, those of one stack")


def run_one(kind: str, services: int) -> None:
    run_program("bench", fleet(4), main=PROGRAMS[kind])  # warm-up: imports
    seconds, registered, _ = time_once(fleet(services), PROGRAMS[kind])
    print(f"{kind}: {services} services, {registered} resources, {seconds:.2f}s")


def main() -> None:
    if sys.argv[1:2] == ["--run"]:
        return run_one(sys.argv[2], int(sys.argv[3]))
    for program in PROGRAMS.values():
        run_program("bench", fleet(4), main=program)  # warm-up: imports
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
    for kind in ("floor", "plain"):
        against_floor(SIZES[-1], pairs=3, kind=kind)
    one_shard(4000, 50, (0, 7, 19))
    union_of_shards(4000, 50)


if __name__ == "__main__":
    main()
