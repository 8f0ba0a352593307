"""A multi-host service's members on the simulated hosts (sim/fleet.py), started from the plan JSON.

The plan JSON's `groups[].members[]` carries what each member's `vllm serve` needs beyond the
service's flags: its host, its cards (`devices`), its `args` (the data-parallel flags), its `env`
(`HCCL_IF_IP`) and its windows. A member here is started as its host would run it: `docker run
--network host` in the npu-sim image, the host's card state (`card_state_env`), its cards, the
service's flags, the member's args and env, and its HCCL windows as the variables a single-host
service carries them in (allocation/windows.py `KINDS`). The leader's health check probes its own
`/health`; a `--headless` follower has no HTTP endpoint, so its check probes the leader's, as the
deployment does (docs/multi-host.md).
"""

from __future__ import annotations

import json
import socket
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from allocation.windows import BY_KEY, EPHEMERAL
from sim.containers import mounts
from sim.fleet import SimEndpoint, SimFleet, card_state_env
from sim.host import IMAGE, SimHost
from tests.support.sim_stacks import allocation

SERVICE = "dp"
FRACTION = 0.5
"""Each member's `memoryFraction`: HBM the stand-in claims per card."""


def free_port_outside_ephemeral(start: int, taken: set[int]) -> int:
    """The first port from `start` that no socket holds on any address here and is not `taken` (then
    it is): a member's pinned windows must lie outside the ephemeral range, where `free_port` picks."""
    port = start
    while port in taken or not port_free(port):
        port += 1
    assert port < EPHEMERAL[0], f"no free port from {start} below the ephemeral range"
    taken.add(port)
    return port


def port_free(port: int) -> bool:
    """Whether a socket could bind `port` on every address here."""
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


@dataclass(frozen=True)
class Group:
    """A planned group on the simulated fleet: its plan JSON and the fleet's endpoint of each host."""

    plan: dict
    """The plan JSON's `groups[]` entry."""
    endpoints: dict[str, SimEndpoint]
    """Host name -> the simulated host."""
    model: Path

    def member(self, index: int) -> dict:
        return self.plan["members"][index]

    @property
    def leader_url(self) -> str:
        leader = self.member(0)
        return f"http://{self.endpoints[leader['host']].address}:{leader['apiPort']}"


def planned_group(sim: SimHost, fleet: SimFleet, tmp_path: Path, size: int, hosts: int | None = None) -> Group:
    """`python -m allocation plan --format json` of a stack with one service of `size` data-parallel
    ranks, one per host, tensor parallel 1, over the fleet's first `size` simulated hosts (`hosts`
    of them in the stack), its API and DP RPC ports pinned free on this machine."""
    endpoints = fleet.endpoints[: hosts or size]
    model = sim.make_model(f"{SERVICE}-model")
    taken: set[int] = set()
    pins = [{"apiPort": free_port_outside_ephemeral(18000, taken),
             "dataParallelRpcPort": free_port_outside_ephemeral(29550, taken)}]  # fmt: skip
    values = {
        "hosts": [{"name": e.name, "address": e.address, "sshPort": e.ssh_port} for e in endpoints],
        "defaults": {"image": IMAGE},
        "services": [{
            "name": SERVICE, "model": str(model), "tensorParallelSize": 1, "memoryFraction": FRACTION,
            "dataParallel": {"size": size, "perHost": 1, "memberPins": pins},
        }],
    }  # fmt: skip
    [group] = plan_json(tmp_path / "Pulumi.dp-on-sim.yaml", values)["groups"]
    return Group(group, {e.name: e for e in endpoints}, model)


def plan_json(config: Path, values: dict) -> dict:
    """`python -m allocation plan --format json` of the stack file `config`, written with the
    `ascend-fleet:` `values`."""
    config.write_text(json.dumps({"config": {f"ascend-fleet:{k}": v for k, v in values.items()}}))  # JSON is YAML
    planned = allocation("plan", "--config", str(config), "--format", "json")
    assert planned.returncode == 0, planned.stderr
    return json.loads(planned.stdout)


def window_env(entry: dict) -> dict[str, str]:
    """The windows of a plan JSON entry (a member, an instance) as the variables a single-host service
    carries them in."""
    return {k.env: k.text(_window(entry[k.key])) for k in map(BY_KEY.get, entry) if k and k.env and entry[k.key]}


def member_env(member: dict) -> dict[str, str]:
    """The member's env and its HCCL windows, as a single-host service carries them."""
    return {**window_env(member), **member["env"]}


def _window(value: int | list[int]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (value[0], value[1])


def start_member(
    sim: SimHost,
    group: Group,
    index: int,
    *,
    name: str | None = None,
    host: str | None = None,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    devices: list[int] | None = None,
    restart: bool = False,
) -> str:
    """`docker run --network host` member `index` of `group` on its host (or `host`), as planned but
    for what the keyword arguments replace (`env` adds to the planned env); its container name."""
    member = group.member(index)
    endpoint = group.endpoints[host or member["host"]]
    name = name or member["name"]
    health = f"{group.leader_url}/health"
    run = ["run", "-d", "--name", name, "--network", "host", *(["--restart", "unless-stopped"] if restart else [])]
    for key, value in sim.labels().items():
        run += ["--label", f"{key}={value}"]
    run += mounts(devices or member["devices"], group.model, mount_model=True)
    environment = {"NPU_SIM_LOAD_SECONDS": "0", **card_state_env(endpoint), **member_env(member), **(env or {})}
    for key, value in environment.items():
        run += ["-e", f"{key}={value}"]
    run += ["--health-cmd", f"wget -q -O /dev/null {health}", "--health-interval", "500ms", "--health-retries", "3"]
    leader = group.member(0)
    run += [
        IMAGE, "vllm", "serve", str(group.model), "--served-model-name", SERVICE,
        "--port", str(leader["apiPort"]), "--tensor-parallel-size", str(group.plan["tensorParallelSize"]),
        "--gpu-memory-utilization", str(member["memoryFraction"]), *(member["args"] if args is None else args),
    ]  # fmt: skip
    sim.docker(*run)
    return name


def replaced(args: list[str], flag: str, value: str) -> list[str]:
    """`args` with `flag`'s value replaced."""
    i = args.index(flag)
    return [*args[: i + 1], value, *args[i + 2 :]]


def served_models(group: Group) -> list[str]:
    """The model ids the leader's API lists (raises OSError while it does not answer)."""
    with urllib.request.urlopen(f"{group.leader_url}/v1/models", timeout=5) as response:
        return [m["id"] for m in json.loads(response.read())["data"]]


def listening(address: str, port: int) -> bool:
    """Whether a socket on this machine listens on exactly `address`:`port` (/proc/net/tcp)."""
    local = "{:02X}{:02X}{:02X}{:02X}:{:04X}".format(*reversed([int(b) for b in address.split(".")]), port)
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return any(f.split()[1] == local and f.split()[3] == "0A" for f in lines)
