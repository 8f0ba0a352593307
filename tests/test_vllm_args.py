"""A service's `args` read as vLLM's FlexibleArgumentParser reads them, by every part of the plan that
looks at them: the capacity check, the router policy, the graph pool, `profile` and the diff."""

from __future__ import annotations

import json

import pytest

from allocation.config import Defaults, Service
from allocation.errors import ConfigError
from allocation.kv_cache import engine_of
from allocation.planner import plan_fleet
from allocation.resolved import resolve
from allocation.vllm_args import ArgsError, VllmArgs, read_args, spelled
from cli.main import main
from tests.support.stacks import fleet, host, service
from tests.support.profiles import profiled
from tests.support.profiles import QWEN3, model, profile, replicated_stack, services_of
from tests.support.plan_documents import by_name
from tests.support.plan_documents import fleet as planned_fleet
from tests.support.replicas import bge, fleet_of, router_of
from allocation.kv_cache import prefix_caching
from views.diff import diff_plans
from tests.support.pipeline import plan_json_of


@pytest.mark.parametrize("word, as_vllm", [
    ("--enable_prefix_caching", "--enable-prefix-caching"),
    ("--kv_cache_dtype=fp8_e4m3", "--kv-cache-dtype=fp8_e4m3"),
    ("--speculative_config.num_speculative_tokens", "--speculative-config.num_speculative_tokens"),
    ("--dtype=a_b", "--dtype=a_b"),
    ("fp8_e5m2", "fp8_e5m2"),
    ("-tp", "-tp"),
])  # fmt: skip
def test_underscores_of_an_option_name_up_to_its_first_dot_are_dashes_and_values_stay(word, as_vllm):
    assert spelled(word) == as_vllm


def test_both_spellings_both_value_forms_and_the_last_of_a_repeated_option_win():
    args = ["--block_size", "16", "--block-size=32", "--no_enable_prefix_caching", "--kv_cache_dtype", "fp8",
            "--enforce_eager", "--no-enforce-eager", "--dtype=float16", "--enable_chunked_prefill"]  # fmt: skip
    assert read_args(args) == VllmArgs(
        prefix_caching=False, chunked_prefill=True, enforce_eager=False, block_size=32, dtype="float16",
        kv_cache_dtype="fp8",
    )  # fmt: skip


def test_python_int_reads_the_block_size_so_other_decimal_digits_count_and_none_unsets_it():
    assert read_args(["--block-size", "١٦"]).block_size == 16  # Arabic-Indic digits: int() reads them
    assert read_args(["--block-size", " 1_6 "]).block_size == 16
    assert read_args(["--block-size", "16", "--block-size", "None"]).block_size is None


def test_dotted_speculative_keys_replace_the_json_wherever_it_stands():
    spec = json.dumps({"method": "mtp", "num_speculative_tokens": 3})
    assert read_args(["--speculative-config", spec]).speculative_tokens == 3
    assert read_args(["--speculative_config.num_speculative_tokens=2", "--speculative-config", spec]).speculative_tokens == 2
    assert read_args(["--speculative-config", spec, "--speculative-config", "None"]).speculative_tokens == 0


def test_the_batch_sizes_to_capture_come_from_compilation_config_or_their_own_options():
    sizes = json.dumps({"cudagraph_capture_sizes": [1, 2, 4], "mode": 3})
    assert read_args(["--compilation-config", sizes]) == VllmArgs(capture_sizes=(1, 2, 4))
    # dotted keys replace the JSON wherever it stands, as for --speculative-config
    assert read_args(["--compilation_config.max_cudagraph_capture_size=16", "--compilation-config", sizes]) == VllmArgs(
        max_capture_size=16
    )
    # a list option takes every word up to the next option (argparse's nargs="+"), int() reads each
    assert read_args(["--cudagraph-capture-sizes", "1", "٨", "--enforce-eager"]) == VllmArgs(capture_sizes=(1, 8), enforce_eager=True)
    assert read_args(["--cudagraph_capture_sizes=4", "--max-cudagraph-capture-size", "4"]) == VllmArgs(
        capture_sizes=(4,), max_capture_size=4
    )
    assert read_args(["--compilation-config", "None"]) == VllmArgs()


@pytest.mark.parametrize("args, words", [
    (["--block-size", "¹⁶"], ["--block-size", "int()"]),
    (["--block-size", "0"], ["--block-size", "1 to"]),
    (["--block-size"], ["--block-size", "needs a value"]),
    (["--block-size", "--enforce-eager"], ["--block-size", "needs a value"]),
    (["--speculative-config", "[" * 3000 + "]" * 1000], ["--speculative-config", "nests deeper"]),
    (["--speculative-config", '{"num_speculative_tokens": 1e400}'], ["num_speculative_tokens inf"]),
    (["--speculative-config", '{"num_speculative_tokens": [[[1]]]}'], ["a JSON list"]),
    (["--speculative-config", "{nope"], ["is not a JSON object"]),
    (["--enable-prefix-caching=false"], ["--enable-prefix-caching", "takes no value"]),
    (["--enforce_eager", "true"], ["--enforce-eager", "'true'"]),
    (["--enable-prefix", "--x"], ["abbreviation of --enable-prefix-caching"]),
    (["--block-size.x", "1"], ["takes no dotted keys"]),
    (["--cudagraph-capture-sizes", "--enforce-eager"], ["--cudagraph-capture-sizes", "at least one"]),
    (["--cudagraph-capture-sizes", "0"], ["--cudagraph-capture-sizes", "1 to"]),
    (["--max-cudagraph-capture-size", "x"], ["--max-cudagraph-capture-size", "int()"]),
    (["--compilation-config", '{"cudagraph_capture_sizes": 4}'], ["cudagraph_capture_sizes is a JSON int"]),
    (["--compilation-config.cudagraph_capture_sizes", "[true]"], ["--compilation-config.cudagraph_capture_sizes", "True"]),
    (["--compilation-config", "[" * 3000 + "]" * 1000], ["--compilation-config", "nests deeper"]),
    (["--cudagraph-capture-sizes", "1", "--compilation-config", '{"cudagraph_capture_sizes": [2]}'],
     ["--cudagraph-capture-sizes and --compilation-config's cudagraph_capture_sizes are mutually exclusive"]),
    (["--compilation-config.max_cudagraph_capture_size", "8", "--max-cudagraph-capture-size", "8"],
     ["--max-cudagraph-capture-size and --compilation-config's max_cudagraph_capture_size are mutually exclusive"]),
    (["--compilation", "{}"], ["abbreviation of --compilation-config"]),
])  # fmt: skip
def test_what_vllm_would_refuse_is_one_sentence_naming_the_option(args, words):
    with pytest.raises(ArgsError) as caught:
        read_args(args)
    assert all(w in str(caught.value) for w in words), str(caught.value)
    assert len(str(caught.value)) < 300 and "\n" not in str(caught.value)


