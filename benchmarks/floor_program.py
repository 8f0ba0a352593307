"""The SDK's floor for the program bench: the same hosts and containers, and nothing else.

One docker provider per host of the stack's `ascend-fleet:hosts` and one bare `docker.Container`
(name and image) per service of `ascend-fleet:services`, with no config parsing, planning,
records, components, dependencies or exports. What any program that registers these resources
pays the SDK; `benchmarks/program_bench.py` prints the real program's time as a multiple of it.
"""

import asyncio
import gc
import json

import pulumi
import pulumi_docker as docker

gc.set_threshold(100_000, 20, 10)  # as __main__.py: the floor gets the program's two SDK tunings


async def main() -> None:
    config = pulumi.Config("ascend-fleet")
    hosts = json.loads(config.require("hosts"))
    services = json.loads(config.require("services"))
    providers = [docker.Provider(h["name"], host=f"ssh://root@{h['address']}") for h in hosts]
    for i, s in enumerate(services):
        provider = providers[i * len(providers) // len(services)]
        opts = pulumi.ResourceOptions(provider=provider)
        docker.Container(s["name"], name=s["name"], image="vllm-ascend", opts=opts)
    await asyncio.sleep(0)


pulumi.run(main)
