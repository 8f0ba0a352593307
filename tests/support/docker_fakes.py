"""Stand-in `docker` commands for the scripts the program writes, run for real under `sh`: one that
answers a host's questions from a line the test gives, one that records the argv of every call, and
one that keeps containers and resolves their names and IDs as dockerd does."""

from __future__ import annotations

import hashlib
import stat
import subprocess
import sys
from pathlib import Path

from records import runtime
from records.containers import LABEL_PREFIX
from tests.support.stand_in_root import GONE


def stand_in_docker(root: Path, inspect: str, holder: subprocess.Popen | None = None) -> None:
    """`<root>/bin/docker`: `inspect` is its one running container's line ('' for none), whose ID,
    `c0ffee`, `ps` prints (for any filter), `stop` ends `holder`'s process group and returns once it
    has exited, and every call is logged to `root/calls`."""
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


# The Go templates the scripts print with `inspect --format` (records.runtime), as the fake fills them
# from a container's line: name|status|restart|privileged|devices|ports|stack label.
_FIELDS = {
    runtime.NAME: "name",
    runtime.STATUS: "status",
    runtime.RUNNING: "running",
    runtime.RESTART_POLICY: "restart",
    runtime.PRIVILEGED: "privileged",
    runtime.DEVICES: "devices",
    runtime.PORTS: "ports",
    runtime.label(f"{LABEL_PREFIX}.stack"): "stack",
}
RESOLVING_DOCKER = """
import hashlib, re, sys
root = ROOT
args = sys.argv[1:]
with open(root + "/calls", "a") as log:
    log.write(" ".join(["docker", *args]) + "\\n")
path = root + "/containers"
rows = [line.split("|") for line in open(path).read().splitlines() if line]
def cid(c): return hashlib.sha256(c[0].encode()).hexdigest()
def fail(text): sys.stderr.write("Error: " + text + "\\n"); sys.exit(1)
def resolve(ref):
    # moby daemon/container.go GetContainer: a full ID, then an exact name, then a unique ID prefix.
    for hit in ([c for c in rows if cid(c) == ref], [c for c in rows if c[0] == ref]):
        if hit: return hit[0]
    hit = [c for c in rows if cid(c).startswith(ref)]
    if len(hit) > 1: fail("multiple IDs found with provided prefix: " + ref)
    if not hit: fail("No such container: " + ref)
    return hit[0]
def save(): open(path, "w").write("".join("|".join(c) + "\\n" for c in rows))
words = [a for a in args[1:] if a != "--"]
if args[0] == "ps":
    flags = [w for w in words if w.startswith("-") and not w.startswith("--")]
    shown = [c for c in rows if any("a" in f for f in flags) or c[1] in ("running", "restarting", "paused")]
    for w in words:
        if w.startswith("name="):  # the one name filter the scripts give: ^/\\QNAME\\E$
            exact = re.fullmatch(r"\\^/\\\\Q(.*)\\\\E\\$", w[5:]) or fail("unexpected name filter " + w)
            shown = [c for c in shown if c[0] == exact.group(1)]
    print("".join(cid(c) + "\\n" for c in shown) if "--no-trunc" in words else "".join(cid(c)[:12] + "\\n" for c in shown), end="")
elif args[0] == "inspect":
    template, refs = words[1], words[2:]
    for c in map(resolve, refs):
        values = dict(zip(("status", "restart", "privileged", "devices", "ports", "stack"), c[1:]))
        values.update(name="/" + c[0], running=str(c[1] == "running").lower())
        out = template
        for field in sorted((f for f in FIELDS if f in template), key=len, reverse=True):
            out = out.replace(field, values[FIELDS[field]])
        print(out)
elif args[0] == "update":
    c = resolve(words[-1]); c[2] = words[0].split("=")[1]; save()
elif args[0] in ("stop", "start", "rm"):
    refs = [w for i, w in enumerate(words) if not w.startswith("-") and words[i - 1:i] != ["--time"]]
    for c in map(resolve, refs):
        if args[0] == "rm":
            rows.remove(c)
        else:
            c[1] = "exited" if args[0] == "stop" else "running"
    save()
elif args[0] == "logs":
    print("the log of " + resolve(words[-1])[0])
"""


def container_id(name: str) -> str:
    """The full ID `resolving_docker` gives the container named `name`."""
    return hashlib.sha256(name.encode()).hexdigest()


def resolving_docker(root: Path) -> None:
    """`<root>/bin/docker`, a stand-in that resolves a container argument as dockerd does (a full ID,
    an exact name, then a unique ID prefix), so a script that names a container no container has
    acts on whichever ID begins with that name, as on a real host. Its containers are the lines of
    `<root>/containers` (name|status|restart|privileged|devices|ports|stack label), each with the ID
    `container_id(name)`; it answers `ps` (with `-a`, `-q`, `--no-trunc` and the exact-name filter
    of `records.runtime.named`), `inspect --format` of the scripts' templates, `update --restart=`,
    `stop`, `start`, `rm` and `logs` (any other command does nothing), and logs every call to
    `<root>/calls`."""
    (root / "bin").mkdir(parents=True, exist_ok=True)
    text = f"#!{sys.executable}\nROOT = {str(root)!r}\nFIELDS = {_FIELDS!r}\n{RESOLVING_DOCKER}"
    (root / "bin/docker").write_text(text)
    (root / "bin/docker").chmod(0o755)