def test_words_after_a_bare_double_dash_and_values_of_other_options_are_not_read():
    assert read_args(["--served-model-name-x", "--", "--block-size", "oops"]) == VllmArgs()
    assert read_args(["--chat-template", "x", "--block-size", "8"]).block_size == 8


# --- each reader --------------------------------------------------------------------------------


def test_the_capacity_check_reads_an_underscore_block_size_and_prefix_caching_flag():
    # Without prefix caching or chunked prefill vLLM keeps the block size it is given: 16, not 128.
    def blocks(args):
        (hp,) = plan_json_of(profiled(0.9, args=args))["hosts"]
        return hp["services"][0]["capacity"]

    dashed = blocks(["--no-enable-prefix-caching", "--no-enable-chunked-prefill", "--block-size", "16"])
    assert blocks(["--no_enable_prefix_caching", "--no_enable_chunked_prefill", "--block_size", "16"]) == dashed
    assert engine_of(["--no_enable_chunked_prefill", "--no_enable_prefix_caching", "--block_size=16"], (0, 20)).block_size == 16


def test_the_router_policy_reads_an_underscore_prefix_caching_flag():
    assert not prefix_caching(["--no_enable_prefix_caching"])
    _, rd = router_of(fleet_of(bge(args=["--no_enable_prefix_caching"])))
    assert rd.spec.command[rd.spec.command.index("--policy") + 1] == "round_robin"


def test_the_graph_pool_reads_an_underscore_enforce_eager():
    def captures(args, defaults=()):
        return resolve(Service(name="s", model="/m", args=list(args)), Defaults(args=list(defaults))).captures_graphs

    assert not captures(["--enforce_eager"]) and captures(["--no_enforce_eager"], defaults=["--enforce-eager"])


def test_profile_reads_an_underscore_kv_cache_dtype(tmp_path, capsys):
    root = tmp_path / "copy"
    model(root / "disk2", "qwen", QWEN3, index_total=2**30)
    path = replicated_stack(tmp_path, args='      args: ["--kv_cache_dtype", "fp8"]\n')
    assert profile(path, root, capsys)[0] == 0
    assert services_of(path)["qwen"]["profile"]["kvCacheDtype"] == "float8"


def test_the_diff_compares_an_option_under_either_spelling():
    old, new = planned_fleet(), planned_fleet()
    old["hosts"][0]["services"][0]["container"]["command"] += ["--block_size", "16"]
    new["hosts"][0]["services"][0]["container"]["command"] += ["--block-size", "32"]
    assert by_name(diff_plans(old, new))["bge-m3"].restart_reasons == ("--block-size 16 -> 32",)
    new["hosts"][0]["services"][0]["container"]["command"][-1] = "16"
    bge_m3 = by_name(diff_plans(old, new))["bge-m3"]
    assert bge_m3.restart_reasons == ("command arguments respelled (vLLM reads them the same)",) and bge_m3.recreated


# --- hostile values reach the operator as one paragraph ------------------------------------------


@pytest.mark.parametrize("args, words", [
    (["--block-size", "¹⁶"], ["service chat", "--block-size '¹⁶'"]),
    (["--speculative-config", "[" * 2000 + "]" * 2000], ["service chat", "--speculative-config", "nests deeper"]),
    (["--enforce-eager=1"], ["service chat", "--enforce-eager"]),
])  # fmt: skip
def test_args_vllm_would_refuse_stop_the_config_with_the_service_and_the_option(args, words):
    with pytest.raises(ConfigError) as caught:
        profiled(0.9, args=args)
    assert all(w in str(caught.value) for w in words), str(caught.value)


def test_plan_prints_one_paragraph_for_a_superscript_block_size_never_a_traceback(tmp_path, capsys):
    path = tmp_path / "Pulumi.test.yaml"
    path.write_text(
        "config:\n  ascend-fleet:hosts:\n    - name: npu-a\n      address: 192.0.2.1\n"
        "  ascend-fleet:services:\n    - name: chat\n      model: /m\n      tensorParallelSize: 1\n"
        '      memoryFraction: 0.5\n      args: ["--block-size", "¹⁶", "--speculative-config", "'
        + "[" * 1500 + "]" * 1500 + '"]\n',
        encoding="utf-8",
    )
    assert main(["plan", "--config", str(path)]) != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "unexpected" not in err and "service chat: args: --block-size" in err, err


def test_a_service_without_args_vllm_refuses_plans_as_before():
    assert plan_fleet(fleet([host()], [service("chat", args=["--block-size", "١٦"])])).hosts
