"""Model loads that last until the test has seen what it waits for.

Whether a neighbour meets a card's lock, or starts beside an instance that is still loading, used
to hang on how long a simulated load took (2 s, 6 s, 8 s) against how soon Docker started the
neighbour: a race that a loaded machine can lose, and a wait that an idle one pays in full. The
simulator's `vllm` keeps loading while `stretched-loads/<served model name>` exists in its state
folder (sim/npu-sim/vllm), so a test holds the load open, waits for the neighbour's log line, and
lets the load finish. What the tests check (who waits, who fails with which error, who serves) is
unchanged; only the bet on a duration is gone.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from sim.host import CLAIMS_DIR, SimHost

STRETCHED = CLAIMS_DIR / "stretched-loads"


@contextmanager
def stretched_loads(*served: str) -> Iterator[None]:
    """The instances serving `served` keep loading inside the block; their loads finish after it."""
    STRETCHED.mkdir(exist_ok=True)
    marks = [STRETCHED / name for name in served]
    for mark in marks:
        mark.touch()
    try:
        yield
    finally:
        for mark in marks:
            mark.unlink(missing_ok=True)


def now() -> str:
    """This moment as `docker logs --since` reads it, for `SimHost.logs`'s `since` (RFC 3339, UTC,
    microseconds): the simulated host's dockerd runs on this machine, on this clock."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def wait_for_any_log(
    sim: SimHost, names: Iterable[str], text: str, *, since: str | None = None, timeout: float = 120
) -> str:
    """The first of the containers `names` whose log (`since`) holds `text`; fails after `timeout`
    seconds with every log's tail."""
    names = tuple(names)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name in names:
            if text in sim.logs(name, since):
                return name
        time.sleep(0.5)
    tails = {name: sim.logs(name, since)[-1500:] for name in names}
    raise AssertionError(f"none of {names} logged {text!r}: {tails}")
