"""The SDK's floor as the issue first measured it: bare containers in a top-level program, as the
SDK's examples write one (no providers, no collector tuning, nothing awaited). Registering from
module code makes the SDK wait on every pending output at once, so this floor grows faster than
linearly; `floor_program.py` is the tuned floor the ratio should be read against."""

import json

import pulumi
import pulumi_docker as docker

for s in json.loads(pulumi.Config("ascend-fleet").require("services")):
    docker.Container(s["name"], name=s["name"], image="vllm-ascend")
