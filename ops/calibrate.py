"""`calibrate`: what the vLLM containers on each host logged at their last start, as the services'
`measured:` figures and `graphMemoryGiB`.

One round trip per host, as `doctor` reads it (`ops.ssh`, every section a frame of `ops.framing`):
`docker inspect` of every container, then, of each whose command names `vllm`, the lines of its
output since its last start (`docker logs --timestamps --since` its `State.StartedAt`) that hold a
phrase of vLLM-Ascend's startup lines (`ops.startup_log.MARKERS`), read in the first `SCAN_BYTES`
of that output and kept to `LOG_LIMIT` bytes. The containers are the plan's own and any other:
the compose containers a host `replaces`, kept stopped with their logs, included.

A container runs one or more `vllm serve` (the seed's `model-emb-vl` runs two in one `sh -c`); each
is read from its command line (model, `--served-model-name`, `--tensor-parallel-size`,
`--enforce-eager`) and matched to the planned service of its host with that model, the served name
deciding between services of one model. Its figures are taken only when it ran as the plan runs
the service (the same tensor-parallel size, graphs captured or not): a figure of another shape is
not this service's. Of several containers of one service, the last to start counts.

Everything read is text from the host: a line that is not, whole, the line vLLM-Ascend writes, a
section cut at its bound, or a figure the stack file's own model would not load is refused, every
such problem of every host in one paragraph, and nothing is written.
"""

from __future__ import annotations

import posixpath
import shlex
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence

from pydantic import ValidationError

from allocation.config import Measured
from allocation.errors import ConfigError, listing, printable
from allocation.vllm_args import spelled
from ops.bounded_json import JsonError, excerpt, loads
from ops.doctor.facts import LiveContainer
from ops.framing import LIMIT, Frame, FrameError, read_frames, shell_preamble
from ops.ssh import run_script
from ops.startup_log import MARKERS, LogError, Startup, read_lines, startups
from records.deployment import Deployment, HostDeployment, ServiceDeployment

MARK = "@@ascend-fleet-calibrate@@"
LOG_LIMIT = 1024 * 1024
"""Bytes of one container's startup lines: about 100 times what a server of 16 ranks writes."""
SCAN_BYTES = 256 * 1024 * 1024
"""Bytes of a container's output since its start searched for them: the startup comes first, and a
second server in the same container may start minutes after the first serves requests."""
TIMEOUT_SECONDS = 300.0
SEPARATORS = frozenset({";", "&", "&&", "|", "||", "(", ")"})
"""Words that end a command in a shell script (`shlex` with punctuation characters)."""


def gather_script() -> str:
    """POSIX sh printing the host's containers and, of each that runs vLLM, its startup lines. NUL
    bytes are dropped and grep runs in the C locale, so no byte makes it take the log for binary."""
    markers = " ".join(f"-e {shlex.quote(m)}" for m in MARKERS)
    inspect = "{{json .Config.Entrypoint}} {{json .Config.Cmd}}"
    return f"""{{
{shell_preamble(MARK)}if ! command -v docker >/dev/null 2>&1; then
    echo "no docker command on the host" | f docker-error
elif ! ids=$(docker ps -aq --no-trunc 2>&1); then
    echo "docker ps failed: $ids" | f docker-error
else
    if [ -n "$ids" ]; then docker inspect $ids 2>/dev/null; else echo '[]'; fi | f docker-inspect
    for id in $ids; do
        docker inspect -f '{inspect}' "$id" 2>/dev/null | grep -q vllm || continue
        since=$(docker inspect -f '{{{{.State.StartedAt}}}}' "$id" 2>/dev/null)
        docker logs --timestamps --since "$since" "$id" 2>&1 | head -c {SCAN_BYTES} | tr -d '\\000' |
            LC_ALL=C grep -F {markers} | head -c {LOG_LIMIT + 1} | f log "$id"
    done
fi
f end </dev/null
exit 0
}}
"""


@dataclass(frozen=True)
class Server:
    """One `vllm serve` of a container, as its command line starts it."""

    model: str
    served: str
    """The first `--served-model-name`; vLLM's default, the model, without one."""
    tensor_parallel_size: int
    eager: bool
    """`--enforce-eager`: no graphs captured."""


