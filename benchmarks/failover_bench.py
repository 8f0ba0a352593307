"""How long the real vllm-router takes to fail over from a killed replica and to take it back.

Run: `.venv/bin/python benchmarks/failover_bench.py [RUNS]` (or `make bench`). The fleet is
tests/test_router_e2e.py's: three stand-in vLLM servers where the plan puts the replicas and the
real vllm-router with exactly the argv of the plan's router container (health checks every 10 s,
3 failures to mark a worker down, 2 successes to bring it back; vllm-router's circuit breaker opens
for 60 s). Per run, one replica is killed while traffic goes through the router, then started
again. Prints, per run: seconds from the kill until the router marks it unhealthy, and the
requests that failed meanwhile (only `GET /v1/models`, which vllm-router does not retry, may);
seconds from the restart until the router marks it healthy, and until it serves again. These are
the timings the test suite waits for but does not assert, since a loaded machine stretches them.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.router_fleet import Fleet, stack, traffic  # noqa: E402
from tests.support.waits import wait_for  # noqa: E402

VICTIM = "bge-2"


def failover(fleet: Fleet) -> dict[str, float]:
    """One kill and restart of VICTIM; its timings and the failed requests."""
    victim = fleet.replicas[VICTIM]
    failed = []

    def sent_until(condition):
        def check():
            failed.extend(r for r in traffic(fleet, 1) if r[1] != 200)
            return condition()

        return check

    killed = time.monotonic()
    victim.kill()
    wait_for(f"{VICTIM} marked unhealthy", sent_until(lambda: fleet.workers()[victim.url] is False), every=0)
    marked_down = time.monotonic() - killed
    failed_while_down = len(failed)
    restarted = time.monotonic()
    victim.start()
    wait_for(f"{VICTIM} marked healthy", sent_until(lambda: fleet.workers()[victim.url]), every=0.2)
    marked_up = time.monotonic() - restarted
    wait_for(f"{VICTIM} serving again", sent_until(lambda: victim.served() > 0), every=0.2)
    serving = time.monotonic() - restarted
    return {"down": marked_down, "failed": failed_while_down, "healthy": marked_up, "serving": serving,
            "failed after": len(failed) - failed_while_down}  # fmt: skip


def main(runs: int) -> None:
    fleet = Fleet(stack())
    try:
        for replica in fleet.replicas.values():
            replica.start()
        with tempfile.TemporaryDirectory(prefix="failover-bench-") as root:
            workers = Path(root) / "workers"
            workers.write_text("".join(f"{url}\n" for url in fleet.router.workers))
            fleet.start_router(workers)
            wait_for("every replica healthy", lambda: fleet.workers() == dict.fromkeys(fleet.router.workers, True))
            results = []
            for run in range(1, runs + 1):
                r = failover(fleet)
                results.append(r)
                print(
                    f"run {run}: killed {VICTIM} marked unhealthy after {r['down']:.1f}s "
                    f"({r['failed']:.0f} requests failed meanwhile); restarted: healthy after "
                    f"{r['healthy']:.1f}s, serving after {r['serving']:.1f}s ({r['failed after']:.0f} failed)",
                    flush=True,
                )
        if runs > 1:
            for key in ("down", "healthy", "serving"):
                values = [r[key] for r in results]
                print(f"{key}: median {statistics.median(values):.1f}s, range {min(values):.1f}-{max(values):.1f}s")
    finally:
        fleet.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
