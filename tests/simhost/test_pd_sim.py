"""Prefill and decode apart on the simulated host: the npu-sim stand-in plays vllm-ascend v0.20.2rc1's
Mooncake connector (sim/npu-sim/kv.sh, kv-session, kv-pull.sh, api) behind vllm-ascend's own proxy example
(sim/pd_proxy_image.py); sim/README.md "Prefill and decode".

The 1P1D example (examples/Pulumi.pd-1p1d.yaml on the simulated host, tests/support/sim_pd.py) is
started from the plan JSON: each instance with its planned `--kv-transfer-config`, the proxy with its
planned `args`, all `docker run --network host`. Every wait is for a condition, with a generous bound;
a failure shows the containers' logs.
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest

from sim.host import SimHost
from tests.support.sim_groups import listening
from tests.support.sim_pd import ANSWER, PROMPT, PdService, complete, free_block, planned_pd, proxy_health, start_instance, start_proxy
from tests.support.waits import wait_for


@pytest.fixture
def pd(sim_host: SimHost, tmp_path: Path) -> PdService:
    return planned_pd(sim_host, tmp_path)


def logs(sim: SimHost, *names: str) -> str:
    return "\n".join(f"--- {n}:\n{sim.logs(n)}" for n in names)


def wait_serving(sim: SimHost, *names: str) -> None:
    for name in names:
        wait_for(f"{name} to serve", lambda n=name: "Application startup complete." in sim.logs(n), detail=lambda: logs(sim, *names))


def wait_stopped(sim: SimHost, name: str) -> str:
    wait_for(f"{name} to stop", lambda: sim.state(name)["Status"] == "exited", detail=lambda: logs(sim, name))
    return sim.logs(name)


def serve(sim: SimHost, pd: PdService, **decode) -> tuple[str, str, str]:
    """Prefill, decode (started with `decode`'s replacements) and the proxy, once both instances serve."""
    prefill = start_instance(sim, pd, pd.prefill)
    decoder = start_instance(sim, pd, pd.decode, **decode)
    wait_serving(sim, prefill, decoder)
    proxy = start_proxy(sim, pd)
    wait_for("the proxy to answer", lambda: proxy_health(pd)["status"] == "ok", detail=lambda: logs(sim, proxy))
    return prefill, decoder, proxy


def with_kv(instance: dict, **changes) -> dict:
    """The instance's planned kvTransferConfig with `changes`."""
    return {**instance["kvTransferConfig"], **changes}


def test_a_request_through_the_proxy_is_prefilled_then_decoded_from_the_prefillers_kv_port_block(sim_host, pd):
    prefill, decoder, proxy = serve(sim_host, pd)
    # The producer's workers listen on kv_port + TP rank at the host's address; the consumer binds none.
    first, last = pd.prefill["kvPortBlock"]
    assert all(listening(pd.address, port) for port in range(first, last + 1)), logs(sim_host, prefill)
    assert not any(listening(pd.address, port) for port in range(pd.decode["kvPort"], pd.decode["kvPort"] + 4))
    status, body = complete(pd, PROMPT, 6)
    assert status == 200, logs(sim_host, prefill, decoder, proxy)
    assert json.loads(body)["choices"][0]["text"] == ANSWER
    # Every decode rank pulled over a connection to its prefill rank's port.
    pulled = re.findall(r"KV cache transfer for request (\S+) took .* local_device_id (\d) remote_session_id (\S+):", sim_host.logs(decoder))
    assert sorted(rank for _, rank, _ in pulled) == ["0", "1", "2", "3"], logs(sim_host, decoder)
    assert {host for _, _, host in pulled} == {pd.address}
    [request] = {r for r, _, _ in pulled}
    assert f"Delaying free of 1 blocks for request {request}" in sim_host.logs(prefill)
    assert sim_host.docker("exec", prefill, "find", "/tmp/npu-sim-kv", "-type", "f").stdout == ""  # freed


def test_a_kv_port_taken_on_the_host_stops_the_prefiller_with_the_connectors_words(sim_host, pd):
    first, last = pd.prefill["kvPortBlock"]
    with socket.socket() as held:
        held.bind((pd.address, first + 2))
        held.listen()
        prefill = start_instance(sim_host, pd, pd.prefill)
        log = wait_stopped(sim_host, prefill)
    path = f"tcp://{pd.address}:{first + 2}"
    assert f"Mooncake KVCacheSendingThread exception: Address already in use (addr='{path}')" in log
    assert "RuntimeError: KV Cache sending/receiving thread failed to start." in log
    assert sim_host.state(prefill)["ExitCode"] == 1


def test_a_decoder_with_the_prefillers_engine_id_fails_each_request_with_conflict_engine_id(sim_host, pd):
    engine = pd.prefill["engineId"]
    prefill, decoder, proxy = serve(sim_host, pd, kv_config=with_kv(pd.decode, engine_id=engine))
    status, body = complete(pd, PROMPT, 6)
    assert ANSWER not in body
    log = sim_host.logs(decoder)
    assert f"AssertionError: Conflict engine id {engine} with local engine id {engine}." in log, logs(sim_host, decoder, proxy)
    assert "failed with an internal error during generation" in log
    assert "Error during streaming from decoder" in sim_host.logs(proxy)  # the example's words for it


def test_a_kv_port_in_ascend_direct_transports_random_range_starts_and_fails_the_first_transfer(sim_host, pd):
    # The planner refuses such a kvPort (tests/test_disaggregated.py); the instance is given one by hand.
    kv_port = free_block(21000, 4, set())
    prefill = start_instance(sim_host, pd, pd.prefill, kv_config=with_kv(pd.prefill, kv_port=kv_port))
    decoder = start_instance(sim_host, pd, pd.decode)
    wait_serving(sim_host, prefill, decoder)  # nothing fails at start
    proxy = start_proxy(sim_host, pd)
    wait_for("the proxy to answer", lambda: proxy_health(pd)["status"] == "ok", detail=lambda: logs(sim_host, proxy))
    status, body = complete(pd, PROMPT, 6)
    assert ANSWER not in body
    log = sim_host.logs(decoder)
    assert "RuntimeError: Mooncake transfer failed, ret: -1" in log, logs(sim_host, decoder, proxy)
    taken = re.findall(r"AscendDirectTransport took port (\d+) at random in \[20000, 28000\)", log)
    assert taken and all(kv_port <= int(port) < kv_port + 4 for port in taken)  # the proxy retries: one per try


def test_a_decoder_without_hccn_conf_starts_and_answers_wrong(sim_host, pd):
    prefill, decoder, proxy = serve(sim_host, pd, hccn_conf=False)
    status, body = complete(pd, PROMPT, 6)
    assert status == 200, logs(sim_host, decoder, proxy)
    text = json.loads(body)["choices"][0]["text"]
    assert text != ANSWER and len(set(text.split())) == 1  # a wrong token, repeated (vllm-ascend issue 7711)
    assert "ERROR" not in sim_host.logs(decoder)  # vLLM's log says nothing; HCCL's plog does
    plog = sim_host.docker("exec", decoder, "sh", "-c", "cat /root/ascend/log/debug/plog/*").stdout
    assert "[RanktablCheck] 'device ip' is not set correctly" in plog
