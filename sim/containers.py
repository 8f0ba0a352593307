"""The npu-sim containers on the simulated host: started like the seed's compose services,
watched, killed and started again in an order of a test's, and removed after a test.

Containers are started over SSH (``DOCKER_HOST=ssh://...``), as a deployer starts them; the
harness looks at them (state, logs, waits) and removes them on the local socket, which is the
same daemon without an SSH round trip per poll. Every container a test starts carries
`labels` so `Containers.cleanup` finds it; so does any container of the npu-sim image, e.g. one
a Pulumi stack under test made without our labels.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sim import npu_state
from sim.ascend_files import CLAIMS_DIR, CONTROL_DEVICES, DCMI_DIR, DRIVER_DIR, INSTALL_INFO, NPU_SMI
from sim.daemons import free_port
from sim.errors import ContainerFailed, SimHostError
from sim.npu_image import IMAGE

TEST_LABEL = "ascend-fleet.test"
SESSION_LABEL = "ascend-fleet.test.session"

DockerCall = Callable[..., subprocess.CompletedProcess[str]]
"""``docker ARGS`` on the host: over SSH (`SimHost.docker`) or on the daemon's local socket
(`SimHost.local_docker`); ``(*args, check=True, timeout=120)``."""


@dataclass(frozen=True)
class SimService:
    """A vLLM stand-in started by `SimHost.start_service`."""

    name: str
    """Container name."""
    port: int
    """API port inside the container (`--port`)."""
    host_port: int | None
    """Port published on 127.0.0.1, or None when the container has no published port."""

    @property
    def url(self) -> str:
        if self.host_port is None:
            raise SimHostError(f"{self.name} publishes no port")
        return f"http://127.0.0.1:{self.host_port}"


def http_get(service: SimService, path: str, timeout: float = 5) -> tuple[int, bytes]:
    """GET a path of a published service: (status, body)."""
    try:
        with urllib.request.urlopen(service.url + path, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def mounts(cards: Sequence[int], model: Path, *, mount_model: bool) -> list[str]:
    """``docker run`` arguments for the cards' devices, the control devices, the driver, dcmi,
    npu-smi, the NPU state folder and, with `mount_model`, the model read-only at its path."""
    args = []
    for card in cards:
        args += ["--device", f"/dev/davinci{card}:/dev/davinci{card}"]
    for device in CONTROL_DEVICES:
        args += ["--device", f"{device}:{device}"]
    return args + [
        "-v", f"{DRIVER_DIR}:{DRIVER_DIR}:ro",
        "-v", f"{DCMI_DIR}:{DCMI_DIR}:ro",
        "-v", f"{NPU_SMI}:{NPU_SMI}:ro",
        "-v", f"{INSTALL_INFO}:{INSTALL_INFO}:ro",
        "-v", f"{CLAIMS_DIR}:{CLAIMS_DIR}",
        *(["-v", f"{model}:{model}:ro"] if mount_model else []),
    ]  # fmt: skip


def health_check(port: int, interval: str) -> list[str]:
    """``docker run`` arguments for a health check on the API's ``/health``."""
    return [
        "--health-cmd", f"wget -q -O /dev/null http://127.0.0.1:{port}/health",
        "--health-interval", interval,
        "--health-timeout", "5s",
        "--health-retries", "3",
        "--health-start-period", "120s",
    ]  # fmt: skip


