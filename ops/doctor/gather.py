"""The one remote script `doctor` runs per host, and the mark of its frames.

It prints the host's facts in sections: `docker inspect` of every container,
the PIDs of every running container (`docker top`), the image ID each of the plan's image
names has on the host (`docker image inspect`: the docker provider creates containers by that
ID, ops.doctor.drift), the listening TCP sockets (`ss -ltnpH`), `npu-smi info`, the links
between cards (`npu-smi info -t topo`), the device-share mode of the shared cards, what each
router says of its workers (`/workers`), the host's clock, the KV cache each service with
`kvCacheGiB` logged at start (`ops.doctor.kv_log`), and which paths of the host requirements
table (`records.host_requirements`, the table the host check reads too) the host lacks.
"""

from __future__ import annotations

import shlex

from typing import Sequence

from allocation.config import npu_chip
from records.host_requirements import Requirement
from ops.doctor.kv_log import kv_log_script
from ops.framing import shell_preamble

MARK = "@@ascend-fleet-doctor@@"


def _fetch(url: str) -> str:
    """Print a URL's body with whatever the host has: curl, wget or python3."""
    q = shlex.quote(url)
    return (
        f"curl -fsS --max-time 5 {q} 2>/dev/null || wget -q -T 5 -O - {q} 2>/dev/null || "
        f"python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "
        f"{q} 2>&1"
    )


def missing_paths(required: Sequence[Requirement]) -> str:
    """sh printing the required paths the host lacks, one a line."""
    return "".join(f"{r.test(r.path)} || printf '%s\\n' {shlex.quote(r.path)}\n" for r in required)


def gather_script(
    required: Sequence[Requirement],
    shared_cards: Sequence[int] = (),
    routers: Sequence[tuple[str, int]] = (),
    board: str = "a2",
    images: Sequence[str] = (),
    kv_logs: Sequence[str] = (),
) -> str:
    """POSIX sh, run with `sh -s`. The whole script is one { } group, so the shell has
    read all of it before the first command runs; stdin then goes to /dev/null and no
    command can swallow the rest of the script. Every section is one frame (`ops.framing`):
    `cmd | f KIND ARG`. `required`: the paths of the host requirements table to look for;
    `shared_cards`: cards whose device-share mode is read too, addressed as npu-smi numbers them on
    `board` (A3: NPU card//2, chip card%2); `routers`: (container, port) of the routers whose
    `/workers` is read; `images`: the plan's image names, each resolved to the ID it names on the
    host (or docker's answer that there is none); `kv_logs`: containers whose log's KV cache line is read."""
    sharing = "".join(
        "npu-smi info -t device-share -i {} -c {} 2>&1 | f device-share {}\n".format(*npu_chip(int(c), board), int(c))
        for c in shared_cards
    )
    sharing += "".join(
        f"{{ {_fetch(f'http://127.0.0.1:{int(port)}/workers')}; }} | f router-workers {shlex.quote(name)}\n"
        for name, port in routers
    )
    resolve = "".join(
        f"        docker image inspect --format '{{{{.Id}}}}' -- {q} 2>&1 | f image {q}\n" for q in map(shlex.quote, images)
    )
    return f"""{{
{shell_preamble(MARK)}if command -v docker >/dev/null 2>&1; then
    ids=$(docker ps -aq --no-trunc 2>&1)
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "docker ps exited $rc: $ids" | f docker-error
    else
        if [ -n "$ids" ]; then docker inspect $ids 2>/dev/null; else echo '[]'; fi | f docker-inspect
        for id in $(docker ps -q --no-trunc 2>/dev/null); do
            docker top "$id" -eo pid 2>/dev/null | f top "$id"
        done
{resolve}{kv_log_script(kv_logs)}    fi
else
    echo "no docker command on the host" | f docker-error
fi
if command -v ss >/dev/null 2>&1; then
    {{ ss -ltnpH 2>/dev/null || ss -ltnp 2>&1; }} | f ss
else
    echo "no ss command on the host (iproute2)" | f ss-error
fi
out=$(npu-smi info 2>&1); rc=$?
printf '%s\\n' "$out" | f npu-smi; echo $rc | f npu-smi-rc
out=$(npu-smi info -t topo 2>&1); rc=$?
printf '%s\\n' "$out" | f npu-topo; echo $rc | f npu-topo-rc
{sharing}{{
{missing_paths(required)}}} | f missing
date +%s 2>&1 | f clock
f end </dev/null
exit 0
}}
"""
