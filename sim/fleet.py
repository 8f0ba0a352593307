"""Many simulated hosts on one machine: a distinct SSH endpoint per host in front of one dockerd.

A fleet deployed as shards (docs/shards.md) has tens of hosts per stack, and what grows with them is
what the engine runs per host: one docker provider process, one SSH connection per docker call, one
host check over SSH. `SimFleet` makes that real without tens of machines. Every simulated host is

- **its own SSH endpoint**: an sshd of its own (sim/sshd.py) on its own loopback address
  (``127.0.1.K``; Linux routes all of 127.0.0.0/8 to ``lo``) with **its own host key**, so the
  fleet's known_hosts file holds one key per address and a host whose key is swapped fails
  host-key checking as a real one would. OpenSSH picks host keys by key type, not by the address a
  client reached (sshd_config(5) `HostKey`, `ListenAddress`), so distinct keys need one sshd per
  address; each is a few MB of memory. The fleet shares one client key (`identity_file`), as a
  fleet shares `ascend-fleet:ssh.identityFile`.
- **its own docker provider** in the program (`ssh://root@127.0.1.K:PORT`), all reaching the one
  dockerd of the `SimHost` they stand beside.
- **its own cards**: a folder ``/var/lib/npu-sim/hosts/<name>`` that its npu-sim containers use as
  their NPU state (the image's ``NPU_SIM_CLAIMS``, set per service by `card_state_env`), so two
  hosts' containers on "card 0" claim HBM and HCCL ports on two different cards.
- **its own address** for what a rank binds on the host network: the folder's ``address`` file holds
  ``127.0.1.K``, which the stand-in takes as the host's one address. A multi-host member binds its DP
  handshake (``--data-parallel-address``) and its HCCL host ports (``HCCL_IF_IP``) there and refuses
  an address that is not it, so a port taken on one simulated host clashes there only: Linux keys a
  listening socket by address and port (sim/README.md, "Multi-host groups").

What the hosts still share, because they are one machine: the device files, the driver folders and
the fake ``npu-smi`` (which reads the `SimHost`'s own state folder, so it shows none of a simulated
host's containers), the start gate's card locks (``/var/lib/ascend-fleet/locks``: every host's
container on card N waits for the same lock until it serves), the image store, and the published ports (one dockerd binds them all, so the
fleet's services need ports distinct across hosts, which `apiPort` pins give). The stand-in
container is the npu-sim image with no load time: busybox's httpd answering ``/health`` and
``/v1/models``, about a megabyte per container.

Start it inside a running `SimHost` (which holds the machine lock, the files, dockerd and the image).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sim.ascend_files import HostFiles
from sim.host import SimHost
from sim.npu_state import CLAIMS_DIR
from sim.sshd import Sshd

HOSTS_DIR = CLAIMS_DIR / "hosts"
"""Where each simulated host keeps its cards' state (a folder per host)."""
ADDRESS_FILE = "address"
"""In a host's card-state folder: the host's address, which the npu-sim stand-in reads as its own
(sim/npu-sim/hccl-host.sh `host_addresses`)."""
FIRST_ADDRESS = (127, 0, 1, 1)


def address_of(index: int) -> str:
    """The loopback address of simulated host `index` (0-based): 127.0.1.1, ..., 127.0.1.254, 127.0.2.1, ..."""
    if not 0 <= index < 254 * 254:
        raise ValueError(f"simulated host index {index} is outside 0..{254 * 254 - 1}")
    return f"127.0.{1 + index // 254}.{1 + index % 254}"


@dataclass(frozen=True)
class SimEndpoint:
    """One simulated host as the fleet's stack file names it."""

    name: str
    address: str
    ssh_port: int
    card_state: Path


def card_state_env(endpoint: SimEndpoint) -> dict[str, str]:
    """The environment that gives a service's npu-sim container this host's cards."""
    return {"NPU_SIM_CLAIMS": str(endpoint.card_state)}


class SimFleet:
    """`count` simulated hosts named `prefix`00.., each an sshd with its own address and host key.

    `identity_file` and `known_hosts_file` are the fleet's client files (every host's key, one
    line per address). `add(n)` starts n more hosts, as a fleet grows."""

    def __init__(self, host: SimHost, workdir: Path, prefix: str = "sim") -> None:
        self.host = host
        self.workdir = workdir
        self.prefix = prefix
        self.identity_file = workdir / "id_ed25519"
        self.known_hosts_file = workdir / "known_hosts"
        self.endpoints: list[SimEndpoint] = []
        self._sshds: list[Sshd] = []
        self._files = HostFiles()
        self._addresses: list[str] = []

    def __enter__(self) -> SimFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add(self, count: int) -> list[SimEndpoint]:
        """Start `count` more simulated hosts; their endpoints."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.identity_file.exists():
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "simfleet", "-f", str(self.identity_file)], check=True
            )
        self._files.ensure_dir(HOSTS_DIR)
        added = []
        for _ in range(count):
            added.append(self._start_one(len(self.endpoints)))
            self.endpoints.append(added[-1])
        self.known_hosts_file.write_text("".join(s.known_hosts_file.read_text() for s in self._sshds))
        return added

    def _start_one(self, index: int) -> SimEndpoint:
        name = f"{self.prefix}{index:02d}"
        folder = self.workdir / name
        folder.mkdir(exist_ok=True)
        sshd = Sshd(folder, address_of(index), "root", self.host.dockerd.socket)
        for suffix in ("", ".pub"):  # the fleet's one client key; the host key stays the host's own
            shutil.copy2(f"{self.identity_file}{suffix}", f"{sshd.identity_file}{suffix}")
        self._sshds.append(sshd)
        self._add_address(sshd.address)
        sshd.start(self._files)
        state = HOSTS_DIR / name
        self._files.ensure_dir(state)
        (state / ADDRESS_FILE).write_text(f"{sshd.address}\n")
        return SimEndpoint(name, sshd.address, sshd.port, state)

    def host_keys(self) -> dict[str, str]:
        """Host name -> the public host key its sshd presents (``ssh-ed25519 AAAA...``)."""
        return {
            e.name: " ".join(Path(f"{s.host_key}.pub").read_text().split()[:2]) for e, s in zip(self.endpoints, self._sshds)
        }

    def _add_address(self, address: str) -> None:
        """Configure `address` on `lo`, as a real host has its address on a NIC: Linux answers every
        127.0.0.0/8 address on `lo` without it, but `ip addr` lists only what is configured, and the host
        check of a multi-host member's host reads its HCCL_IF_IP there (records.host_check `_nic_checks`).
        Only an address not configured yet, and only that is removed at `stop`."""
        shown = subprocess.run(["ip", "-o", "addr", "show", "dev", "lo"], capture_output=True, text=True, check=True)
        if f" {address}/" not in shown.stdout:
            subprocess.run(["ip", "addr", "add", f"{address}/32", "dev", "lo"], check=True)
            self._addresses.append(address)

    def stop(self) -> None:
        """Stop every sshd and remove the addresses and card-state folders this fleet created."""
        for sshd in self._sshds:
            with contextlib.suppress(Exception):
                sshd.stop()
        self._sshds.clear()
        for address in self._addresses:
            subprocess.run(["ip", "addr", "del", f"{address}/32", "dev", "lo"], check=False, capture_output=True)
        self._addresses.clear()
        self._files.remove()