class Containers:
    """The test containers of one simulated-host session (`session` labels them)."""

    def __init__(self, docker: DockerCall, local_docker: DockerCall, session: str) -> None:
        self._docker = docker
        self._local = local_docker
        self.session = session
        self._privileged_ok: bool | None = None

    def labels(self) -> dict[str, str]:
        """Labels that mark a container as this test run's (so cleanup finds it)."""
        return {TEST_LABEL: "1", SESSION_LABEL: self.session}

    def start_service(
        self,
        name: str,
        *,
        model: Path | str,
        cards: Sequence[int],
        port: int,
        tp: int | None = None,
        gpu_memory_utilization: float = 0.9,
        env: Mapping[str, str] | None = None,
        served_model_name: str | None = None,
        publish: bool = True,
        extra_args: Iterable[str] = (),
        load_seconds: float = 1,
        privileged: bool = False,
        mount_model: bool = True,
        health_interval: str = "500ms",
    ) -> SimService:
        """``docker run -d`` an npu-sim container laid out like the seed's compose services.

        Mounts /dev/davinciN for each card in `cards` (plus the control devices, the
        driver, dcmi, npu-smi and the NPU state folder) and, with `mount_model`, the
        model read-only at the same path. `tp` defaults to ``len(cards)``. `env` goes in verbatim: pass
        ``HCCL_NPU_SOCKET_PORT_RANGE`` / ``ASCEND_RT_VISIBLE_DEVICES`` to test a layout.
        With `publish`, `port` is published on a free 127.0.0.1 port (`SimService.url`).
        """
        model = Path(model)
        tp = len(cards) if tp is None else tp
        args = ["run", "-d", "--name", name]
        for key, value in self.labels().items():
            args += ["--label", f"{key}={value}"]
        if privileged:
            args.append("--privileged")
        args += mounts(cards, model, mount_model=mount_model)
        args += ["-e", f"NPU_SIM_LOAD_SECONDS={load_seconds}", *health_check(port, health_interval)]
        for key, value in (env or {}).items():
            args += ["-e", f"{key}={value}"]
        host_port = free_port() if publish else None
        if publish:
            args += ["-p", f"127.0.0.1:{host_port}:{port}"]
        args += [
            IMAGE, "vllm", "serve", str(model),
            "--served-model-name", served_model_name or name,
            "--host", "0.0.0.0",
            "--port", str(port),
            "--tensor-parallel-size", str(tp),
            "--gpu-memory-utilization", str(gpu_memory_utilization),
            *extra_args,
        ]  # fmt: skip
        self._docker(*args)
        return SimService(name=name, port=port, host_port=host_port)

    def privileged_containers_run(self) -> bool:
        """Whether this docker daemon can start a ``--privileged`` container. Not everywhere: a
        daemon that itself lacks a capability (e.g. inside a sandbox) cannot grant them all."""
        if self._privileged_ok is None:
            labels = [f"--label={k}={v}" for k, v in self.labels().items()]
            proc = self._docker("run", "--rm", "--privileged", *labels, "--entrypoint", "/bin/true", IMAGE, check=False)
            self._privileged_ok = proc.returncode == 0
        return self._privileged_ok

    def state(self, container: str) -> dict[str, object]:
        """``docker inspect`` .State of a container."""
        return json.loads(self._local("inspect", "-f", "{{json .State}}", container).stdout)

    def logs(self, container: str, since: str | None = None) -> str:
        """stdout and stderr of a container, interleaved: all of them, or those `since` a moment
        (RFC 3339, as ``docker logs --since`` reads it); a restarted container's log holds its
        earlier runs too."""
        proc = self._local("logs", *(["--since", since] if since else []), container, check=False)
        return proc.stdout + proc.stderr

    def wait_healthy(self, container: str, timeout: float = 60) -> None:
        """Wait until docker reports the container `healthy`; raise ContainerFailed with its logs otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.state(container)
            health = (state.get("Health") or {}).get("Status")  # type: ignore[union-attr]
            if health == "healthy":
                return
            if state.get("Status") in ("exited", "dead") or health == "unhealthy":
                raise ContainerFailed(
                    f"{container} is {state.get('Status')} (health {health}, exit code "
                    f"{state.get('ExitCode')}); logs:\n{self.logs(container)}"
                )
            if time.monotonic() > deadline:
                raise ContainerFailed(f"{container} not healthy after {timeout:.0f}s (health {health}); logs:\n{self.logs(container)}")
            time.sleep(0.2)

    def wait_exit(self, container: str, timeout: float = 60) -> int:
        """Wait for the container to stop; its exit code."""
        proc = self._local("wait", container, timeout=timeout)
        return int(proc.stdout.strip().splitlines()[-1])

    def running(self, *, label: str | None = None, prefix: str | None = None) -> list[str]:
        """Names of the running containers with this label (``KEY`` or ``KEY=VALUE``) and name prefix, sorted."""
        args = ["ps", "--format", "{{.Names}}"]
        if label is not None:
            args += ["--filter", f"label={label}"]
        names = self._local(*args).stdout.split()
        return sorted(n for n in names if prefix is None or n.startswith(prefix))

    def kill(self, *, label: str | None = None, prefix: str | None = None) -> list[str]:
        """SIGKILL every running container with this label and/or name prefix in one ``docker kill``,
        as a power cut does, and wait until they are down; their names, sorted. None running
        is an error.

        Their NPU claims stay behind (the ranks had no chance to release them): the next
        claimant reaps them, or `npu_state.reboot` / `npu_state.sweep_claims` does.
        """
        if label is None and prefix is None:
            raise SimHostError("kill_containers needs a label or a name prefix")
        names = self.running(label=label, prefix=prefix)
        if not names:
            # Almost always a wrong selector (a label value that is not the stack's, say).
            raise SimHostError(f"kill_containers: no running container with label {label!r} and prefix {prefix!r}")
        self._local("kill", *names)
        self._local("wait", *names)
        return names

    def start(self, order: Sequence[str], *, wait_healthy: bool = False, timeout: float = 60) -> None:
        """``docker start`` the containers one after another in this order; with `wait_healthy`,
        each one must be healthy before the next starts (otherwise they load at the same time,
        as when dockerd starts them at boot)."""
        for name in order:
            self._docker("start", name)
            if wait_healthy:
                self.wait_healthy(name, timeout=timeout)

    def order_of(self, order: Sequence[str] | None, *, label: str | None, prefix: str | None) -> list[str]:
        """The running containers with this label and/or name prefix, in `order` first (the ones it
        leaves out follow by name); an error for a name in `order` that is not among them."""
        if label is None and prefix is None:
            raise SimHostError("restart_containers needs a label or a name prefix")
        names = self.running(label=label, prefix=prefix)
        order = list(order or [])
        unknown = [n for n in order if n not in names]
        if unknown:
            raise SimHostError(
                f"restart_containers: {', '.join(unknown)} not among the running containers with label "
                f"{label!r} and prefix {prefix!r}: {', '.join(names) or 'none'}"
            )
        return order + [n for n in names if n not in order]

    def restart(
        self,
        order: Sequence[str] | None = None,
        *,
        label: str | None = None,
        prefix: str | None = None,
        wait_healthy: bool = False,
    ) -> list[str]:
        """Kill every running container with this label and/or name prefix at once, then start
        them again in `order` (`order_of`). The names in start order.

        The same with the docker CLI, e.g. from a test that drives the host like an operator::

            env = sim_host.docker_env()
            ps = ["docker", "ps", "--filter", "label=KEY", "--format", "{{.Names}}"]
            names = subprocess.run(ps, env=env, capture_output=True, text=True).stdout.split()
            subprocess.run(["docker", "kill", *names], env=env)  # all at once
            for name in order:
                subprocess.run(["docker", "start", name], env=env)
        """
        order = self.order_of(order, label=label, prefix=prefix)
        self.kill(label=label, prefix=prefix)
        self.start(order, wait_healthy=wait_healthy)
        return order

    def cleanup(self) -> None:
        """Remove every test container, then stale NPU claims.

        Test containers: those labelled ``ascend-fleet.test=1`` and any container of
        the npu-sim image (e.g. made by a Pulumi stack under test, without our labels).
        """
        ids = set(self._local("ps", "-aq", "--filter", f"label={TEST_LABEL}").stdout.split())
        ids |= set(self._local("ps", "-aq", "--filter", f"ancestor={IMAGE}").stdout.split())
        if ids:
            self._local("rm", "-f", *ids, check=False)
        npu_state.sweep_claims()
