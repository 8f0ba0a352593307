"""The shape of a container's command line, written and read in one place.

A service's container runs `vllm serve` behind the start gate (`sh -c GATE ascend-fleet-start-gate
vllm serve MODEL --option value ...`, records.containers); a router's runs `sh -c LAUNCH
ascend-fleet-router vllm-router --option value ...` (records.router). The plan JSON carries only that
rendered argv, and `plan --against` compares it with plans that older revisions printed
(cli.revision runs their own code), so the diff has to read the structure back from argv. The
reading lives here, beside the writing (`behind_gate`), so a change of shape changes both, and the
diff compares `Command` records without knowing the gate's name or `sh -c`. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

from allocation.windows import API

START_GATE_NAME = "ascend-fleet-start-gate"
"""The gate script's `$0`: what tells a gated command from any other `sh -c`."""
MANY_VALUES = frozenset({"--worker-urls"})
"""Options that take every word up to the next option: vllm-router's `--worker-urls` (`nargs="*"`,
vllm-project/router py_src/vllm_router/router_args.py `add_cli_args`), which router commands named
before the router read its workers from a file (records.rollout `LAUNCH`)."""
PLACEMENT_OPTIONS = {"--port": (API.key,), "--tensor-parallel-size": ("devices",)}
"""Options that only render a placement or port field of the plan (the fields each renders): the
diff reports the field's change, not the option's again."""


def behind_gate(script: str, command: Sequence[str]) -> tuple[str, ...]:
    """`command` run by the start gate `script` (records.containers `START_GATE`)."""
    return ("sh", "-c", script, START_GATE_NAME, *command)


@dataclass(frozen=True)
class Command:
    """A container's command line, read back into its parts."""

    gate: str | None
    """The start gate's script, or None for a command without one (a router, or a plan before the gate)."""
    runs: tuple[str, ...]
    """The words the gate runs: the whole argv when there is no gate."""
    words: tuple[str, ...]
    """Its positional words, in order: `vllm serve MODEL`; a router's are its launcher's (`sh -c
    LAUNCH ascend-fleet-router`) and `vllm-router`, as the diff has always shown them."""
    options: Mapping[str, tuple[str | None, ...]]
    """Each `--option`'s values in order, as often as it is given; None for a flag without a value."""


def parse_command(argv: Sequence[str], spelling: Callable[[str], str] | None = None) -> Command:
    """The parts of a rendered command line.

    An option takes the next word as its value unless that word is itself an option (an option of
    `MANY_VALUES` takes every word up to the next option); `--option=value` is split. An option
    given twice keeps every value, in order. `spelling`: how the program the command runs spells an
    option word (`allocation.vllm_args.spelled` for `vllm serve`), so two spellings are one option.
    """
    argv = tuple(argv)
    gated = len(argv) >= 4 and argv[:2] == ("sh", "-c") and argv[3] == START_GATE_NAME
    gate, runs = (argv[2], argv[4:]) if gated else (None, argv)
    words: list[str] = []
    options: dict[str, list[str | None]] = {}
    i = 0
    while i < len(runs):
        word = runs[i]
        if word.startswith("--") and len(word) > 2:
            key, eq, value = (spelling(word) if spelling else word).partition("=")
            values = options.setdefault(key, [])
            if eq:
                values.append(value)
            elif key in MANY_VALUES:
                while i + 1 < len(runs) and not runs[i + 1].startswith("--"):
                    values.append(runs[i + 1])
                    i += 1
            elif i + 1 < len(runs) and not runs[i + 1].startswith("--"):
                values.append(runs[i + 1])
                i += 1
            else:
                values.append(None)
        else:
            words.append(word)
        i += 1
    return Command(gate, runs, tuple(words), MappingProxyType({k: tuple(v) for k, v in options.items()}))
