"""A container's command read back into its parts (records.command): what the records render comes
back as the gate, the positional words and every option's values, for generated services and for
every command in the golden plans, which are the commands older revisions printed too."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from records.command import MANY_VALUES, START_GATE_NAME, behind_gate, parse_command
from records.containers import START_GATE
from records.rollout import LAUNCH
from tests.support.stacks import fleet, host, service
from tests.goldens import GOLDENS, fleets
from tests.support.pipeline import deployment_of

ROUTER_WORDS = ("sh", "-c", LAUNCH, "ascend-fleet-router", "vllm-router")

# --- examples ---------------------------------------------------------------------------------


def test_a_gated_command_gives_back_the_gate_script_and_the_vllm_command_it_runs():
    argv = behind_gate('exec "$@"', ["vllm", "serve", "/models/m", "--port", "8000", "--trust-remote-code"])
    command = parse_command(argv)
    assert command.gate == 'exec "$@"'
    assert command.runs == ("vllm", "serve", "/models/m", "--port", "8000", "--trust-remote-code")
    assert command.words == ("vllm", "serve", "/models/m")
    assert dict(command.options) == {"--port": ("8000",), "--trust-remote-code": (None,)}


def test_an_option_given_twice_keeps_both_values_in_order():
    command = parse_command(["vllm", "serve", "m", "--dtype", "half", "--x", "--dtype=bfloat16"])
    assert dict(command.options) == {"--dtype": ("half", "bfloat16"), "--x": (None,)}


def test_an_old_routers_worker_urls_are_one_option_with_every_url():
    argv = ["vllm-router", "--worker-urls", "http://a:8000", "http://b:8000", "--policy", "round_robin"]
    command = parse_command(argv)
    assert command.gate is None and command.words == ("vllm-router",)
    assert dict(command.options) == {"--worker-urls": ("http://a:8000", "http://b:8000"), "--policy": ("round_robin",)}


def test_an_sh_c_command_whose_name_is_not_the_start_gates_has_no_gate():
    argv = ["sh", "-c", LAUNCH, "ascend-fleet-router", "vllm-router", "--port", "9000"]
    command = parse_command(argv)
    assert command.gate is None and command.runs == tuple(argv)
    assert command.words == ROUTER_WORDS and dict(command.options) == {"--port": ("9000",)}


def test_a_command_shorter_than_the_gate_has_no_gate_and_the_gate_alone_runs_nothing():
    assert parse_command(["sh", "-c", START_GATE]).gate is None
    assert parse_command(["sh", "-c", START_GATE]).words == ("sh", "-c", START_GATE)
    alone = parse_command(["sh", "-c", START_GATE, START_GATE_NAME])
    assert (alone.gate, alone.runs, alone.words, dict(alone.options)) == (START_GATE, (), (), {})


# --- properties over generated command lines ---------------------------------------------------

VALUE_CHARS = 'abcXYZ019-_.:/={}," '
value_words = st.text(VALUE_CHARS, min_size=1, max_size=10).filter(lambda w: not w.startswith("--"))
# vLLM options the plan does not own (allocation.values OWNED_FLAGS), and made-up ones.
option_names = st.sampled_from(["--dtype", "--trust-remote-code", "--block-size", "--additional-config"]) | (
    st.from_regex(r"--x-[a-z]{1,6}", fullmatch=True)
)

unread_names = st.sampled_from(["--trust-remote-code", "--additional-config"]) | st.from_regex(r"--x-[a-z]{1,6}", fullmatch=True)


@st.composite
def options(draw, names=option_names) -> list[tuple[str, str, tuple[str | None, ...]]]:
    """(option, how it is written, its values): a flag, `--o value`, `--o=value`, or for an option of
    `MANY_VALUES` every word up to the next option."""
    out = []
    for name in draw(st.lists(names, max_size=6)):
        form = draw(st.sampled_from(["many", "equals"] if name in MANY_VALUES else ["flag", "word", "equals"]))
        if form == "flag":
            out.append((name, form, (None,)))
        elif form == "equals":
            out.append((name, form, (draw(st.text(VALUE_CHARS, max_size=10)),)))
        else:  # one word, or any number of them (none at all is an empty list, as argparse's nargs="*")
            single = form == "word"
            out.append((name, form, tuple(draw(st.lists(value_words, min_size=single, max_size=1 if single else 3)))))
    return out


def written(opts: list[tuple[str, str, tuple[str | None, ...]]]) -> list[str]:
    """The words of `opts` as a command line carries them."""
    words: list[str] = []
    for name, form, values in opts:
        words += [name] if form == "flag" else [f"{name}={values[0]}"] if form == "equals" else [name, *values]
    return words


def expected(opts: list[tuple[str, str, tuple[str | None, ...]]]) -> dict[str, tuple[str | None, ...]]:
    out: dict[str, tuple[str | None, ...]] = {}
    for name, _, values in opts:
        out[name] = out.get(name, ()) + values
    return out


@settings(max_examples=300, deadline=None)
@given(
    gate=st.none() | st.text(max_size=20),
    words=st.lists(value_words, min_size=1, max_size=4),
    opts=options(option_names | st.sampled_from(sorted(MANY_VALUES))),
)
def test_any_command_line_reads_back_into_the_gate_words_and_options_it_was_written_from(gate, words, opts):
    runs = [*words, *written(opts)]
    argv = runs if gate is None else behind_gate(gate, runs)
    note(f"argv: {argv}")
    command = parse_command(argv)
    assert (command.gate, command.runs) == (gate, tuple(runs))
    assert command.words == tuple(words)
    assert dict(command.options) == expected(opts)


@st.composite
def services(draw) -> tuple[dict, list]:
    """A service's stack values with `args` of options the plan does not own, maybe replicated, and
    those options: options the plan does not read either, since one it reads (`--dtype`, `--block-size`)
    is refused where vLLM would refuse its value (tests/test_vllm_args.py)."""
    opts = draw(options(unread_names))
    extra = {"args": written(opts)} if opts else {}
    for key, values in (("maxModelLen", st.integers(256, 131072)), ("maxNumSeqs", st.integers(1, 256))):
        if draw(st.booleans()):
            extra[key] = draw(values)
    if draw(st.booleans()):
        extra["servedModelName"] = draw(st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True))
    if draw(st.booleans()):
        extra["replicas"] = draw(st.integers(2, 3))
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    fraction = draw(st.sampled_from([0.1, 0.3, 0.45, 0.9]))
    return service("svc", tp, fraction, **extra), opts


@settings(max_examples=60, deadline=None)
@given(case=services())
def test_every_generated_container_command_reads_back_into_the_plans_values_and_the_services_args(case):
    values, opts = case
    deployment = deployment_of(fleet([host("npu-a"), host("npu-b"), host("npu-c")], [values]))
    for sd in deployment.services():
        planned = sd.plan
        command = parse_command(sd.spec.command)
        note(f"{sd.name}: {sd.spec.command[4:]}")
        assert command.gate == START_GATE and command.runs == sd.spec.command[4:]
        assert command.words == ("vllm", "serve", values["model"])
        owned = {
            "--served-model-name": (planned.instance.served_model_name,),
            "--host": ("0.0.0.0",),
            "--port": (str(planned.assignment.api_port),),
            "--tensor-parallel-size": (str(values["tensorParallelSize"]),),
            "--gpu-memory-utilization": (str(planned.gpu_memory_utilization),),
        }
        owned |= {"--max-model-len": (str(values["maxModelLen"]),)} if "maxModelLen" in values else {}
        owned |= {"--max-num-seqs": (str(values["maxNumSeqs"]),)} if "maxNumSeqs" in values else {}
        assert dict(command.options) == owned | expected(opts)
    for rd in deployment.routers:
        command = parse_command(rd.spec.command)
        assert command.gate is None and command.words == ROUTER_WORDS
        assert command.options["--port"] == (str(rd.plan.port),)
        assert command.options["--prometheus-port"] == (str(rd.plan.metrics_port),)


# --- the golden plans ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(fleets()))
def test_every_command_of_a_golden_plan_reads_back_into_its_services_values(name):
    plan = json.loads(json.loads((GOLDENS / f"{name}.json").read_text())["json"])
    services = [s for h in plan["hosts"] for s in h["services"]]
    assert services, f"{name}: the golden plan has no service"
    for s in services:
        argv = s["container"]["command"]
        command = parse_command(argv)
        assert command.gate == START_GATE and command.runs == tuple(argv[4:]), s["name"]
        assert command.words[:2] == ("vllm", "serve") and len(command.words) == 3, s["name"]
        assert command.options["--port"] == (str(s["apiPort"]),)
        assert command.options["--tensor-parallel-size"] == (str(s["tensorParallelSize"]),)
        [utilization] = command.options["--gpu-memory-utilization"]
        assert float(utilization) == s["gpuMemoryUtilization"]
    for r in plan.get("routers", ()):
        command = parse_command(r["container"]["command"])
        assert command.gate is None and command.words == ROUTER_WORDS, r["name"]
        assert command.options["--port"] == (str(r["routerPort"]),)
        assert command.options["--prometheus-port"] == (str(r["routerMetricsPort"]),)
