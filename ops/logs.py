"""`logs`: the last lines of a planned container's log, read on its host over SSH as `doctor` reads it.

The container is the one of that exact name (`records.runtime.log_tail`, by the ID `named` finds),
never another whose ID begins with the name. Its log is text from the host, so it comes back as one
frame (`ops.framing`) of at most LOG_BYTES, the end of it (cut on the host by `tail -c`), each line
cut at LINE_CHARS characters and its control characters escaped. `--since` is checked here, before
it reaches `docker logs`' argv: a duration, a Unix time or a date, as `docker logs` reads them (moby
`man/src/container/logs.md`: "Unix timestamps, date formatted timestamps, or Go duration strings (e.g.
`10m`, `1h30m`) computed relative to the client machine's time", the client being the host's CLI).
"""

from __future__ import annotations

import re
from datetime import datetime

from allocation.errors import ConfigError, FleetError, printable
from ops.bounded_json import excerpt
from ops.framing import FrameError, read_frames, shell_preamble
from ops.npusmi import number
from ops.ssh import run_script
from ops.requested import Target
from records.runtime import NO_CONTAINER, NOT_LISTED, log_tail

MARK = "@@ascend-fleet-logs@@"
MAX_TAIL = 10_000
"""`--tail` at most: lines of a log worth reading in a terminal."""
LOG_BYTES = 1024 * 1024
"""The end of the log kept, cut on the host: 10,000 lines of 100 characters."""
LINE_CHARS = 2000
"""A line longer than this is cut, and says how long it was."""
_DURATION = re.compile(r"([0-9]{1,9}(\.[0-9]{1,9})?(ns|us|ms|s|m|h))+")
_UNIX = re.compile(r"[0-9]{1,12}(\.[0-9]{1,9})?")
_DATE = re.compile(r"(?P<day>[0-9]{4}-[0-9]{2}-[0-9]{2})(?P<time>T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?)?(?P<zone>Z|[+-][0-9]{2}:[0-9]{2})?")


class HostError(FleetError):
    """The host could not be reached, or could not give the log."""


def checked_since(value: str) -> str:
    """`value` if `docker logs --since` reads it as a time, else ConfigError naming the forms it takes."""
    if len(value) <= 40 and (_DURATION.fullmatch(value) or _UNIX.fullmatch(value) or _date(value)):
        return value
    raise ConfigError(
        f"logs --since {excerpt(value)}: not a time docker logs reads: give a duration counted back from the "
        "host's clock (10m, 1h30m, 90s; units h, m, s, ms, us, ns), a Unix time (1767225600), or a date "
        "(2026-01-01, 2026-01-01T13:23:37, with Z or +08:00 for its zone, else the host's)"
    )


def _date(value: str) -> bool:
    m = _DATE.fullmatch(value)
    if m is None:
        return False
    try:
        datetime.fromisoformat(m["day"] + (m["time"] or "")[:9])  # a real day and time of day
    except ValueError:
        return False
    zone = m["zone"] or "Z"
    return zone == "Z" or (int(zone[1:3]) <= 23 and int(zone[4:6]) <= 59)


def checked_tail(lines: int) -> int:
    if not 1 <= lines <= MAX_TAIL:
        raise ConfigError(f"logs --tail {lines}: give 1 to {MAX_TAIL} lines")
    return lines


def logs_script(container: str, lines: int, since: str | None) -> str:
    """POSIX sh, run with `sh -s`: the log as one frame (its end, LOG_BYTES), `log_tail`'s exit status
    as another. The status leaves through fd 3 into `$rc` while the log frame goes out on fd 4, the
    script's stdout: two frames never written at once, so neither can land inside the other."""
    return (
        "{\n"
        f"{shell_preamble(MARK, LOG_BYTES + 1)}"
        "exec 4>&1\n"
        f"rc=$( {{ {{ (\n{log_tail(container, lines, since)}) 2>&1; echo $? >&3; }} | tail -c {LOG_BYTES + 1} | f log >&4; }} 3>&1 )\n"
        'printf \'%s\\n\' "$rc" | f rc\n'
        "f end </dev/null\n"
        "exit 0\n"
        "}\n"
    )


def shown_lines(payload: bytes) -> tuple[list[str], bool]:
    """The log's lines as a terminal may show them (escaped, each cut at LINE_CHARS), and whether its
    start was cut on the host (more than LOG_BYTES: the first, partial, line is left out)."""
    cut = len(payload) > LOG_BYTES
    text = payload.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if cut:
        lines = lines[1:]
    if lines and lines[-1] == "":
        lines.pop()
    out = []
    for line in lines:
        kept = line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + f" ... ({len(line)} characters)"
        out.append("\t".join(printable(part) for part in kept.split("\t")))
    return out, cut


def read(where: Target, lines: int, since: str | None) -> tuple[list[str], bool]:
    """The target's last `lines` lines (from `since`), and whether LOG_BYTES cut their start; HostError
    when the host cannot be reached or has no such container."""
    hd = where.host
    result = run_script(hd, logs_script(where.container, lines, since))
    if not result.reachable:
        raise HostError(f"logs {where.container}: host {hd.name} ({hd.docker_url}) is unreachable: {result.error}")
    try:
        frames = {f.kind: f for f in read_frames(result.stdout, MARK, LOG_BYTES + 1)}
    except FrameError as exc:
        raise HostError(f"logs {where.container}: host {hd.name}: {exc}") from None
    if "end" not in frames or "log" not in frames or "rc" not in frames:
        detail = excerpt(" ".join(result.stderr.split()), 200)
        raise HostError(f"logs {where.container}: host {hd.name}: the script did not finish (exit {result.returncode}: {detail})")
    rc = number(frames["rc"].text)
    shown, cut = shown_lines(frames["log"].payload)
    said = excerpt(" ".join(" ".join(shown).split()), 300)
    if rc == NO_CONTAINER:
        raise HostError(f"logs {where.container}: host {hd.name} has no container of that name (planned: {where.what}); pulumi up creates it")
    if rc == NOT_LISTED:
        raise HostError(f"logs {where.container}: host {hd.name}: docker could not list its containers: {said}")
    if rc != 0:
        raise HostError(f"logs {where.container}: host {hd.name}: docker logs exited {rc if rc is not None else '?'}: {said}")
    return shown, cut
