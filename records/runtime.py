"""The container runtime as the host scripts and containers name it: Docker's CLI, in one place.

Every records builder whose shell script talks to the runtime on a host (the host check,
device-share, takeover, the start order's boot step, the router image build, the router's worker
list and the rolling replacement), and the container records that name it (the start gate's
message, the NPU exporter), take the runtime's words from here. A second runtime (nerdctl,
podman) or another target changes this module, and `tests/test_runtime_seam.py` keeps any other
records module from spelling the CLI in a string.

The words are the Docker CLI's (docs.docker.com/reference/cli/docker/: `container ls -q`/`-aq`,
`--filter name=` (`named`),
`container inspect --format` with Go templates over the Engine API's container JSON, `update
--restart=no`, `image inspect`, `build -`, `exec`, `run --rm`, `version --format`). Scripts that a
test runs against a stand-in CLI under its root read it from `$docker` (`SH`, `stand_in`, `assign`).
Pure: builds text, runs nothing.
"""

from __future__ import annotations

import shlex

CLI = "docker"
"""The runtime's command on a host."""
_VARIABLE = "docker"
_STAND_IN = "/bin/docker"
SH = f'"${{{_VARIABLE}:-{CLI}}}"'
"""The CLI as a script word, `$docker` when a test sets it (`stand_in`)."""
VAR = f'"${_VARIABLE}"'
"""The CLI in a script that always sets `$docker` (`assign`)."""
DAEMON_UNIT = f"{CLI}.service"
"""The daemon's systemd unit: the boot steps run before or after it."""
NODE_UNITS = ("containerd.service", "kubelet.service")
"""The units that start containers on a Kubernetes node (containerd's own unit, the kubelet's from
the distribution's packages): the device-share boot step runs before them too."""
DAEMON_CONFIG = "/etc/docker/daemon.json"
"""The daemon's settings, whose log-opts dockerd merges into every json-file container."""
STATE_DIR = "/var/run/docker"
"""The daemon's run-time state, which MindCluster's DaemonSet mounts into the NPU Exporter (whose card-to-
container mapping needs a CRI socket too, absent on a plain Docker host: records.exporter)."""
EXPORTER_MODE = CLI
"""npu-exporter's `-containerMode` for this runtime (`docker` or `containerd`)."""
PROVIDER = "docker provider"
"""What the messages call the Pulumi provider that creates the containers (pulumi-docker)."""

# Go templates of `inspect --format` over a container. `.Name` is Docker's "/name": readers strip the slash.
NAME = "{{.Name}}"
STATUS = "{{.State.Status}}"
RUNNING = "{{.State.Running}}"
RESTART_POLICY = "{{.HostConfig.RestartPolicy.Name}}"
PRIVILEGED = "{{.HostConfig.Privileged}}"
DEVICES = "{{range .HostConfig.Devices}}{{.PathOnHost}} {{end}}"
"""The host paths of its devices, each followed by a space."""
PORTS = "{{range $p, $b := .HostConfig.PortBindings}}{{range $b}}{{.HostPort}} {{end}}{{end}}"
"""The host ports it publishes, each followed by a space."""
IMAGE_ID = "{{.Id}}"
SERVER_VERSION = "{{.Server.Version}}"


def label(key: str) -> str:
    """The template of one label's value (empty when the container has none)."""
    return f'{{{{index .Config.Labels "{key}"}}}}'


def path(root: str = "") -> str:
    """The CLI as a script word: the stand-in under a test's `root`, else `CLI`."""
    return shlex.quote(root + _STAND_IN) if root else CLI


def assign(root: str = "") -> str:
    """The line setting `$docker` (`VAR`) to the CLI."""
    return f"{_VARIABLE}={path(root)}"


def stand_in(root: str = "") -> list[str]:
    """The lines pointing `SH` at the stand-in CLI under a test's `root`; none on a real host."""
    return [assign(root)] if root else []


def inspect_containers(template: str, *, stopped: bool = False, wrap: str = " ") -> str:
    """A pipeline printing `template` for every running container (and stopped ones with `stopped`);
    `wrap`: what stands between the format flag and the template (a line break for long lines)."""
    ids = f"{SH} ps -{'a' if stopped else ''}q 2>/dev/null </dev/null"
    return f"{ids} | xargs -r {SH} inspect --format{wrap}{shlex.quote(template)}"


