"""The seed's incident, reproduced: services sharing a card clash on HCCL's NPU-side port."""

from __future__ import annotations

from sim.host import CLAIMS_DIR, SimHost

QWEN_ARGS = ["--quantization", "ascend", "--max-model-len", "25000", "--max-num-seqs", "10", "--trust-remote-code"]


def test_the_seeds_naive_layout_fails_with_an_hccl_socket_bind_error(sim_host: SimHost) -> None:
    # The seed's containers could share card 0 (they were privileged; here: device-share mode),
    # and then both ranks on card 0 bind HCCL's default NPU port.
    sim_host.set_device_share(0)
    bge = sim_host.make_model("bge-m3")
    qwen = sim_host.make_model("Qwen3.6-27B-W8A8")
    sim_host.start_service("bge-m3", model=bge, cards=[0], port=7007, gpu_memory_utilization=0.1)
    sim_host.wait_healthy("bge-m3")

    sim_host.start_service(
        "qwen-vl", model=qwen, cards=[0, 1, 2, 3], port=9009, gpu_memory_utilization=0.85, extra_args=QWEN_ARGS
    )

    assert sim_host.wait_exit("qwen-vl") != 0
    logs = sim_host.logs("qwen-vl")
    assert "[ERROR] HCCL: Socket bind failed, address already in use" in logs
    assert "Failed to create communicator" in logs
    assert "physical card 0" in logs
    assert sim_host.state("bge-m3")["Status"] == "running"


def test_distinct_npu_port_ranges_let_two_services_share_a_card(sim_host: SimHost) -> None:
    sim_host.set_device_share(0)
    bge = sim_host.make_model("bge-m3")
    qwen = sim_host.make_model("Qwen3.6-27B-W8A8")
    sim_host.start_service(
        "bge-m3", model=bge, cards=[0], port=7007, gpu_memory_utilization=0.1,
        env={"HCCL_NPU_SOCKET_PORT_RANGE": "16666-16681", "ASCEND_RT_VISIBLE_DEVICES": "0"},
    )  # fmt: skip
    sim_host.wait_healthy("bge-m3")
    sim_host.start_service(
        "qwen-vl", model=qwen, cards=[0, 1, 2, 3], port=9009, gpu_memory_utilization=0.85, extra_args=QWEN_ARGS,
        env={"HCCL_NPU_SOCKET_PORT_RANGE": "16682-16697", "ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"},
    )  # fmt: skip

    sim_host.wait_healthy("qwen-vl")
    assert sorted(p.name for p in (CLAIMS_DIR / "card0").iterdir()) == ["port16666", "port16682"]


def test_services_on_different_cards_do_not_clash_on_the_default_port(sim_host: SimHost) -> None:
    qwen = sim_host.make_model("Qwen3.6-27B-W8A8")
    sim_host.start_service("qwen-vl", model=qwen, cards=[0, 1, 2, 3], port=9009, gpu_memory_utilization=0.85)
    sim_host.start_service("qwen-long", model=qwen, cards=[4, 5, 6, 7], port=6006, gpu_memory_utilization=0.9)

    sim_host.wait_healthy("qwen-vl")
    sim_host.wait_healthy("qwen-long")


def test_services_sharing_a_card_cannot_take_more_than_its_memory(sim_host: SimHost) -> None:
    sim_host.set_device_share(2)
    model = sim_host.make_model("Qwen3.6-27B-W8A8")
    sim_host.start_service(
        "first", model=model, cards=[2], port=8000, gpu_memory_utilization=0.6, env={"HCCL_NPU_SOCKET_PORT_RANGE": "16666"}
    )
    sim_host.wait_healthy("first")
    sim_host.start_service(
        "second", model=model, cards=[2], port=8001, gpu_memory_utilization=0.5, env={"HCCL_NPU_SOCKET_PORT_RANGE": "16667"}
    )

    assert sim_host.wait_exit("second") == 1
    # vLLM-Ascend >= v0.15 checks free HBM against fraction x total before it loads.
    assert "is less than desired GPU memory utilization (0.5" in sim_host.logs("second")
