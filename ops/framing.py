"""Frames for what a remote script prints: one line per section, every byte of it base64.

`doctor` and `profile` read hosts with one shell script each, whose output mixes text
nobody here controls (a router's `/workers` body, a model's `config.json` from a hub,
safetensors file names, `npu-smi` and `docker inspect` output). With plain-text markers,
a payload holding a marker line could forge or hide a section. So each section is one
line, `MARK kind arg payload`, where `arg` and `payload` are base64 (`base64` of
coreutils or busybox, wrapped lines joined): no payload can hold a space or a line break,
so none can hold a frame. The reader parses by frame only, and ignores everything else.

Every payload is cut at `limit` bytes on the host (`head -c`), one byte more is read so
the reader can tell a payload that was cut from one that fits.
"""

from __future__ import annotations

import base64
import binascii
import shlex
from dataclasses import dataclass

LIMIT = 4 * 1024 * 1024
"""Bytes kept of one section's payload: far above any docker inspect or npu-smi screen of a host."""


class FrameError(ValueError):
    """The output holds a line that starts like a frame but is not one."""


@dataclass(frozen=True)
class Frame:
    kind: str
    arg: str
    payload: bytes
    cut: bool
    """The payload was longer than the limit and was cut there."""

    @property
    def text(self) -> str:
        return self.payload.decode("utf-8", errors="replace")


def shell_function(mark: str, limit: int = LIMIT) -> str:
    """The `f KIND ARG` shell function: frames its stdin as one line on stdout."""
    return (
        f"f() {{ printf '%s %s %s ' {shlex.quote(mark)} \"$1\" \"$(printf '%s' \"$2\" | base64 | tr -d '\\n')\"; "
        f"head -c {limit + 1} | base64 | tr -d '\\n'; echo; }}"
    )


def shell_preamble(mark: str, limit: int = LIMIT) -> str:
    """Stdin off, the frame function, and a plain-text frame when the host has no `base64`."""
    return (
        "exec </dev/null\n"
        f"{shell_function(mark, limit)}\n"
        f"command -v base64 >/dev/null 2>&1 || {{ echo {shlex.quote(mark)} no-base64 - -; exit 0; }}\n"
    )


def frame(mark: str, kind: str, arg: str = "", payload: bytes | str = b"") -> str:
    """One frame as the shell function prints it (tests and fakes build output with it)."""
    data = payload.encode() if isinstance(payload, str) else payload
    return f"{mark} {kind} {base64.b64encode(arg.encode()).decode()} {base64.b64encode(data).decode()}\n"


def read_frames(text: str, mark: str, limit: int = LIMIT) -> list[Frame]:
    """Every frame of the output, in order; FrameError for a line that starts with the mark but is
    not a frame (a host whose base64 is missing or broken)."""
    frames = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.startswith(mark + " "):
            continue
        parts = line.rstrip("\r").split(" ")
        if len(parts) == 4 and parts[1] == "no-base64":
            raise FrameError("the host has no base64 command (coreutils or busybox), which frames the output")
        if len(parts) != 4 or not parts[1]:
            raise FrameError(f"output line {number} is not a frame ({len(parts)} fields)")
        try:
            arg = base64.b64decode(parts[2], validate=True).decode("utf-8", errors="replace")
            payload = base64.b64decode(parts[3], validate=True)
        except (binascii.Error, ValueError):
            raise FrameError(f"output line {number} ({parts[1][:40]!r}) is not valid base64") from None
        frames.append(Frame(parts[1], arg, payload[:limit], len(payload) > limit))
    return frames
