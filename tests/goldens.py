"""Every output of the plan for a set of fleets: the committed stacks and fleets that use every
service, replica and router feature. `tests/test_goldens.py` compares them with the files under
`tests/data/goldens/`, written by `python -m tests.goldens` from the code before the replica model,
so a refactor that changes one byte a consumer reads shows up as a failing test.
`python -m tests.goldens host-checks` writes `host_checks.json`, every host's check script, from
the code before the host requirements table (records/host_requirements.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from allocation.config import parse_fleet
from records.host_check import host_check_script
from views.report import render_plan
from cli.pin import stack_pins
from cli.stackfile import load_fleet
from views.exports import dashboard, prometheus
from views.exports.render import render
from tests.support.stacks import host, service
from tests.support.pipeline import deployment_of

GOLDENS = Path(__file__).parent / "data" / "goldens"
STACKS = ("prod", "staging", "dev")
PROFILE = {"weightBytes": 2 << 30, "numHiddenLayers": 24, "numKeyValueHeads": 8, "headDim": 128}


def _synthetic() -> dict[str, dict[str, Any]]:
    hosts = [host("npu-a"), host("npu-b", reservedPorts=[{"first": 8000, "last": 8001}]), host("npu-c", npus=4)]
    return {
        "replicated": {
            "hosts": hosts,
            "defaults": {"image": "quay.io/ascend/vllm-ascend:v0.11.0", "ipcMode": "host", "restart": "always"},
            "services": [
                service("bge", 1, 0.1, replicas=3, previousNames=["embed"], maxModelLen=8192,
                        replicaPins=[{"host": "npu-b", "devices": [3], "apiPort": 9100}],
                        router={"host": "npu-c", "baseImage": "quay.io/ascend/vllm-ascend:v0.10.0"},
                        routerMetricsPort=9300),
                service("chat", 2, 0.5, replicas=2, servedModelName="chat-model", startTimeoutSeconds=600,
                        args=["--enable-prefix-caching"], router={"policy": "power_of_two", "requestTimeoutSeconds": 60},
                        routerPort=9400),
                service("solo", 1, 0.3, host="npu-a", devices=[3], stopGraceSeconds=0, ipcMode="private",
                        shmSizeMiB=128, logOpts={"max-size": "10m"}),
                service("mc2", 4, 0.8, hcclPortRanges=False, allDevices=True, env={"X": "1"},
                        mounts=[{"source": "/data", "target": "/data"}]),
            ],
        },  # fmt: skip
        "shared": {
            "hosts": [host("npu-a", cardSharing="privileged"), host("npu-b")],
            "defaults": {"vllmAscendVersion": "0.14.0", "startTimeoutSeconds": 900},
            "services": [
                service("a", 1, 0.3, host="npu-a", devices=[0], maxModelLen=4096, profile=PROFILE),
                service("b", 1, 0.3, host="npu-a", devices=[0], image="quay.io/ascend/vllm-ascend:v0.16.0"),
                service("c", 1, 0.3, host="npu-a", devices=[0], vllmAscendVersion="0.18.0"),
                {**service("d", 1, 0.5, maxModelLen=4096, maxNumSeqs=2, profile=PROFILE), "memoryFraction": "auto"},
                {**service("e", 1, 0.5, replicas=2, maxModelLen=4096, profile=PROFILE), "memoryFraction": "auto"},
            ],
        },
    }


def fleets() -> dict[str, Any]:
    out = {stack: load_fleet(stack)[0] for stack in STACKS}
    return out | {name: parse_fleet("golden", values) for name, values in _synthetic().items()}


def outputs(fleet: Any) -> dict[str, Any]:
    """Every text a consumer reads from the plan of `fleet`."""
    deployment = deployment_of(fleet)
    return {
        "warnings": list(deployment.plan.warnings),
        "notes": list(deployment.plan.notes),
        "json": render_plan(deployment, "json"),
        "table": render_plan(deployment, "table"),
        "markdown": render_plan(deployment, "markdown"),
        "pins": stack_pins(deployment.plan),
        "compose": render(deployment, "compose"),
        "docker-run": render(deployment, "docker-run"),
        "prometheus": prometheus.files(deployment),
        "dashboard": dashboard.render(deployment),
    }


HOST_CHECKS = GOLDENS / "host_checks.json"
ROOT = "/srv/it's a root"
"""A stand-in root with a space and a quote, for the scripts' quoting."""


def host_checks() -> dict[str, str]:
    """Every host's check script of every fleet: as deployed, and with a stand-in root and no
    containers (the checks every host gets whatever runs on it)."""
    out = {}
    for name, fleet in fleets().items():
        for hd in deployment_of(fleet).hosts:
            out[f"{name}/{hd.name}"] = hd.check_script
            out[f"{name}/{hd.name} root, no containers"] = host_check_script(hd.host, [], root=ROOT)
    return out


def main() -> int:
    if sys.argv[1:] == ["host-checks"]:
        HOST_CHECKS.write_text(json.dumps(host_checks(), indent=1, sort_keys=True) + "\n")
        print(f"wrote {HOST_CHECKS}")
        return 0
    for name, fleet in fleets().items():
        text = json.dumps(outputs(fleet), indent=1, sort_keys=True) + "\n"
        (GOLDENS / f"{name}.json").write_text(text)
        print(f"wrote {GOLDENS / name}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
