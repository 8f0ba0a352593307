"""The port windows a service and a router bind on their host: one row per kind, and nothing else names them.

Every place that deals with a window (the config pins, the port policy, the
allocator, the plan JSON, `pin`, the container's env and labels, the report
columns, the diff, the refused `env` keys) loops over `KINDS`, a router's over
`ROUTER_KINDS`. Adding a window is adding a row. A window is a run of consecutive ports
`(first, last)`, inclusive; a "port" kind is written as its first port, a
"range" kind as `[first, last]`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping

PortWindow = tuple[int, int]
MAX_PORT = 65535
# HCCL takes this many consecutive host ports from HCCL_IF_BASE_PORT (32 in
# current CANN; 16 in older docs, so 32 is the safe reservation).
HCCL_IF_WINDOW = 32
# HCCL's NPU-side port when HCCL_NPU_SOCKET_PORT_RANGE is unset.
HCCL_DEFAULT_NPU_PORT = 16666


def window_text(window: PortWindow) -> str:
    """`16666-16681`, or `7007` for a single port: how messages, env and labels write a window."""
    return f"{window[0]}-{window[1]}" if window[0] != window[1] else str(window[0])


@dataclass(frozen=True)
class WindowKind:
    """One kind of port window and every name it goes by."""

    key: str
    """Config pin key of a service, plan JSON key and `pin` key."""
    env: str | None
    """Container environment variable carrying the window; None when it is a `vllm serve` flag."""
    label: str
    """Container label, after `ascend-fleet.`."""
    column: str
    """Column heading in the plan table."""
    shape: Literal["port", "range"]
    """How config, JSON and env write it: the first port, or `[first, last]`."""
    base_key: str
    """`ascend-fleet:ports` key of the first port handed out."""
    base: int
    """Its default."""
    size: int
    """Ports per window (the default, when `count_key` is set)."""
    count_key: str | None
    """`ascend-fleet:ports` key that sets the size; None when HCCL fixes it."""
    hccl_range: bool
    """Dropped for services with `hcclPortRanges: false` (MC2 models)."""
    unset_port: int | None
    """The port the process uses when the window is dropped (HCCL's own default)."""
    netns: bool
    """Bound in the container's network namespace, so kept out of its ephemeral ports. HCCL's
    NPU-side sockets live on the NPU's own network, not in Linux's."""
    doc: str
    """What the window is, for the config reference."""

    def text(self, window: PortWindow) -> str:
        """The env and label value of a window: `61000` for a port kind, `16666-16681` for a range."""
        return str(window[0]) if self.shape == "port" else window_text(window)

    def value(self, window: PortWindow | None) -> int | list[int] | None:
        """The JSON and pin value of a window."""
        if window is None:
            return None
        return window[0] if self.shape == "port" else [window[0], window[1]]


KINDS: tuple[WindowKind, ...] = (
    WindowKind(
        "apiPort", None, "api-port", "API", "port", "apiBase", 8000, 1, None, False, None, True,
        "the API port (`--port`), published on the host",
    ),
    WindowKind(
        "hcclNpuSocketPortRange", "HCCL_NPU_SOCKET_PORT_RANGE", "hccl-npu-socket-port-range", "HCCL NPU",
        "range", "hcclNpuSocketBase", 16666, 16, "hcclNpuSocketCount", True, HCCL_DEFAULT_NPU_PORT, False,
        "HCCL's NPU-side sockets; at least the HCCL processes per card",
    ),
    WindowKind(
        "hcclHostSocketPortRange", "HCCL_HOST_SOCKET_PORT_RANGE", "hccl-host-socket-port-range", "HCCL host",
        "range", "hcclHostSocketBase", 60032, 16, "hcclHostSocketCount", True, None, True,
        "HCCL's host-side sockets; the default base starts past HCCL's default 60000-60031 window",
    ),
    WindowKind(
        "hcclIfBasePort", "HCCL_IF_BASE_PORT", "hccl-if-base-port", "HCCL IF", "port", "hcclIfBase", 61000,
        HCCL_IF_WINDOW, None, False, None, True,
        f"the base of HCCL's host ports; HCCL takes {HCCL_IF_WINDOW} ports from it",
    ),
    WindowKind(
        "vllmPort", "VLLM_PORT", "vllm-port", "VLLM_PORT", "port", "vllmBase", 62000, 16, "vllmCount", False, None, True,
        "the base of vLLM's internal ports (not the API port)",
    ),
)  # fmt: skip
BY_KEY: Mapping[str, WindowKind] = {k.key: k for k in KINDS}
API = BY_KEY["apiPort"]
NPU_SOCKETS = BY_KEY["hcclNpuSocketPortRange"]
"""The window HCCL falls back to its default port for when the variable is unset."""
WINDOW_ENV = tuple(k.env for k in KINDS if k.env)
ROUTER_KINDS: tuple[WindowKind, ...] = (
    WindowKind(
        "routerPort", None, "router-port", "port", "port", "apiBase", 8000, 1, None, False, None, True,
        "the router's port, published on its host; the service's endpoint",
    ),
    WindowKind(
        "routerMetricsPort", None, "router-metrics-port", "metrics", "port", "apiBase", 8000, 1, None, False, None,
        True, "the router's Prometheus metrics port, published on its host",
    ),
)  # fmt: skip
"""A router's windows: pins of its replicated service, keys of its plan JSON, `pin` and stack output, its
labels and report columns. Handed out like API ports, after every service's windows on its host."""
ENDPOINT, METRICS = ROUTER_KINDS
DP_RPC = WindowKind(
    "dataParallelRpcPort", None, "data-parallel-rpc-port", "DP RPC", "port", "dataParallelRpcBase", 29550, 1, None, False,
    None, False,
    "the data-parallel handshake port (`--data-parallel-rpc-port`) a multi-host service's leader binds while its "
    "followers join; vLLM's default 29550",
)  # fmt: skip
"""The one window of a multi-host group of its own: bound on the leader's host only (vllm@0.20.2
`v1/engine/utils.py` `launch_core_engines` binds it there; a `--headless` follower connects to it,
`entrypoints/cli/serve.py` `run_headless`), and only while the group starts."""
MEMBER_KINDS: tuple[WindowKind, ...] = (API, NPU_SOCKETS, BY_KEY["hcclHostSocketPortRange"], BY_KEY["hcclIfBasePort"], DP_RPC)
"""The windows a member of a multi-host group binds on its host, on the host network: the service's
rows but `vllmPort` (vllm@0.20.2 hands the first free port from `VLLM_PORT` out twice to the
leader's engine sockets, `utils/network_utils.py` `_get_open_port`, so a member leaves its ports to
the kernel), and the group's DP RPC port. `LEADER_KINDS` only on the leader's host."""
LEADER_KINDS = frozenset({API.key, DP_RPC.key})
"""What only the leader binds: the API port (a `--headless` follower starts no API server) and the
DP RPC port."""
EPHEMERAL = (32768, 60999)
"""Linux's default `net.ipv4.ip_local_port_range` (torvalds/linux `Documentation/networking/
ip-sysctl.rst`: "The default values are 32768 and 60999 respectively"): the ports the kernel hands
to `bind(port 0)` and outgoing connections, where vLLM's own random ports land."""
KV_PORT = WindowKind(
    "kvPort", None, "kv-port", "KV port", "port", "kvPortBase", 28000, 1, None, False, None, True,
    "the first of a prefill or decode instance's Mooncake handshake ports (`kv_port` of `--kv-transfer-config`); the "
    "instance binds one per card of its block (its tensorParallelSize); the default base is vllm-ascend's advice for "
    "8-NPU hosts, clear of AscendDirectTransport's random ports",
)  # fmt: skip
"""A disaggregated role instance's handshake block: vllm-ascend@v0.20.2rc1 `vllm_ascend/distributed/
kv_transfer/kv_p2p/mooncake_connector.py` (`MooncakeConnectorWorker.__init__`) binds
`kv_port + data_parallel_rank x TP x PP x PCP + device_index`, so an instance owns DP x TP x PP x PCP
ports from `kv_port`; its size is the instance's (`allocation.disaggregated.RoleInstance.kv_block`),
not the kind's."""
ROLE_KINDS: tuple[WindowKind, ...] = (*KINDS, KV_PORT)
"""The windows of a prefill or decode instance: a service's, and its KV handshake block."""
PROXY = WindowKind(
    "proxyPort", None, "proxy-port", "proxy", "port", "apiBase", 8000, 1, None, False, None, True,
    "the port of a disaggregated service's proxy (`--port` of vllm-ascend's "
    "`load_balance_proxy_server_example.py`); the service's endpoint",
)  # fmt: skip
"""The one window of a disaggregated service's proxy, handed out like a router's, after every instance's."""
TRANSPORT_BASE, TRANSPORT_PER_NPU = 20000, 1000


def transport_range(npus: int) -> PortWindow:
    """The ports AscendDirectTransport picks at random on a host of `npus` NPUs, `[20000, 20000 + npus x
    1000)` (vllm-ascend PR 6455, `docs/source/tutorials/features/pd_disaggregation_mooncake_multi_node.md`
    "kv_port Configuration Guide", from v0.15.0rc1; Mooncake's `ascend_direct_transport.cpp`): a
    window there may be taken from under its owner at any start of a Mooncake instance on the host."""
    return TRANSPORT_BASE, TRANSPORT_BASE + npus * TRANSPORT_PER_NPU - 1
