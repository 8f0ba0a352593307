"""The one remote script `doctor` runs per host, and the marker that splits its output.

It prints the host's facts in sections: `docker inspect` of every container,
the PIDs of every running container (`docker top`), the listening TCP sockets
(`ss -ltnpH`), `npu-smi info`, the device-share mode of the shared cards, what
each router says of its workers (`/workers`), the Ascend device files and the
driver folder.
Paths come from `allocation.containers`, the constants the containers use.
"""

from __future__ import annotations

import shlex

from typing import Sequence

from allocation.containers import CONTROL_DEVICES, DRIVER_DIR
from allocation.device_share import CHIP

MARK = "@@ascend-fleet-doctor@@"


def _fetch(url: str) -> str:
    """Print a URL's body with whatever the host has: curl, wget or python3."""
    q = shlex.quote(url)
    return (
        f"curl -fsS --max-time 5 {q} 2>/dev/null || wget -q -T 5 -O - {q} 2>/dev/null || "
        f"python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "
        f"{q} 2>&1"
    )


def gather_script(shared_cards: Sequence[int] = (), routers: Sequence[tuple[str, int]] = ()) -> str:
    """POSIX sh, run with `sh -s`. The whole script is one { } group, so the shell has
    read all of it before the first command runs; stdin then goes to /dev/null and no
    command can swallow the rest of the script. `shared_cards`: cards whose device-share
    mode is read too; `routers`: (container, port) of the routers whose `/workers` is read."""
    controls = " ".join(shlex.quote(d) for d in CONTROL_DEVICES)
    sharing = "".join(
        f"m device-share {int(c)}; npu-smi info -t device-share -i {int(c)} -c {CHIP} 2>&1\n" for c in shared_cards
    )
    sharing += "".join(
        f"m router-workers {shlex.quote(name)}; {_fetch(f'http://127.0.0.1:{int(port)}/workers')}\n"
        for name, port in routers
    )
    return f"""{{
exec </dev/null
m() {{ printf '\\n%s %s\\n' {shlex.quote(MARK)} "$*"; }}
if command -v docker >/dev/null 2>&1; then
    ids=$(docker ps -aq --no-trunc 2>&1)
    rc=$?
    if [ $rc -ne 0 ]; then
        m docker-error; echo "docker ps exited $rc: $ids"
    else
        m docker-inspect
        if [ -n "$ids" ]; then docker inspect $ids 2>/dev/null; else echo '[]'; fi
        for id in $(docker ps -q --no-trunc 2>/dev/null); do
            m top "$id"; docker top "$id" -eo pid 2>/dev/null
        done
    fi
else
    m docker-error; echo "no docker command on the host"
fi
if command -v ss >/dev/null 2>&1; then
    m ss; ss -ltnpH 2>/dev/null || ss -ltnp 2>&1
else
    m ss-error; echo "no ss command on the host (iproute2)"
fi
m npu-smi; npu-smi info 2>&1; rc=$?; m npu-smi-rc; echo $rc
{sharing}m devices; ls -1d /dev/davinci[0-9]* {controls} 2>/dev/null
m driver; [ -d {shlex.quote(DRIVER_DIR)} ] && echo present
m end
exit 0
}}
"""
