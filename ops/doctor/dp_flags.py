"""What a member of a multi-host service joins: the data-parallel flags its container runs, read as vLLM
reads them, against the plan's. Pure.

A follower that runs another leader's address or port, another start rank or another data-parallel size
than the plan's never joins its group: vLLM's leader waits in its handshake for exactly `size` engines
with the ranks it expects (vllm v0.20.2 `v1/engine/utils.py` `wait_for_engine_startup`). `doctor` says
so in the group's terms, beside the `drift` of the command that shows the words.

An absent flag is vLLM's default (vllm v0.20.2 `engine/arg_utils.py` `create_engine_config`:
`data_parallel_address` falls back to `ParallelConfig.data_parallel_master_ip`, the start rank to
`data_parallel_start_rank or 0`, the RPC port to `ParallelConfig.data_parallel_rpc_port`;
`config/parallel.py`: `data_parallel_master_ip = "127.0.0.1"`, `data_parallel_rpc_port = 29550`,
`data_parallel_size = 1`). The long spellings are read (`records.command.parse_command`, with vLLM's
`_`-for-`-` spelling); the short ones (`-dpa`, `-dpr`...) are not, and show as the command's drift.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from allocation.vllm_args import spelled
from records.command import parse_command

DEFAULTS = {
    "--data-parallel-address": "127.0.0.1",
    "--data-parallel-rpc-port": "29550",
    "--data-parallel-start-rank": "0",
    "--data-parallel-size": "1",
}
"""vLLM's value of each flag a member's joining depends on, when the command leaves it out."""


@dataclass(frozen=True)
class Joins:
    """Where a member joins its group and as what: the leader's address and RPC port, its start rank
    and the group's data-parallel size, as words of its command (or vLLM's defaults)."""

    address: str
    rpc_port: str
    start_rank: str
    size: str

    def text(self) -> str:
        address = f"[{self.address}]" if ":" in self.address else self.address
        return f"{address}:{self.rpc_port} as start rank {self.start_rank} of data-parallel size {self.size}"


def joins(command: Sequence[str]) -> Joins:
    """What a command joins: the last value of each flag, as argparse keeps it. The plan's is
    `joins(GroupPlan.args(member))`, read the same way."""
    options = parse_command(command, spelled).options
    values = [next((v for v in reversed(options.get(flag, ())) if v is not None), default) for flag, default in DEFAULTS.items()]
    return Joins(*values)
