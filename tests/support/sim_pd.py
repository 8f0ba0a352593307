"""A disaggregated service on the simulated host, started from the plan JSON.

The stack is examples/Pulumi.pd-1p1d.yaml adapted to the simulated host: its host is the `SimHost`, its
image `ascend-fleet/npu-sim-pd` (the npu-sim stand-in plus vllm-ascend's own proxy example,
sim/pd_proxy_image.py), its model a folder made there, each instance's API port, `kvPort` and the
proxy's port pinned free on this machine, the prefill on cards 0-3 and the decode on 4-7 as in the
example. `python -m allocation plan --format json` gives each instance its cards, windows and
`kvTransferConfig` (exactly its `--kv-transfer-config`), and the proxy its `args`; each is started as its
host would run it, `docker run --network host` (the tutorials' `docker run --net=host`), an instance
with `/etc/hccn.conf` mounted read-only (vllm-ascend issue 7711), the proxy from the service's image
(`python3 /vllm-workspace/vllm-ascend/examples/.../load_balance_proxy_server_example.py`).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from sim.containers import mounts
from sim.host import SimHost
from sim.pd_proxy_image import PD_IMAGE, PROXY_SCRIPT, build_pd_image
from tests.support.rolling import LOCAL_DOCKER
from tests.support.sim_groups import free_port_outside_ephemeral, plan_json, port_free, window_env

SERVICE = "qwen-pd"
SERVED = "qwen3-32b"
HCCN_CONF = "/etc/hccn.conf"
PROMPT = "the quick brown fox"
ANSWER = " the quick brown fox the quick"
"""The stand-in's model continues a prompt with its own words: 6 tokens of PROMPT."""


def free_block(start: int, size: int, taken: set[int]) -> int:
    """The first port from `start` whose block of `size` ports no socket holds here (then taken)."""
    port = start
    while any(p in taken or not port_free(p) for p in range(port, port + size)):
        port += 1
    taken.update(range(port, port + size))
    return port


@dataclass(frozen=True)
class PdService:
    """The planned service: the plan JSON's `disaggregated[]` entry, and where it runs."""

    plan: dict
    address: str
    """The simulated host's address, where the instances and the proxy listen."""
    model: Path
    hccn_conf: Path
    """A host file mounted at /etc/hccn.conf."""

    @property
    def prefill(self) -> dict:
        return self.plan["prefill"][0]

    @property
    def decode(self) -> dict:
        return self.plan["decode"][0]

    @property
    def proxy_url(self) -> str:
        return f"http://{self.address}:{self.plan['proxy']['proxyPort']}"


def planned_pd(sim: SimHost, tmp_path: Path) -> PdService:
    """Build the image and plan the 1P1D stack on the simulated host."""
    build_pd_image(LOCAL_DOCKER)
    model = sim.make_model(f"{SERVICE}-model")
    taken: set[int] = set()

    def pins(devices: list[int], kv_port: int) -> dict:
        return {"devices": devices, "apiPort": free_port_outside_ephemeral(18000, taken), "kvPort": kv_port}

    values = {
        "hosts": [{"name": "npu-a", "address": sim.address, "sshPort": sim.ssh_port}],
        "defaults": {"image": PD_IMAGE, "vllmAscendVersion": "0.20.2rc1"},
        "services": [{
            "name": SERVICE, "model": str(model), "servedModelName": SERVED,
            "disaggregated": {
                "prefill": {"tensorParallelSize": 4, "memoryFraction": 0.9, "replicaPins": [pins([0, 1, 2, 3], free_block(28000, 4, taken))]},
                "decode": {"tensorParallelSize": 4, "memoryFraction": 0.9,
                           "replicaPins": [pins([4, 5, 6, 7], free_block(28100, 4, taken))]},
                "connector": {"name": "MooncakeConnectorV1"},
                "proxy": {"proxyPort": free_port_outside_ephemeral(18100, taken)},
            },
        }],
    }  # fmt: skip
    [service] = plan_json(tmp_path / "Pulumi.pd-on-sim.yaml", values)["disaggregated"]
    hccn_conf = tmp_path / "hccn.conf"
    hccn_conf.write_text("address_0=192.168.100.100\nnetmask_0=255.255.255.0\n")  # hccn_tool's keys
    return PdService(service, sim.address, model, hccn_conf)


def start_instance(
    sim: SimHost, pd: PdService, instance: dict, *, name: str | None = None, kv_config: dict | None = None,
    hccn_conf: bool = True,
) -> str:  # fmt: skip
    """`docker run --network host` a prefill or decode instance as planned, but for what the keyword
    arguments replace; its container name."""
    name = name or instance["name"]
    run = ["run", "-d", "--name", name, "--network", "host"]
    for key, value in sim.labels().items():
        run += ["--label", f"{key}={value}"]
    run += mounts(instance["devices"], pd.model, mount_model=True)
    if hccn_conf:
        run += ["-v", f"{pd.hccn_conf}:{HCCN_CONF}:ro"]
    for key, value in {"NPU_SIM_LOAD_SECONDS": "0", **window_env(instance)}.items():
        run += ["-e", f"{key}={value}"]
    run += ["--health-cmd", f"wget -q -O /dev/null http://127.0.0.1:{instance['apiPort']}/health", "--health-interval", "500ms"]
    run += [
        PD_IMAGE, "vllm", "serve", str(pd.model), "--served-model-name", SERVED, "--port", str(instance["apiPort"]),
        "--tensor-parallel-size", str(instance["tensorParallelSize"]),
        "--gpu-memory-utilization", str(instance["gpuMemoryUtilization"]),
        "--kv-transfer-config", json.dumps(kv_config or instance["kvTransferConfig"], separators=(",", ":")),
    ]  # fmt: skip
    sim.docker(*run)
    return name


def start_proxy(sim: SimHost, pd: PdService) -> str:
    """`docker run --network host` the proxy from the service's image with the plan's `args`."""
    proxy = pd.plan["proxy"]
    run = ["run", "-d", "--name", proxy["name"], "--network", "host"]
    for key, value in sim.labels().items():
        run += ["--label", f"{key}={value}"]
    sim.docker(*run, PD_IMAGE, "python3", str(PROXY_SCRIPT), *proxy["args"])
    return proxy["name"]


def complete(pd: PdService, prompt: str, max_tokens: int) -> tuple[int, str]:
    """POST /v1/completions through the proxy: its status and body (an error status's body too)."""
    return complete_at(f"{pd.proxy_url}/v1", prompt, max_tokens)


def complete_at(endpoint: str, prompt: str, max_tokens: int) -> tuple[int, str]:
    """POST /completions at an OpenAI-compatible base URL (`http://host:port/v1`) for the served model: its
    status and body (an error status's body too)."""
    body = json.dumps({"model": SERVED, "prompt": prompt, "max_tokens": max_tokens}).encode()
    request = urllib.request.Request(
        f"{endpoint}/completions", data=body, headers={"Content-Type": "application/json"}
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def proxy_health(pd: PdService) -> dict:
    """The proxy's GET /healthcheck (raises OSError while it does not answer)."""
    with urllib.request.urlopen(f"{pd.proxy_url}/healthcheck", timeout=5) as response:
        return json.loads(response.read())
