"""The npu-sim image behaves like quay.io/ascend/vllm-ascend as far as layout goes."""

from __future__ import annotations

import json

import pytest

from sim.host import CLAIMS_DIR, ContainerFailed, SimHost


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
