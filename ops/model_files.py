"""Reading a model folder's files with bounds, here or on a host over SSH.

A model folder is third-party content (downloaded from a hub), so every read is bounded:
regular files only (a FIFO would hang the read, a link to `/dev/zero` would fill memory),
at most `FILE_LIMIT` bytes per file, a safetensors header of at most `FILE_LIMIT` bytes
whatever length its first 8 bytes declare, and, under `--models-root`, every file must
resolve (links followed) to a path inside that root. Over SSH the folders are read by one
shell script whose every section is a base64 frame (`ops.framing`), so no file content
or file name can forge another model's section.
"""

from __future__ import annotations

import os
import shlex
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ops.framing import FrameError, read_frames, shell_preamble

FILE_LIMIT = 16 * 1024 * 1024
"""Bytes read of a `config.json`, an index or a safetensors header; real ones are far smaller."""
INDEX = "model.safetensors.index.json"
MARK = "@@ascend-fleet-model@@"


class ModelFileError(ValueError):
    """A model file cannot be read within the bounds; the message names the file and why."""


@dataclass(frozen=True)
class Folder:
    """A model folder's files that matter, as text: read here or gathered over SSH."""

    where: str
    config: str | None
    index: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    """Safetensors file name -> its JSON header; read only without an index."""
    problem: str | None = None
    """Why the folder could not be read within the bounds (a file not regular, too large, ...)."""

    @classmethod
    def local(cls, path: Path, root: Path | None = None) -> Folder:
        """Read here; with `root`, every file must resolve inside it."""
        try:
            config = _read(path / "config.json", root)
            index = _read(path / INDEX, root)
            names = sorted(p.name for p in path.glob("*.safetensors")) if index is None else []
            headers = {n: _local_header(path / n, root) for n in names}
        except ModelFileError as exc:
            return cls(str(path), None, problem=str(exc))
        return cls(str(path), config, index, headers)


def _open_regular(path: Path, root: Path | None) -> int | None:
    """A read-only descriptor of a regular file; None if nothing is there."""
    if root is not None:
        real, top = os.path.realpath(path), os.path.realpath(root)
        if os.path.commonpath([real, top]) != top:
            raise ModelFileError(f"{path} resolves to {real}, outside --models-root {root}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ModelFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ModelFileError(f"{path} is not a regular file")
    return fd


def _read(path: Path, root: Path | None) -> str | None:
    fd = _open_regular(path, root)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as f:
        raw = f.read(FILE_LIMIT + 1)
    return _text(raw, str(path))


def _text(raw: bytes, what: str) -> str:
    if len(raw) > FILE_LIMIT:
        raise ModelFileError(f"{what} is larger than {FILE_LIMIT} bytes, more than profile reads")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelFileError(f"{what} is not UTF-8 text (byte {exc.start})") from None


def header_length(raw: bytes, what: str) -> int:
    """The JSON header length a safetensors file declares in its first 8 bytes, within the limit."""
    size = struct.unpack("<Q", raw)[0] if len(raw) == 8 else 0
    if not 0 < size <= FILE_LIMIT:
        raise ModelFileError(f"{what} is not a safetensors file profile can read (header length {size})")
    return size


def _local_header(path: Path, root: Path | None) -> str:
    fd = _open_regular(path, root)
    if fd is None:  # gone between the listing and the read
        raise ModelFileError(f"cannot read {path}: it disappeared")
    with os.fdopen(fd, "rb") as f:
        size = header_length(f.read(8), str(path))
        raw = f.read(size)
    if len(raw) != size:
        raise ModelFileError(f"{path}: the safetensors header is cut short ({len(raw)} of {size} bytes)")
    return _text(raw, f"the safetensors header of {path}")


def gather_script(paths: list[str]) -> str:
    """POSIX sh printing, per model folder, framed: its config.json, its index, or (without an index)
    every safetensors file's 8-byte header length and header. Anything not a regular file is named,
    not read; a header length over the limit reads nothing."""
    lines = [shell_preamble(MARK, FILE_LIMIT).rstrip("\n")]
    for path in paths:
        q = shlex.quote(path)
        lines += [
            f"f folder {q} </dev/null",
            f"for n in config.json {INDEX}; do",
            f'  if [ -f {q}/"$n" ]; then f "$n" "" < {q}/"$n"; elif [ -e {q}/"$n" ]; then f irregular "$n" </dev/null; fi',
            "done",
            f"[ -e {q}/{INDEX} ] || for p in {q}/*.safetensors; do",
            '  [ -e "$p" ] || continue',
            '  if [ ! -f "$p" ]; then f irregular "${p##*/}" </dev/null; continue; fi',
            '  head -c 8 "$p" | f length "${p##*/}"',
            "  n=$(head -c 8 \"$p\" | od -An -tu8 | tr -d ' \\n')",
            '  case $n in ""|*[!0-9]*) n=0;; esac',
            f'  [ ${{#n}} -le 9 ] && [ "$n" -le {FILE_LIMIT} ] || n=0',
            '  tail -c +9 "$p" | head -c "$n" | f header "${p##*/}"',
            "done",
        ]
    return "\n".join([*lines, "f end '' </dev/null"]) + "\n"


def parse_folders(text: str, where: str) -> dict[str, Folder]:
    """Folders from `gather_script`'s output, by frame only; `where` names the host in messages.
    Raises ModelFileError when the output is not frames or was cut short."""
    try:
        frames = read_frames(text, MARK, FILE_LIMIT)
    except FrameError as exc:
        raise ModelFileError(f"{where}: {exc}") from None
    if not frames or frames[-1].kind != "end":
        raise ModelFileError(f"{where}: the script reading the models did not finish (output cut short)")
    parts: dict[str, dict] = {}
    current: dict | None = None
    for fr in frames[:-1]:
        if fr.kind == "folder":
            current = parts.setdefault(fr.arg, {"headers": {}, "lengths": {}, "problems": []})
        elif current is not None:
            _take(current, fr, f"{where}:{fr.arg}" if fr.kind in ("header", "length") else where)
    return {path: _folder(f"{where}:{path}", p) for path, p in parts.items()}


def _take(current: dict, fr, what: str) -> None:
    if fr.kind == "irregular":
        current["problems"].append(f"{fr.arg} is not a regular file")
    elif fr.cut:
        current["problems"].append(f"{fr.kind} {fr.arg} is larger than {FILE_LIMIT} bytes, more than profile reads")
    elif fr.kind == "length":
        current["lengths"][fr.arg] = fr.payload
    elif fr.kind == "header":
        current["headers"][fr.arg] = fr.payload
    elif fr.kind in ("config.json", INDEX):
        current[fr.kind] = fr.payload


def _folder(where: str, p: dict) -> Folder:
    try:
        if p["problems"]:
            raise ModelFileError(f"{where}: {'; '.join(p['problems'])}")
        headers = {}
        for name, raw in p["headers"].items():
            size = header_length(p["lengths"].get(name, b""), f"{where}/{name}")
            if len(raw) != size:
                raise ModelFileError(f"{where}/{name}: the safetensors header is cut short ({len(raw)} of {size} bytes)")
            headers[name] = _text(raw, f"the safetensors header of {where}/{name}")
        config = _text(p["config.json"], f"{where}/config.json") if "config.json" in p else None
        index = _text(p[INDEX], f"{where}/{INDEX}") if INDEX in p else None
    except ModelFileError as exc:
        return Folder(where, None, problem=str(exc))
    return Folder(where, config, index, headers)
