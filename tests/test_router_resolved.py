"""A router is resolved once, by the planner (`allocation.resolved.ResolvedRouter`), and
`records.router` only renders what was resolved: no default is chosen when its container is made."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from allocation.planner import plan_fleet
from records.containers import Site
from records.router import image_tag, router_spec
from tests.support.stacks import fleet, host, service


def _router(**extra):
    values = fleet([host("npu-a"), host("npu-b")], [service("bge", 1, 0.4, replicas=2, **extra)], defaults=DEFAULTS)
    plan = plan_fleet(values)
    return plan, plan.routers[0]


DEFAULTS = {"logOpts": {"max-size": "10m"}, "image": "example/vllm-ascend:v0.20.2rc1"}


def test_the_planner_resolves_the_routers_policy_timeouts_image_and_log_options():
    _, bare = _router(startTimeoutSeconds=600)
    assert (bare.settings.policy, bare.settings.request_timeout_seconds) == ("cache_aware", 3600)
    assert bare.settings.startup_timeout_seconds == 600 + 300, "the slowest replica's load and a margin"
    assert bare.settings.base_image == "example/vllm-ascend:v0.20.2rc1", "the service's image by default"
    assert dict(bare.settings.log_opts) == {"max-size": "10m"}, "the defaults' log options"
    router = {"policy": "random", "requestTimeoutSeconds": 60, "baseImage": "example/base:1"}
    _, set_ = _router(router=router)
    assert (set_.settings.policy, set_.settings.request_timeout_seconds, set_.settings.base_image) == (
        "random", 60, "example/base:1"
    )  # fmt: skip


def test_without_prefix_caching_the_default_policy_is_round_robin():
    _, router = _router(args=["--no-enable-prefix-caching"])
    assert router.settings.policy == "round_robin"


def test_the_router_record_renders_every_resolved_setting_and_chooses_none():
    plan, router = _router()
    settings = replace(
        router.settings, policy="power_of_two", request_timeout_seconds=77, startup_timeout_seconds=999,
        health_interval_seconds=4, health_failures=6, base_image="example/other:2",
        log_opts=MappingProxyType({"max-file": "9"}), restart="always", ipc_mode="host", shm_size_mib=128,
        stop_grace_seconds=11,
    )  # fmt: skip
    spec = router_spec(replace(router, settings=settings), Site.of(plan.fleet, plan.fleet.host(router.host_name)))
    options = dict(zip(spec.command, spec.command[1:]))
    assert (options["--policy"], options["--request-timeout-secs"]) == ("power_of_two", "77")
    assert (options["--worker-startup-timeout-secs"], options["--health-check-interval-secs"]) == ("999", "4")
    assert options["--health-failure-threshold"] == "6"
    assert (spec.image, dict(spec.log_opts), spec.restart, spec.ipc_mode) == (
        image_tag("example/other:2"), {"max-file": "9"}, "always", "host"
    )  # fmt: skip
    assert (spec.shm_size_mib, spec.stop_grace_seconds, spec.start_timeout_seconds) == (128, 11, 999)
    assert spec.healthcheck.start_period_seconds == 999
