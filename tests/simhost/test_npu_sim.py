"""The npu-sim image behaves like quay.io/ascend/vllm-ascend as far as layout goes."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sim.host import CLAIMS_DIR, ContainerFailed, SimHost
from tests.simhost.loads import stretched_loads

# The simulator's own test: `make test` leaves it out (pytest.ini, marker `simulator`).
pytestmark = pytest.mark.simulator


def test_npu_sim_serves_health_and_the_served_model_name_on_the_published_port(sim_host: SimHost) -> None:
    model = sim_host.make_model("bge-m3")
    svc = sim_host.start_service(
        "bge-m3", model=model, cards=[0], port=7007, gpu_memory_utilization=0.1, extra_args=["--max-model-len", "8192"]
    )
    sim_host.wait_healthy(svc.name)

    assert sim_host.http_get(svc, "/health")[0] == 200
    status, body = sim_host.http_get(svc, "/v1/models")
    assert status == 200
    models = json.loads(body)
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["bge-m3"]
    assert models["data"][0]["object"] == "model"
    assert "Starting vLLM API server on http://0.0.0.0:7007" in sim_host.logs(svc.name)


def test_a_tensor_parallel_size_larger_than_the_visible_cards_fails_clearly(sim_host: SimHost) -> None:
    model = sim_host.make_model("qwen")
    sim_host.start_service("qwen-tp4-on-one-card", model=model, cards=[2], tp=4, port=9009)

    assert sim_host.wait_exit("qwen-tp4-on-one-card") == 1
    assert "tensor_parallel_size=4 but only 1 NPU(s) are visible" in sim_host.logs("qwen-tp4-on-one-card")


def test_visible_devices_index_the_mounted_cards_from_zero(sim_host: SimHost) -> None:
    model = sim_host.make_model("qwen")
    sim_host.start_service(
        "qwen-long", model=model, cards=[4, 5, 6, 7], port=6006, env={"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"}
    )
    sim_host.start_service(
        "qwen-physical-ids", model=model, cards=[4, 5], port=6007, env={"ASCEND_RT_VISIBLE_DEVICES": "4,5"}
    )

    sim_host.wait_healthy("qwen-long")
    assert "physical cards: 4 5 6 7" in sim_host.logs("qwen-long")
    assert sorted(p.name for p in CLAIMS_DIR.glob("card*/port*")) == ["port16666"] * 4
    assert sim_host.wait_exit("qwen-physical-ids") == 1
    assert "Invalid device ID 4" in sim_host.logs("qwen-physical-ids")


def test_an_unmounted_model_directory_fails_like_vllm(sim_host: SimHost) -> None:
    model = sim_host.make_model("bge-m3")
    sim_host.start_service("no-model", model=model, cards=[1], port=8000, mount_model=False)

    assert sim_host.wait_exit("no-model") == 1
    assert f"Invalid repository ID or local directory specified: '{model}'" in sim_host.logs("no-model")


def test_docker_stop_releases_the_npu_port_claims(sim_host: SimHost) -> None:
    model = sim_host.make_model("bge-m3")
    sim_host.start_service("bge-m3", model=model, cards=[3], port=7007)
    sim_host.wait_healthy("bge-m3")
    assert (CLAIMS_DIR / "card3" / "port16666" / "owner").is_file()

    sim_host.docker("stop", "-t", "10", "bge-m3")

    assert sim_host.state("bge-m3")["ExitCode"] == 0
    assert not (CLAIMS_DIR / "card3" / "port16666").exists()


def test_a_killed_container_does_not_hold_its_card_port_forever(sim_host: SimHost) -> None:
    model = sim_host.make_model("bge-m3")
    sim_host.start_service("bge-m3", model=model, cards=[3], port=7007)
    sim_host.wait_healthy("bge-m3")
    sim_host.docker("rm", "-f", "bge-m3")  # SIGKILL: no chance to release the claim
    assert (CLAIMS_DIR / "card3" / "port16666").exists()

    sim_host.start_service("bge-m3-again", model=model, cards=[3], port=7007)

    sim_host.wait_healthy("bge-m3-again")


def test_wait_healthy_reports_the_logs_of_a_container_that_exited(sim_host: SimHost) -> None:
    model = sim_host.make_model("qwen")
    sim_host.start_service("too-wide", model=model, cards=[0], tp=2, port=9009)

    with pytest.raises(ContainerFailed, match="tensor_parallel_size=2"):
        sim_host.wait_healthy("too-wide", timeout=30)


# ---- a card shared between containers ---------------------------------------------------

TOTAL = 65452113920  # bytes of HBM the runtime reports for a 64 GB 910B (vllm-ascend issue 5917)


def owner(card: int, port: int) -> dict[str, str]:
    text = (CLAIMS_DIR / f"card{card}" / f"port{port}" / "owner").read_text()
    return dict(line.split("=", 1) for line in text.splitlines())


def test_a_card_held_by_another_container_refuses_a_second_one_with_dcmi_8005(sim_host: SimHost) -> None:
    model = sim_host.make_model("bge-m3")
    sim_host.start_service("holder", model=model, cards=[1], port=7007, gpu_memory_utilization=0.1)
    sim_host.wait_healthy("holder")

    sim_host.start_service(
        "second", model=model, cards=[1], port=7008, gpu_memory_utilization=0.1, env={"HCCL_NPU_SOCKET_PORT_RANGE": "16700"}
    )

    assert sim_host.wait_exit("second") == 1
    stderr = sim_host.docker("logs", "second").stderr
    assert "dcmi module initialize failed. ret is -8005\n" in stderr
    [error] = [line for line in stderr.splitlines() if "RuntimeError" in line]
    assert "physical card 1" in error and "holder" in error
    assert sim_host.state("holder")["Status"] == "running"
    assert owner(1, 16666)["privileged"] == "0"


def test_device_share_mode_lets_a_second_non_privileged_container_open_the_card(sim_host: SimHost) -> None:
    model = sim_host.make_model("bge-m3")
    sim_host.set_device_share(1)
    sim_host.start_service("first", model=model, cards=[1], port=7007, gpu_memory_utilization=0.1)
    sim_host.wait_healthy("first")
    sim_host.start_service(
        "second", model=model, cards=[1], port=7008, gpu_memory_utilization=0.1, env={"HCCL_NPU_SOCKET_PORT_RANGE": "16700"}
    )

    sim_host.wait_healthy("second")


def privileged(sim_host: SimHost, model: Path) -> tuple[bool, dict[str, str]]:
    """`privileged` and `env` for start_service to make a privileged container. A daemon that
    lacks a capability itself (some sandboxes) cannot start one: then the sim reads the CapEff
    line docker gives privileged containers (the full set) from a file beside the model."""
    if sim_host.privileged_containers_run():
        return True, {}
    status = model / "privileged-status"
    status.write_text("CapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n")
    return False, {"NPU_SIM_PROC_STATUS": str(status)}


def test_privileged_containers_share_a_card_without_device_share_and_then_clash_on_the_hccl_port(
    sim_host: SimHost,
) -> None:
    model = sim_host.make_model("bge-m3")
    priv, env = privileged(sim_host, model)
    sim_host.start_service("first", model=model, cards=[1], port=7007, gpu_memory_utilization=0.1, env=env, privileged=priv)
    sim_host.wait_healthy("first")
    sim_host.start_service(
        "second", model=model, cards=[1], port=7008, gpu_memory_utilization=0.1,
        env={**env, "HCCL_NPU_SOCKET_PORT_RANGE": "16700"}, privileged=priv,
    )  # fmt: skip
    sim_host.wait_healthy("second")
    assert owner(1, 16666)["privileged"] == "1"

    # The seed's layout: privileged containers on card 0, both on the default port.
    sim_host.start_service(
        "seed-like", model=model, cards=[1], port=7009, gpu_memory_utilization=0.1, env=env, privileged=priv
    )

    assert sim_host.wait_exit("seed-like") == 1
    assert "[ERROR] HCCL: Socket bind failed, address already in use" in sim_host.logs("seed-like")


def vllm_gib(n: float) -> float:
    """vllm-ascend worker.py: GiB = lambda b: round(b / GiB_bytes, 2)."""
    return round(n / (1 << 30), 2)


def test_a_card_without_the_requested_free_hbm_fails_with_vllms_startup_memory_error(sim_host: SimHost) -> None:
    model = sim_host.make_model("Qwen3.6-27B-W8A8")
    sim_host.set_device_share(2)
    sim_host.start_service("first", model=model, cards=[2], port=8000, gpu_memory_utilization=0.95)
    sim_host.wait_healthy("first")

    sim_host.start_service(
        "second", model=model, cards=[2], port=8001, gpu_memory_utilization=0.1, env={"HCCL_NPU_SOCKET_PORT_RANGE": "16667"}
    )
    sim_host.start_service(
        "fits-exactly", model=model, cards=[2], port=8002, gpu_memory_utilization=0.05,
        env={"HCCL_NPU_SOCKET_PORT_RANGE": "16668"},
    )  # fmt: skip

    assert sim_host.wait_exit("second") == 1
    free = TOTAL - round(0.95 * TOTAL)
    expected = (
        f"ValueError: Free memory on device ({vllm_gib(free)}/{vllm_gib(TOTAL)} GiB) on startup is less than "
        f"desired GPU memory utilization (0.1, {vllm_gib(0.1 * TOTAL)} GiB). Decrease GPU memory utilization "
        "or reduce GPU memory used by other processes."
    )
    assert expected == (
        "ValueError: Free memory on device (3.05/60.96 GiB) on startup is less than desired GPU memory "
        "utilization (0.1, 6.1 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
    )
    assert sim_host.logs("second").rstrip("\n").endswith(expected)
    sim_host.wait_healthy("fits-exactly")
    assert owner(2, 16666)["mem_bytes"] == str(round(0.95 * TOTAL))
    assert owner(2, 16666)["mem_mb"] == "59299"


def test_an_instance_started_while_another_loads_on_the_card_finds_no_memory_for_its_cache(sim_host: SimHost) -> None:
    model = sim_host.make_model("Qwen3.6-27B-W8A8")
    sim_host.set_device_share(5)
    with stretched_loads("loading"):
        sim_host.start_service("loading", model=model, cards=[5], port=8000, gpu_memory_utilization=0.4)
        deadline = time.monotonic() + 60
        while not (CLAIMS_DIR / "card5" / "port16666" / "owner").is_file():
            assert time.monotonic() < deadline, sim_host.logs("loading")
            time.sleep(0.2)
        assert owner(5, 16666)["state"] == "loading"

        sim_host.start_service(
            "too-early", model=model, cards=[5], port=8001, gpu_memory_utilization=0.4, env={"HCCL_NPU_SOCKET_PORT_RANGE": "16667"}
        )

        assert sim_host.wait_exit("too-early") == 1
    logs = sim_host.logs("too-early")
    assert "[worker_v1.py] Available memory: 0, total memory: 65452113920" in logs
    assert logs.rstrip("\n").endswith(
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
        "when initializing the engine."
    )
    sim_host.wait_healthy("loading")
    assert owner(5, 16666)["state"] == "ready"
    sim_host.start_service(
        "after-it", model=model, cards=[5], port=8002, gpu_memory_utilization=0.4, env={"HCCL_NPU_SOCKET_PORT_RANGE": "16668"}
    )
    sim_host.wait_healthy("after-it")


def test_of_containers_started_together_on_one_card_exactly_one_gets_it(sim_host: SimHost) -> None:
    model = sim_host.make_model("bge-m3")
    # A claim left by a killed container: each racer spends a second finding it dead, as
    # containers do when dockerd starts them all after a crash.
    sim_host.start_service("crashed", model=model, cards=[6], port=7000, gpu_memory_utilization=0.1)
    sim_host.wait_healthy("crashed")
    sim_host.docker("rm", "-f", "crashed")
    names = [f"racer-{i}" for i in range(4)]

    def start(i: int) -> None:
        sim_host.start_service(
            names[i], model=model, cards=[6], port=7007 + i, gpu_memory_utilization=0.1,
            env={"HCCL_NPU_SOCKET_PORT_RANGE": str(16666 + i)},
        )  # fmt: skip

    with ThreadPoolExecutor(len(names)) as pool:
        list(pool.map(start, range(len(names))))

    outcomes = []
    for name in names:
        try:
            sim_host.wait_healthy(name, timeout=60)
            outcomes.append("healthy")
        except ContainerFailed as failed:
            assert "dcmi module initialize failed. ret is -8005" in str(failed)
            outcomes.append("-8005")
    assert sorted(outcomes) == ["-8005", "-8005", "-8005", "healthy"]
