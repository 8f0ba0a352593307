"""The KV cache a service with `kvCacheGiB` logged at start, read for `doctor`.

With `--kv-cache-memory-bytes`, vLLM-Ascend's worker skips its memory profiling and logs the bytes it
reserved (vllm-ascend@v0.20.2rc1 `vllm_ascend/worker/worker.py` l. 341-354, `%.2f` GiB):

    Initial free memory 60.96 GiB, reserved 20.00 GiB for KV Cache as specified by kv_cache_memory_bytes,
    skipping memory profiling. This does not respect the gpu_memory_utilization config. ...

vLLM's own GPU worker words it "reserved 20.0 GiB memory for KV Cache as specified by
kv_cache_memory_bytes config and skipped memory profiling" (vllm@0.20.2 `v1/worker/gpu_worker.py`
l. 350-352); both are read. `doctor` compares the last such line of the container's log (its latest
start; every rank logs one) with the plan's bytes. No line (an image that ignores the flag logs none,
but so does a log that has rotated past the start) is no finding: there is nothing to compare.
"""

from __future__ import annotations

import re
import shlex
from decimal import Decimal
from typing import Sequence

from allocation.capacity import GIB

MARKER = "for KV Cache as specified by kv_cache_memory_bytes"
"""The words both wordings share: what the host's `grep -F` keeps of the log."""
_RESERVED = re.compile(r"reserved ([0-9]{1,6}(?:\.[0-9]{1,6})?) GiB (?:memory )?" + re.escape(MARKER))
LINE_CHARS = 1000
"""Characters kept of the line on the host: the line is about 500."""


def kv_log_script(containers: Sequence[str]) -> str:
    """sh framing (`f kv-log NAME`) the last KV line of each container's log, cut to `LINE_CHARS`."""
    return "".join(
        f"docker logs {shlex.quote(c)} 2>&1 | grep -F {shlex.quote(MARKER)} | tail -n 1 | cut -c 1-{LINE_CHARS} "
        f"| f kv-log {shlex.quote(c)}\n"
        for c in containers
    )


def logged_gib(line: str) -> Decimal | None:
    """The GiB the line says were reserved; None when it holds no such figure."""
    found = _RESERVED.search(line)
    return Decimal(found.group(1)) if found else None


def differs(logged: Decimal, planned_bytes: int) -> bool:
    """The logged figure is not the planned bytes as the log rounds them (2 decimals, either wording)."""
    return abs(logged - Decimal(planned_bytes) / GIB) > Decimal("0.005")
