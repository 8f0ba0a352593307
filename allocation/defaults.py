"""The project's defaults: what a setting is when neither a service nor `ascend-fleet:defaults` sets it.

The config reference (allocation/config.py field descriptions) states them and the planner
(allocation/resolved.py) applies them, both from here.
"""

from types import MappingProxyType

DEFAULT_IMAGE = "quay.io/ascend/vllm-ascend:v0.20.2rc1"
DEFAULT_IMAGES = MappingProxyType({"a2": DEFAULT_IMAGE, "a3": f"{DEFAULT_IMAGE}-a3"})
"""The default image by `board`: vllm-ascend publishes an A3 build of each release under the tag
suffix `-a3` (vllm-ascend `docs/source/quick_start.md`: "Atlas A3: quay.io/ascend/vllm-ascend:<version>-a3")."""
DEFAULT_SHM_SIZE_MIB = 10486  # the seed's shm_size: 10.24gb
DEFAULT_START_TIMEOUT_SECONDS = 1800
DEFAULT_STOP_GRACE_SECONDS = 60
DEFAULT_RESTART = "unless-stopped"
DEFAULT_IPC_MODE = "private"
LOG_OPTS = MappingProxyType({"max-size": "100m", "max-file": "5"})
REQUEST_TIMEOUT_SECONDS = 3600
"""A router's bound on one request (`router.requestTimeoutSeconds`): long contexts take long."""
ROUTER_HEALTH_INTERVAL_SECONDS = 10
"""How often a router probes each replica (`--health-check-interval-secs`)."""
ROUTER_HEALTH_FAILURES = 3
"""Failed probes in a row before a router stops sending a replica requests."""
ROUTER_STARTUP_MARGIN_SECONDS = 300
"""How much longer than the slowest replica's load a router waits for its first worker."""
ROUTER_STOP_GRACE_SECONDS = 30
ROUTER_SHM_SIZE_MIB = 64