def _words(argv: Sequence[str]) -> list[str]:
    """The words of a command line, the script of each `sh -c` split as a shell reads it."""
    words: list[str] = []
    for i, word in enumerate(argv):
        if i and argv[i - 1] == "-c":
            lexer = shlex.shlex(word, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            try:
                words += [*lexer, ";"]
            except ValueError:  # not a script shlex can read (an open quote): no server is read from it
                words.append(";")
        else:
            words.append(word)
    return words


def _server(args: list[str]) -> Server | None:
    """The server `vllm serve ARGS` starts; None when its model or tensor-parallel size cannot be read."""
    model = args[0] if args and not args[0].startswith("-") else None
    served, tp, eager = None, "1", False
    for i, word in enumerate(args):
        key, eq, value = spelled(word).partition("=")
        after = value if eq else args[i + 1] if i + 1 < len(args) else None
        if key == "--model":
            model = after
        elif key == "--served-model-name":
            served = after
        elif key in ("--tensor-parallel-size", "-tp"):
            tp = after
        elif key in ("--enforce-eager", "--no-enforce-eager"):
            eager = key == "--enforce-eager"
    if not model or not tp or not tp.isascii() or not tp.isdigit() or len(tp) > 4:
        return None
    return Server(model, served or model, int(tp), eager)


def servers(container: LiveContainer) -> list[Server]:
    """Every `vllm serve` the container's command line runs, in order: its words up to the next one,
    or to the end of the shell command it is in."""
    words = _words([*container.entrypoint, *container.command])
    starts = [i for i in range(len(words) - 1) if words[i].rsplit("/", 1)[-1] == "vllm" and words[i + 1] == "serve"]
    found = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(words)
        args = words[start + 2 : end]
        cut = next((i for i, w in enumerate(args) if w in SEPARATORS), len(args))
        server = _server(args[:cut])
        found += [server] if server is not None else []
    return found


@dataclass(frozen=True)
class Reading:
    """One server's startup figures, matched to the configured service it serves."""

    service: str
    container: str
    host: str
    server: Server
    startup: Startup


@dataclass
class HostReading:
    """What one host's containers gave: the readings, and in words what was not taken and what could not be read."""

    readings: list[Reading]
    notes: list[str]
    """What was read but not taken, in words."""
    problems: list[str]
    """What could not be read: each one stops the whole command."""


def _planned(hd: HostDeployment, server: Server) -> list[ServiceDeployment]:
    """The host's planned services the server is: those of its model (`/disk2/bge-m3/` is `/disk2/bge-m3`),
    the served name deciding between services of one model (the replicas of one service are one)."""
    same = [sd for sd in hd.services if posixpath.normpath(sd.plan.service.model) == posixpath.normpath(server.model)]
    if len({sd.plan.replica_of for sd in same}) > 1:
        same = [sd for sd in same if sd.plan.instance.served_model_name == server.served]
    return same


def _match(hd: HostDeployment, name: str, server: Server, startup: Startup) -> Reading | str:
    """The reading of a server's startup, or why it is not taken (in words)."""
    what = f"container {name}'s server of {printable(server.model)} (as {printable(server.served)})"
    planned = _planned(hd, server)
    if len({sd.plan.replica_of for sd in planned}) != 1:
        return f"{what}: no service of host {hd.name} plans it"
    sd = planned[0]
    service = sd.plan.service
    if server.tensor_parallel_size != service.tensor_parallel_size:
        size = f"tensorParallelSize {server.tensor_parallel_size}, {sd.plan.replica_of} plans {service.tensor_parallel_size}"
        return f"{what}: ran at {size}"
    if server.eager == sd.plan.resolved.captures_graphs:
        ran = "with --enforce-eager" if server.eager else "capturing NPU graphs"
        return f"{what}: ran {ran}, {sd.plan.replica_of} does not"
    if startup.weights is None or (startup.graph is None and not server.eager):
        missing = "weights" if startup.weights is None else "NPU graph pool"
        return f"{what}: logged no {missing} since its last start (still loading, or stopped early)"
    return Reading(sd.plan.replica_of, name, hd.name, server, startup)


def _log(container: LiveContainer, frame: Frame, hd: HostDeployment) -> HostReading:
    """What one container's startup lines give, server by server."""
    found = HostReading([], [], [])
    name = printable(container.name)
    served = servers(container)
    models = [s.model for s in served]
    if not served:
        return found
    if frame.cut or len(frame.payload) > LOG_LIMIT:  # the host cut it one byte past the bound
        found.problems.append(f"host {hd.name}: container {name} printed more than {LOG_LIMIT} bytes of startup lines")
        return found
    try:
        by_model = startups(read_lines(frame.text, name), [m for m in models if models.count(m) == 1])
    except LogError as exc:
        found.problems.append(f"host {hd.name}: {exc}")
        return found
    for server in served:
        startup = by_model.get(server.model)
        if models.count(server.model) > 1:
            found.notes.append(f"container {name} runs {printable(server.model)} twice: their lines cannot be told apart")
        elif startup is None:
            found.notes.append(f"container {name}'s server of {printable(server.model)}: no startup figures since its last start")
        else:
            match = _match(hd, name, server, startup)
            (found.readings if isinstance(match, Reading) else found.notes).append(match)
    return found


def _containers(frames: list[Frame], host: str) -> dict[str, LiveContainer] | str:
    """The host's containers by ID, from its `docker inspect` frame; why not, in words."""
    sections = {f.kind: f for f in frames if f.kind in ("docker-error", "docker-inspect", "end")}
    if "end" not in sections:
        return f"host {host}: the script reading the containers did not finish (output cut short)"
    if "docker-error" in sections:
        return f"host {host}: {excerpt(' '.join(sections['docker-error'].text.split()), 200)}"
    inspect = sections.get("docker-inspect")
    if inspect is None or inspect.cut:
        return f"host {host}: docker inspect printed nothing, or more than {LIMIT} bytes"
    try:
        raw = loads(inspect.text, "docker inspect's output")
        containers = [LiveContainer.from_inspect(c) for c in raw]
    except (JsonError, AttributeError, TypeError, ValueError) as exc:
        return f"host {host}: docker inspect printed what is not its JSON ({excerpt(str(exc), 200)})"
    return {c.id: c for c in containers}


def read_host(hd: HostDeployment) -> HostReading:
    """One host's readings, in one round trip."""
    result = run_script(hd, gather_script(), timeout=TIMEOUT_SECONDS)
    if not result.reachable:
        return HostReading([], [], [f"host {hd.name} is unreachable: {result.error}"])
    try:
        frames = read_frames(result.stdout, MARK)
    except FrameError as exc:
        return HostReading([], [], [f"host {hd.name}: {exc}"])
    containers = _containers(frames, hd.name)
    if isinstance(containers, str):
        return HostReading([], [], [containers])
    total = HostReading([], [], [])
    for frame in frames:
        if frame.kind == "log" and frame.arg in containers:
            one = _log(containers[frame.arg], frame, hd)
            total.readings += one.readings
            total.notes += one.notes
            total.problems += one.problems
    return total


def pins(reading: Reading) -> dict[str, Any] | str:
    """The keys `calibrate` writes for the service: `measured:` and, but for a server without graphs,
    `graphMemoryGiB`; checked by the stack file's own model, so what is written loads again. Why not,
    in words, when that model refuses them."""
    st, server = reading.startup, reading.server
    measured: dict[str, Any] = {
        "container": reading.container, "host": reading.host, "date": st.date, "line": st.line,
        "tensorParallelSize": server.tensor_parallel_size, "memoryFraction": st.fraction,
        "weightsGiB": st.weights, "overheadGiB": st.overhead, "graphMemoryGiB": st.graph or 0,
        "kvCacheGiB": st.kv, "kvCacheTokens": st.tokens,
    }  # fmt: skip
    measured = {k: (float(v) if k.endswith("GiB") or k == "memoryFraction" else v) for k, v in measured.items() if v is not None}
    try:
        Measured.model_validate(measured)
    except ValidationError as exc:
        wrong = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return (
            f"host {reading.host}: container {reading.container}'s startup figures of service {reading.service} would not "
            f"load ({printable(wrong)[:300]}), so they are not read as a measurement"
        )
    return ({} if server.eager else {"graphMemoryGiB": measured["graphMemoryGiB"]}) | {"measured": measured}


@dataclass(frozen=True)
class Calibration:
    """What `calibrate` writes, what it was read from, and what it read but did not take."""

    keys: dict[str, dict[str, Any]]
    """Configured service name -> the keys to set."""
    readings: dict[str, Reading]
    notes: list[str]


def calibrate(deployment: Deployment) -> Calibration:
    """Every host's readings (in parallel, one round trip each), the last start of each service
    taken; ConfigError listing every problem of every host, when there is one."""
    if deployment.plan.fleet.target == "kubernetes":
        raise ConfigError(
            f"calibrate --stack {deployment.stack}: the stack targets kubernetes; calibrate reads containers' logs "
            "on their hosts over SSH: set graphMemoryGiB from the pods' logs instead"
        )
    hosts = [hd for hd in deployment.hosts if hd.services]
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(hosts)))) as pool:
        read = list(pool.map(read_host, hosts))
    problems = [p for h in read for p in h.problems]
    latest: dict[str, Reading] = {}
    for r in sorted((r for h in read for r in h.readings), key=lambda r: (r.startup.date, r.container)):
        latest[r.service] = r  # the last to start wins
    keys = {name: pins(latest[name]) for name in sorted(latest)}
    problems += [why for why in keys.values() if isinstance(why, str)]
    if problems:
        raise ConfigError(f"stack {deployment.stack}: cannot calibrate: {listing(problems)}; nothing was written")
    notes = [n for h in read for n in h.notes]
    placed = {sd.plan.replica_of: sd for hd in hosts for sd in hd.services}
    notes += [
        f"{name}: no container on host {sd.plan.assignment.host_name} logged its startup as planned (model "
        f"{printable(sd.plan.service.model)}, served as {printable(sd.plan.instance.served_model_name)})"
        for name, sd in sorted(placed.items()) if name not in latest
    ]  # fmt: skip
    return Calibration({k: v for k, v in keys.items() if isinstance(v, dict)}, latest, notes)


def summary(found: Calibration) -> list[str]:
    """What `calibrate` took, service by service, then what it read but did not take."""
    lines = []
    for name, r in sorted(found.readings.items()):
        st = r.startup
        kv = "" if st.kv is None else f", KV cache {st.kv} GiB/card" + ("" if st.tokens is None else f" ({st.tokens:,} tokens)")
        overhead = "" if st.overhead is None else f", runtime overhead {st.overhead} GiB"
        graphs = "none (--enforce-eager)" if r.server.eager else f"{st.graph} GiB"
        lines.append(
            f"{name}: container {r.container} on {r.host}, {st.date}: weights {st.weights} GiB/card{overhead}, "
            f"NPU graphs {graphs}{kv}"
        )
    return lines + [f"not taken: {note}" for note in found.notes]
