"""The router of a replicated service: vLLM's own router (PyPI `vllm-router`) in a container.

One router per replicated service spreads requests over its replicas and is the service's
endpoint. There is no registry to pull a router image from, so each host that runs a router
builds one: the service's own image plus the pinned `vllm-router` wheel, installed by pip
with its hashes checked (`build_script`). Pure: no Pulumi, no Docker, no I/O.
"""

from __future__ import annotations

import hashlib
import shlex
from types import MappingProxyType

from allocation.config import Mount
from records.containers import LABEL_PREFIX, ContainerSpec, Site, health_check, http_probe
from allocation.plan import RouterPlan
from records.runtime import IMAGE_ID, build, image_inspect
from records.rollout import LAUNCH, WORKERS_ENV, WORKERS_FILE, WORKERS_MOUNT, workers_dir
from allocation.windows import ROUTER_KINDS

VERSION = "0.1.17"
# sha256 of the two wheels pip may pick (PyPI, vllm_router-0.1.17-cp38-abi3-manylinux_2_28_{x86_64,aarch64}.whl).
WHEEL_HASHES = (
    "85c96bea4d573a49b5a8ae4c72ee3dfe733aba26b6f1ff1256e6142f1f42694d",
    "1ec4d5ce14c19431cc84e36238507dff89020ab024d99f042f091f5e9f2c895a",
)
# What the wheel needs at run time beyond the service's image. vllm-router 0.1.17 requires setproctitle,
# aiohttp, orjson, uvicorn, fastapi and requests (its METADATA); vLLM 0.20.2 declares all of them but orjson
# (its wheel's Requires-Dist: requests, fastapi[standard] (which brings uvicorn), aiohttp, setproctitle;
# vllm-ascend's requirements.txt adds no orjson either), and `vllm-router` starts in launch_router.py,
# which imports mini_lb.py, which imports orjson at module level. So orjson goes in beside the wheel,
# pinned by the sha256 of its cp311 wheels for x86_64 and aarch64 (orjson-3.13.0-cp311-cp311-
# manylinux_2_17_{x86_64,aarch64}.manylinux2014_*.whl); the rest come from the image (`--no-deps`).
RUNTIME_HASHES = {
    "orjson==3.13.0": (
        "89bcf2d4bc6c9a7e1763c8cf534f38712e66b76a0fefda7fb7785462f0d635e4",
        "dd9d9a101bd8dbfad112170f009cd155e52bb8c936468821a0d03cbb96c0e426",
    ),
}
IMAGE_REPOSITORY = "ascend-fleet-router"
ROUTER_OF_LABEL = f"{LABEL_PREFIX}.router-of"
"""The label only a router's container has: the service it routes to."""


def requirements() -> tuple[str, ...]:
    """The pip requirement lines: exact versions, and the hash of every wheel pip may pick."""
    pins = {f"vllm-router=={VERSION}": WHEEL_HASHES, **RUNTIME_HASHES}
    return tuple(f"{pin} " + " ".join(f"--hash=sha256:{h}" for h in hashes) for pin, hashes in pins.items())


def dockerfile(base_image: str) -> str:
    """The router image: the service's image (it has Python, pip and most of the router's needs) plus
    the pinned wheel and what vLLM does not declare."""
    return (
        f"FROM {base_image}\n"
        f"RUN printf '%s\\n' {' '.join(shlex.quote(line) for line in requirements())} > /tmp/vllm-router.txt \\\n"
        " && pip install --no-cache-dir --no-deps --require-hashes -r /tmp/vllm-router.txt \\\n"
        " && rm /tmp/vllm-router.txt\n"
    )


def image_tag(base_image: str) -> str:
    """A tag naming the router version and the base image, so a new base builds a new image."""
    digest = hashlib.sha256(dockerfile(base_image).encode()).hexdigest()[:12]
    return f"{IMAGE_REPOSITORY}:{VERSION}-{digest}"


def build_script(base_image: str) -> str:
    """Builds the router image on the host unless it is there; prints the image id last."""
    tag = shlex.quote(image_tag(base_image))
    return (
        "set -eu\n"
        f"if ! {image_inspect()} {tag} >/dev/null 2>&1; then\n"
        f"  {build(tag)} <<'ASCEND_FLEET_ROUTER_DOCKERFILE'\n"
        f"{dockerfile(base_image)}"
        "ASCEND_FLEET_ROUTER_DOCKERFILE\n"
        "fi\n"
        f"{image_inspect(IMAGE_ID)} {tag}\n"
    )


def router_spec(router: RouterPlan, site: Site) -> ContainerSpec:
    """The router's container, as the planner resolved it (`router.settings`). Its command names no
    worker: `LAUNCH` passes the URLs in its worker file as `--worker-urls` (records.rollout), so
    replicas come and go without a restart."""
    r = router.settings
    command = (
        "sh", "-c", LAUNCH, "ascend-fleet-router",
        "vllm-router",
        "--host", "0.0.0.0",
        "--port", str(router.port),
        "--policy", r.policy,
        "--request-timeout-secs", str(r.request_timeout_seconds),
        "--worker-startup-timeout-secs", str(r.startup_timeout_seconds),
        "--health-check-interval-secs", str(r.health_interval_seconds),
        "--health-failure-threshold", str(r.health_failures),
        "--prometheus-host", "0.0.0.0",
        "--prometheus-port", str(router.metrics_port),
    )  # fmt: skip
    # /readiness answers 200 while at least one worker is healthy; /health answers 503 as soon as
    # any one replica is down, which would mark the endpoint unhealthy while it still serves
    # (vllm-router 0.1.17 src/server.rs; seen on the real router in tests/test_router_e2e.py, which
    # also runs this very argv: flags from its --help, and its exit when no worker answers within
    # --worker-startup-timeout-secs, src/routers/http/router.rs wait_for_healthy_workers).
    probe = http_probe(router.port, "/readiness")
    labels = {
        f"{LABEL_PREFIX}.stack": site.stack,
        f"{LABEL_PREFIX}.service": router.container_name,
        ROUTER_OF_LABEL: router.service.original_name,
        f"{LABEL_PREFIX}.host": router.host_name,
    } | {f"{LABEL_PREFIX}.{k.label}": k.text(router.windows[k.key]) for k in ROUTER_KINDS}
    return ContainerSpec(
        name=router.container_name,
        image=image_tag(r.base_image),
        command=command,
        env=MappingProxyType({WORKERS_ENV: WORKERS_FILE}),
        device_files=(),
        mounts=(Mount(source=workers_dir(router.container_name), target=WORKERS_MOUNT, read_only=True),),
        api_port=router.port,
        metrics_port=router.metrics_port,
        labels=MappingProxyType(labels),
        # After a reboot the router waits for a replica to load before it binds its port.
        healthcheck=health_check(site, ("CMD-SHELL", probe), (10, 5, 3), r.startup_timeout_seconds),
        privileged=False,
        restart=r.restart,
        shm_size_mib=r.shm_size_mib,
        start_timeout_seconds=r.startup_timeout_seconds,
        ipc_mode=r.ipc_mode,
        stop_grace_seconds=r.stop_grace_seconds,
        sysctls=MappingProxyType({}),
        log_opts=r.log_opts,
    )