def named(name: str, cli: str = CLI) -> str:
    """A command printing the full ID of the container whose name is exactly `name` (a shell word:
    a quoted name, or `"$var"`), and nothing when no container has that name.

    Every command of the host scripts that acts on a container by name takes its ID from here, but
    the rollout's (records.rollout), which name only routers: `-router` begins no ID, IDs being hex.
    Given a name, `inspect`, `update`,
    `stop`, `start`, `logs` and `exec` resolve it as a full ID first, then as an exact name, then as
    a unique ID prefix (moby daemon/container.go `GetContainer`, as in dockerd 20.10.24): with no
    container named `cafe`, `docker stop cafe` stops the container whose ID begins with `cafe`. `ps
    --filter name=` matches a regular expression against each of a container's names, which the daemon
    keeps with a leading slash (`/cafe`; moby daemon/list.go `filterByNameIDMatches`,
    api/types/filters/parse.go `Args.Match`: `regexp.MatchString`), and Go's regexp reads `\\Q...\\E`
    as literal text (regexp/syntax), so `^/\\Qcafe\\E$` matches that one name: no other name, no ID,
    and no `.` in a name as a wildcard (Docker names have no backslash to end the quote)."""
    return f'{cli} ps -aq --no-trunc --filter "name=^/\\Q"{name}"\\E\\$"'


def inspect(template: str, cli: str = CLI, flag: str = "-f") -> str:
    """`inspect` of one container printing `template`; its name follows."""
    return f"{cli} inspect {flag} {shlex.quote(template)}"


def image_inspect(template: str | None = None) -> str:
    """`image inspect`, printing `template` when given; the image follows. Fails when it is absent."""
    return f"{CLI} image inspect" + (f" -f {shlex.quote(template)}" if template else "")


def build(tag: str) -> str:
    """Builds image `tag` (a shell word) from a Dockerfile on stdin, without pulling its base."""
    return f"{CLI} build --pull=false -t {tag} -"


def version(template: str, cli: str = CLI) -> str:
    """The daemon's version, printed with `template`."""
    return f"{cli} version --format {shlex.quote(template)}"


def info(cli: str = SH) -> str:
    """Answers once the daemon is up."""
    return f"{cli} info"


def stop(cli: str = CLI) -> str:
    return f"{cli} stop"


def start(cli: str = CLI) -> str:
    return f"{cli} start"


def no_restart(cli: str = CLI) -> str:
    """Gives a container the restart policy `no`: the daemon never starts it again by itself."""
    return f"{cli} update --restart=no"


def logs(name: str = "") -> str:
    """A container's log; without `name`, the words an operator completes."""
    return f"{CLI} logs {name}" if name else f"{CLI} logs"


def log_tail(name: str, lines: int) -> str:
    """A script printing the last `lines` lines of the log of the container named exactly `name`
    (by its ID, `named`); else that no container has that name, or why the containers could not be
    listed."""
    word = shlex.quote(name)
    return (
        f"if ! id=$({named(word)} 2>/dev/null </dev/null); then {named(word)} 2>&1 >/dev/null </dev/null\n"
        f"elif [ -z \"$id\" ]; then echo no container is named {word}\n"
        f'else {CLI} logs --tail {int(lines)} "$id" 2>&1 </dev/null; fi\n'
    )


def remove(name: str = "NAME") -> str:
    return f"{CLI} rm -f {name}"


def rename(name: str, new: str) -> str:
    return f"{CLI} rename {name} {new}"


DISABLE = f"{no_restart()} NAME && {stop()} NAME"
"""How an operator takes a container out of service so that no reboot brings it back."""


def exec_argv(container: str, *argv: str) -> list[str]:
    """Runs `argv` inside the running `container`."""
    return [CLI, "exec", container, *argv]


def run_argv(*args: str) -> list[str]:
    """Runs a container: `args` are `run`'s options, the image and its command."""
    return [CLI, "run", *args]
