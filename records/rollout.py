"""Replicas replaced one at a time, and a router whose container never names its workers.

Two promises, both kept with what vLLM's router offers (vllm-router 0.1.17, github.com/vllm-project/router
`src/server.rs` `build_app`: `POST /add_worker?url=`, `POST /remove_worker?url=`, `GET /list_workers`
answering `{"urls": [...]}`, `GET /workers` answering `{"workers": [{"url", "is_healthy", ...}]}`):

- **Rolling replacement.** Replica k's container depends on a "serves" step of replica k-1 that
  finishes only when k-1 serves again through its router (`serve_script`). A failed new image
  stops the rollout there, with the replicas not yet replaced still serving.
- **Scaling without restarting the router.** The router's command reads its worker URLs from a
  file at start (`LAUNCH`), so adding or removing a replica changes no byte of its container; the
  file is rewritten on its host and the running router is reconciled through the routes above
  (`workers_script`). Workers added through the API are lost when the router restarts
  (`src/routers/http/router.rs` keeps them in memory only), which is why the file exists.

Every script runs on the router's host and talks to the router from inside its own container
(`docker exec <router> python3 -c ...` against 127.0.0.1): the router image runs vLLM's Python
(vllm-router's entry point is `vllm_router.launch_router`, a Python module), so python3 is there
by construction, while the host may have neither curl nor wget; docker is what the router image
build already needs there. Pure: builds text, runs nothing.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Sequence

from records.runtime import RUNNING, exec_argv, inspect, logs, run_argv

WORKERS_DIR = "/var/lib/ascend-fleet/routers"
"""On the host: one directory per router, holding its `workers` file."""
WORKERS_MOUNT = "/etc/ascend-fleet/router"
"""Where the router container sees its directory (read-only)."""
WORKERS_ENV = "ASCEND_FLEET_ROUTER_WORKERS"
WORKERS_FILE = f"{WORKERS_MOUNT}/workers"
SERVE_MARGIN_SECONDS = 120
"""Beyond a replica's start timeout: the router's own health checks (every 10 s, 2 successes)."""

# The router container's command: `sh -c LAUNCH ascend-fleet-router vllm-router <flags>`. The worker
# URLs, one per line, come from the file; `set -f` keeps them from globbing, and `exec` leaves
# vllm-router as the init's child (`init: true`), which passes `docker stop`'s signal on.
LAUNCH = (
    "set -f; "
    f'urls=$(cat "${WORKERS_ENV}") || exit 1; '
    '[ -n "$urls" ] || { echo "ascend-fleet: the worker list $' + WORKERS_ENV + ' is empty: '
    'the deployment writes it before the router starts; run pulumi up again" >&2; exit 1; }; '
    'exec "$@" --worker-urls $urls'
)

# Run inside the router container: `python3 -c CONTROL <mode> <port> ...`. Standard library only.
CONTROL = """\
import json, sys, time, urllib.error, urllib.parse, urllib.request

mode, port, args = sys.argv[1], sys.argv[2], sys.argv[3:]
base = "http://127.0.0.1:" + port


def call(method, path, timeout=30):
    request = urllib.request.Request(base + path, method=method)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


def listed():
    return json.loads(call("GET", "/list_workers"))["urls"]


def healthy(url):
    return any(w["url"] == url and w["is_healthy"] for w in json.loads(call("GET", "/workers"))["workers"])


def worker(route, url, timeout=30):
    call("POST", route + "?url=" + urllib.parse.quote(url, safe=""), timeout)
    print("ascend-fleet: router on port " + port + ": " + route[1:] + " " + url)


def fail(text):
    sys.stderr.write("ascend-fleet: " + text + "\\n")
    sys.exit(1)


def reason(error):
    if isinstance(error, urllib.error.HTTPError):
        return "HTTP %d: %s" % (error.code, error.read().decode(errors="replace").strip()[:300])
    return "%s: %s" % (type(error).__name__, error)


