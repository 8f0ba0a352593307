"""The one way the tools write files (`pin`, `profile`, `render --format prometheus`).

A file is never written in place and never through a link: the new content goes to a
temporary file created beside the target with `O_CREAT|O_EXCL|O_NOFOLLOW` under an
unpredictable name (so a link planted in a shared folder is never followed), is fsynced,
gets the old file's mode and owner, and is renamed over the target; the folder is fsynced
after. A target that is a link, a directory or anything but a regular file is refused.

A set of files (the Prometheus export) is all or nothing: every file is first written into
a fresh staging folder inside the output folder, the old files are hard-linked there as
backups, then the new files are renamed into place; if one rename fails, the ones already
done are put back from the backups. The staging folder never outlives the call, and every
failure is one ConfigError naming the path and why.

A file that a person may edit too (a stack file, which `pin` and `profile` rewrite) is replaced
only if it still holds what the tool read (`replace_if_unchanged`): under an exclusive `flock` on
a lock file beside it (`.<name>.lock`, never the file itself, which the rename replaces), the file
is read again and compared with the bytes the tool's work was based on. Two tools run together
therefore never lose an edit: the second finds the file changed and refuses, saying where. An
editor that takes no lock can still save in the instant between that re-read and the rename; the
window is one read and one rename long, not the minutes a `pin` of a large fleet takes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from allocation.errors import ConfigError

NEW_FILE_MODE = 0o666
"""Mode asked for a file that did not exist (the umask applies), so Prometheus can read it."""
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def _existing(path: Path, name: str) -> os.stat_result | None:
    """The target's own status (links not followed); None if absent; ConfigError if not a regular file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{name}: cannot write: {_reason(exc)}") from None
    if stat.S_ISLNK(st.st_mode):
        raise ConfigError(f"{name} is a symbolic link: refusing to write through it; remove the link or write elsewhere")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{name} is not a regular file (a directory?): refusing to replace it")
    return st


def _copy_owner(fd: int, st: os.stat_result) -> None:
    """The old file's owner and group where permitted (only root may give a file away)."""
    for uid in (st.st_uid, -1):
        with contextlib.suppress(PermissionError):
            os.fchown(fd, uid, st.st_gid)
            return


def _create(folder: Path, name: str, data: bytes, old: os.stat_result | None) -> Path:
    """A new file in `folder` holding `data`, fsynced, with `old`'s mode and owner; its path."""
    for _ in range(100):
        tmp = folder / f".{name}.{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(tmp, _FLAGS, NEW_FILE_MODE)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary name in {folder}")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            if old is not None:
                os.fchmod(out.fileno(), stat.S_IMODE(old.st_mode))
                _copy_owner(out.fileno(), old)
            os.fsync(out.fileno())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp


def _sync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_file(target: Path, data: bytes, name: str | None = None) -> None:
    """Replace (or create) the regular file `target` with `data` atomically, keeping its mode and
    owner; `name` is how messages call it. ConfigError on any failure, the old file untouched."""
    name = name or str(target)
    old = _existing(target, name)
    tmp = None
    try:
        tmp = _create(target.parent, target.name, data, old)
        os.replace(tmp, target)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        raise ConfigError(f"{name}: cannot write: {_reason(exc)}; the file is untouched") from None
    _sync_folder(target.parent)


LOCK_WAIT_SECONDS = 60.0
"""How long a writer waits for another to finish replacing the file (one re-read and one rename)."""


@contextlib.contextmanager
def _locked(target: Path, name: str) -> Iterator[None]:
    """An exclusive lock on `.<target's name>.lock` beside `target`, held for the block."""
    lock = target.parent / f".{target.name}.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as exc:
        raise ConfigError(f"{name}: cannot create the lock file {lock}: {_reason(exc)}; the file is untouched") from None
    try:
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ConfigError(
                        f"{name}: another command has held {lock} for {LOCK_WAIT_SECONDS:.0f} s; nothing was "
                        "written: run again when it has finished"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _change(old: bytes, new: bytes) -> str:
    """Where `new` first differs from `old`, in words, for a person to look at (linear: a stack
    file of 20,000 services has 300,000 lines)."""
    before, after = old.decode("utf-8", "replace").splitlines(), new.decode("utf-8", "replace").splitlines()
    for i in range(max(len(before), len(after))):
        was = before[i] if i < len(before) else None
        now = after[i] if i < len(after) else None
        if was != now:
            shown = [repr(x[:80]) if x is not None else "past the end of the file" for x in (was, now)]
            return f"line {i + 1} was {shown[0]}, now {shown[1]}"
    return "its line ends or bytes changed"


def replace_if_unchanged(target: Path, data: bytes, read: bytes, name: str, command: str) -> None:
    """Replace `target` with `data` if it still holds `read`, the bytes `data` was made from; under
    the lock beside it, so that of two writers the second sees the first's write and refuses."""
    with _locked(target, name):
        try:
            now = target.read_bytes()
        except OSError as exc:
            raise ConfigError(f"{name}: cannot read it again before writing: {_reason(exc)}; nothing was written") from None
        if now != read:
            raise ConfigError(
                f"{name} changed since {command} read it ({_change(read, now)}); nothing was written, so no "
                f"edit is lost: run {command} again"
            )
        write_file(target, data, name)


def write_set(folder: Path, files: dict[str, str]) -> None:
    """Write every file of `files` (name -> text) into `folder`, all or none. ConfigError naming the
    path that failed; then the folder holds the old files, whole, and no temporary file."""
    if not str(folder):
        raise ConfigError("the output folder is an empty name; give a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{folder}: cannot create the output folder: {_reason(exc)}") from None
    if folder.is_symlink() or not folder.is_dir():
        what = "a symbolic link" if folder.is_symlink() else "not a folder"
        raise ConfigError(f"{folder} is {what}: give a folder to write the files into")
    old = {name: _existing(folder / name, str(folder / name)) for name in files}
    try:
        stage = Path(os.path.realpath(folder)) / f".ascend-fleet-{secrets.token_hex(8)}"
        stage.mkdir(mode=0o700)
    except OSError as exc:
        raise ConfigError(f"{folder}: cannot write there: {_reason(exc)}; nothing was written") from None
    try:
        _swap(folder, stage, files, old)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    _sync_folder(folder)


def _swap(folder: Path, stage: Path, files: dict[str, str], old: dict[str, os.stat_result | None]) -> None:
    """Stage, back up, rename; on a failure, put the old files back."""
    current = folder / "?"
    done: list[str] = []
    try:
        for name, text in files.items():
            current = folder / name
            os.replace(_create(stage, name, text.encode("utf-8"), old[name]), stage / name)
            if old[name] is not None:
                os.link(folder / name, stage / f"{name}.old", follow_symlinks=False)
        for name in files:
            current = folder / name
            os.replace(stage / name, folder / name)
            done.append(name)
    except OSError as exc:
        for name in reversed(done):
            with contextlib.suppress(OSError):
                if old[name] is not None:
                    os.replace(stage / f"{name}.old", folder / name)
                else:
                    os.unlink(folder / name)
        raise ConfigError(f"{current}: cannot write: {_reason(exc)}; the old files are left as they were") from None
