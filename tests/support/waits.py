"""Waiting for a condition, never for a duration: poll with a generous bound and say what was awaited."""

from __future__ import annotations

import time

WAIT_SECONDS = 300
"""A bound, not an expectation: an idle machine takes seconds to about a minute and a half for the
slowest wait (the real router marking a replica down; Prometheus scraping every 15 s)."""


def wait_for(what: str, check, seconds: float = WAIT_SECONDS, every: float = 0.5, detail=lambda: ""):
    """`check()`'s first true value, polled every `every` seconds (an OSError counts as not yet);
    past `seconds`, an AssertionError naming `what`, with `detail()` (a process's output, say)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            value = check()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {seconds}s waiting for {what}\n{detail()}".rstrip())
