"""Stand-in `docker` commands for the scripts the program writes, run for real under `sh`: one that
answers a host's questions from a line the test gives, one that records the argv of every call."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

from tests.support.stand_in_root import GONE


def stand_in_docker(root: Path, inspect: str, holder: subprocess.Popen | None = None) -> None:
    """`<root>/bin/docker`: `inspect` is its one running container's line ('' for none), `stop` ends
    `holder`'s process group and returns once it has exited, and every call is logged to `root/calls`."""
    (root / "bin").mkdir(parents=True, exist_ok=True)
    (root / "bin/docker").write_text(
        "#!/bin/sh\n"
        f'echo "docker $*" >> {root}/calls\n'
        'case "$1" in\n'
        f"  ps) {'echo c0ffee' if inspect else ':'} ;;\n"
        f'  inspect) echo "{inspect}" ;;\n'
        # As `docker stop` returns once the container is gone: the holder's FIFO is closed then
        # (returning at once made npu-smi see the card still held).
        + (f"  stop) kill -KILL -{holder.pid}; {GONE.format(pid=holder.pid)} ;;\n" if holder else "")
        + "esac\n"
    )
    (root / "bin/docker").chmod(0o755)


def run_script_with_fake_docker(script: str, tmp: Path) -> list[str]:
    """Runs `script` under `sh` in `tmp` with a `docker` that records each call's argv: one line per
    call, the arguments NUL-terminated."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "docker"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done >> "$DOCKER_LOG"\nprintf "\\n" >> "$DOCKER_LOG"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    log = tmp / "docker.log"
    log.write_text("")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "DOCKER_LOG": str(log), "HOME": str(tmp)}
    result = subprocess.run(["sh", "-s"], input=script, cwd=tmp, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return [line for line in log.read_text().split("\n") if line]
