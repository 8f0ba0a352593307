"""The simulated host's own sshd on loopback, and the client side that reaches it.

The project deploys to a docker daemon reached over SSH (``ssh://user@host:port``), so the
host needs an sshd of its own: on 127.0.0.1 with its own config, host key and a client key made
for the run (root login by key only); ``docker system dial-stdio`` runs through it. Every session
gets ``DOCKER_HOST`` of the host's own daemon (sshd_config(5) `SetEnv`), so the docker CLI a
deployer or a host script runs there reaches that daemon, as a host's only daemon is reached.

Docker's SSH helper runs the ``ssh`` binary found on PATH, and OpenSSH reads the user config
from the passwd home directory, not ``$HOME``. `Sshd.docker_env` therefore puts a tiny ``ssh``
wrapper first on PATH that runs ``/usr/bin/ssh -F <generated config>``; the config names the
identity file and a known_hosts file holding the generated host key, with
``StrictHostKeyChecking yes`` and ``BatchMode yes``. Tools that take SSH options themselves
(the pulumi-docker provider's ``ssh_opts``) get the same settings from `Sshd.ssh_opts`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from sim.ascend_files import HostFiles
from sim.daemons import free_port, sshd_binary, terminate
from sim.errors import SimHostError

SERVER_OPTIONS = (
    "PermitRootLogin prohibit-password\n"
    "PubkeyAuthentication yes\n"
    "PasswordAuthentication no\n"
    "KbdInteractiveAuthentication no\n"
    "UsePAM no\n"
    "StrictModes no\n"
    "MaxStartups 100:30:200\n"
    "MaxSessions 50\n"
    "LogLevel VERBOSE\n"
)


class Sshd:
    """An sshd on `address`, the keys and client files that reach it, and an SSH master connection."""

    def __init__(self, workdir: Path, address: str, user: str, docker_socket: Path) -> None:
        self.workdir = workdir
        self.docker_socket = docker_socket
        self.address = address
        self.user = user
        self.port = 0
        self.identity_file = workdir / "id_ed25519"
        self.known_hosts_file = workdir / "known_hosts"
        self.config_file = workdir / "ssh_config"
        self.host_key = workdir / "ssh_host_ed25519_key"
        self.log_file = workdir / "sshd.log"
        self._bin_dir = workdir / "bin"
        self._control_path = workdir / "ssh-master"
        self._proc: subprocess.Popen[bytes] | None = None

    # ---- client side ----------------------------------------------------

    @property
    def docker_host(self) -> str:
        """``ssh://root@127.0.0.1:PORT``, for DOCKER_HOST or the pulumi-docker provider."""
        return f"ssh://{self.user}@{self.address}:{self.port}"

    @property
    def ssh_opts(self) -> list[str]:
        """SSH options that reach the host with host-key checking on (pulumi-docker `ssh_opts`)."""
        return [
            "-o", "StrictHostKeyChecking=yes",
            "-o", "ConnectTimeout=10",
            "-o", "BatchMode=yes",
            "-o", "IdentitiesOnly=yes",
            "-i", str(self.identity_file),
            "-o", f"UserKnownHostsFile={self.known_hosts_file}",
        ]  # fmt: skip

    def docker_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment in which the docker CLI (or a provider using it) talks to this host."""
        env = dict(os.environ if base is None else base)
        env.pop("DOCKER_CONTEXT", None)
        env["DOCKER_HOST"] = self.docker_host
        env["PATH"] = f"{self._bin_dir}{os.pathsep}{env.get('PATH', os.defpath)}"
        return env

    def run(self, command: str, *, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run a shell command on the host over SSH."""
        proc = subprocess.run(
            ["ssh", "-F", str(self.config_file), self.address, command],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check and proc.returncode != 0:
            raise SimHostError(f"ssh {command!r} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    # ---- the daemon -----------------------------------------------------

    def start(self, files: HostFiles) -> None:
        """Make the keys and configs, start sshd on a free port, open the master connection and
        check that docker answers through it."""
        for key in (self.host_key, self.identity_file):
            if not key.exists():
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "simhost", "-f", str(key)], check=True)
        # Debian's sshd needs its privilege separation directory.
        files.ensure_dir(Path("/run/sshd"))
        self.port = free_port()
        config = self._write_server_config()
        self._write_client_files()
        self._launch(config)
        subprocess.run(
            ["ssh", "-F", str(self.config_file), "-o", "ControlMaster=yes", "-o", "ControlPersist=300",
             "-f", "-N", self.address],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30,
        )  # fmt: skip
        probe = self.run("docker version --format '{{.Server.Version}}'", check=False, timeout=30)
        if probe.returncode != 0:
            raise SimHostError(
                f"ssh to {self.docker_host} works but docker does not answer there: {probe.stderr.strip()}\n"
                f"sshd log:\n{self.log_file.read_text()[-3000:]}"
            )

    def stop(self) -> None:
        """Close the master connection and stop sshd."""
        if self._control_path.exists():
            subprocess.run(
                ["ssh", "-F", str(self.config_file), "-O", "exit", self.address],
                stdin=subprocess.DEVNULL, capture_output=True, timeout=10,
            )  # fmt: skip
        if self._proc is not None:
            terminate(self._proc)
            self._proc = None

    def _write_server_config(self) -> Path:
        authorized = self.workdir / "authorized_keys"
        authorized.write_text(Path(f"{self.identity_file}.pub").read_text())
        config = self.workdir / "sshd_config"
        config.write_text(
            f"Port {self.port}\n"
            f"ListenAddress {self.address}\n"
            f"HostKey {self.host_key}\n"
            f"PidFile {self.workdir / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {authorized}\n"
            f"SetEnv DOCKER_HOST=unix://{self.docker_socket}\n" + SERVER_OPTIONS
        )
        return config

    def _write_client_files(self) -> None:
        """known_hosts with the generated host key, the ssh config, and the ``ssh`` wrapper."""
        host_pub = Path(f"{self.host_key}.pub").read_text().split()
        self.known_hosts_file.write_text(f"[{self.address}]:{self.port} {host_pub[0]} {host_pub[1]}\n")
        self.config_file.write_text(
            f"Host {self.address}\n"
            f"  HostName {self.address}\n"
            f"  Port {self.port}\n"
            f"  User {self.user}\n"
            f"  IdentityFile {self.identity_file}\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.known_hosts_file}\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking yes\n"
            "  BatchMode yes\n"
            "  ConnectTimeout 10\n"
            "  LogLevel ERROR\n"
            # Reuse the master connection opened in `start` when it is up (a fresh
            # handshake costs ~0.4 s per docker call); connect directly otherwise.
            f"  ControlPath {self._control_path}\n"
            "  ControlMaster no\n"
        )
        self._bin_dir.mkdir(exist_ok=True)
        wrapper = self._bin_dir / "ssh"
        real_ssh = shutil.which("ssh") or "/usr/bin/ssh"
        wrapper.write_text(f'#!/bin/sh\nexec {real_ssh} -F {self.config_file} "$@"\n')
        wrapper.chmod(0o755)

    def _launch(self, config: Path) -> None:
        """Start sshd with `config` and wait (20 s at most) until it listens."""
        sshd = sshd_binary()
        assert sshd is not None
        log = self.log_file.open("wb")
        self._proc = subprocess.Popen(
            [sshd, "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 20
        while True:
            if self._proc.poll() is not None:
                raise SimHostError(f"sshd exited {self._proc.returncode}: {self.log_file.read_text()}")
            with contextlib.suppress(OSError), socket.create_connection((self.address, self.port), timeout=1):
                break
            if time.monotonic() > deadline:
                raise SimHostError(f"sshd not listening on {self.port}: {self.log_file.read_text()}")
            time.sleep(0.1)