try:
    if mode == "sync":
        # Only removes: each replica joins through its own serve step once it serves. Adding here
        # could race a replica's drain during a rollout (this step runs beside it) and put back a
        # replica about to stop.
        for url in listed():
            if url not in args:
                worker("/remove_worker", url)
    elif mode == "drain":
        if args[0] in listed():
            worker("/remove_worker", args[0])
    elif mode == "serve":
        seconds, url, replica = int(args[0]), args[1], args[2]
        deadline = time.monotonic() + seconds
        # Re-registered afresh: a replica back from a restart would otherwise keep the circuit
        # breaker its outage opened (60 s) while the next replica goes down.
        if url in listed():
            worker("/remove_worker", url)
        worker("/add_worker", url, seconds)
        while not healthy(url):
            if time.monotonic() > deadline:
                raise TimeoutError("not listed healthy in /workers after %ds" % seconds)
            time.sleep(2)
        print("ascend-fleet: replica " + replica + " (" + url + ") serves through the router again")
    else:
        fail("unknown mode " + mode)
except (OSError, ValueError, KeyError) as error:
    fail("router on port %s, %s %s: %s" % (port, mode, " ".join(args), reason(error)))
"""


@dataclass(frozen=True)
class Handover:
    """One replica's place in a rolling replacement: the step that confirms it serves again."""

    replica: str
    url: str
    """Its worker URL in the router."""
    serve_script: str
    """Re-registers the replica and waits until the router lists it healthy; fails after the bound."""
    drain_script: str
    """Takes the replica out of the router before its container goes; never fails."""


def _control(router: str, mode: str, port: int, *args: object) -> str:
    argv = exec_argv(router, "python3", "-c", CONTROL, mode, str(port), *map(str, args))
    return shlex.join(argv)


def workers_dir(router: str) -> str:
    return f"{WORKERS_DIR}/{router}"


def handover(
    router: str, port: int, replica: str, url: str, start_timeout_seconds: int, container: str | None = None
) -> Handover:
    """The serve and drain scripts of `replica` behind `router` (its container name) on `port`;
    `container`: the replica's container name when it is not `replica` (a renamed service keeps it),
    which the scripts name, so a rename changes no script."""
    wait = start_timeout_seconds + SERVE_MARGIN_SECONDS
    shown = container or replica
    serve = (
        "set -u\n"
        f"{_control(router, 'serve', port, wait, url, shown)} || {{\n"
        f"  echo {shlex.quote(_stopped(router, shown, url, wait))} >&2\n"
        "  exit 1\n"
        "}\n"
    )
    skipped = f"ascend-fleet: could not take {shown} out of router {router} (not running?); continuing"
    drain = f"{_control(router, 'drain', port, url)} || echo {shlex.quote(skipped)} >&2\nexit 0\n"
    return Handover(replica=replica, url=url, serve_script=serve, drain_script=drain)


def _stopped(router: str, replica: str, url: str, wait: int) -> str:
    return (
        f"ascend-fleet: replica {replica} ({url}) does not serve through router {router} within {wait}s "
        "(its start timeout plus the router's health checks; the cause is above). The rolling "
        "replacement stops here: the replicas after it are not touched and keep serving the old "
        f"version. Look at {logs(replica)} on its host and {logs(router)}; fix the image "
        "or the config, or roll back, and run pulumi up again."
    )


def workers_script(router: str, image: str, port: int, urls: Sequence[str]) -> str:
    """Writes the router's worker list on its host, then reconciles the running router with it.

    The file is written from a throwaway container of the router image, so dockerd (root) creates
    the directory and nothing needs root on the host; a rename makes the change atomic. A router
    that is not running reads the file when it starts."""
    directory = workers_dir(router)
    lines = "".join(f"{u}\n" for u in urls)
    write = shlex.join(run_argv(
        "--rm", "-i", "--network", "none", "--entrypoint", "/bin/sh",
        "-v", f"{directory}:/w", image, "-c", "cat > /w/workers.new && mv /w/workers.new /w/workers",
    ))  # fmt: skip
    running = f"{inspect(RUNNING)} {shlex.quote(router)} 2>/dev/null"
    return (
        "set -eu\n"
        f"printf '%s' {shlex.quote(lines)} | {write}\n"
        f'if [ "$({running})" = true ]; then\n'
        f"  {_control(router, 'sync', port, *urls)}\n"
        "fi\n"
    )
