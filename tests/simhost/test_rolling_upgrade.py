"""A rolling image upgrade of a replicated service on the simulated host, through its real router.

Three replicas of one service on three cards of the simulated host, and its router: the real
vllm-router 0.1.17 in the stand-in router image (sim/router_image.py; on a real host the
program's build script makes that image, here it finds the tag and skips the build). Every
step is the program's own: the deployment records (`records.deployment.deploy`), the
containers as `views.exports.render.docker_run_args` creates them, the router's build and workers
scripts and each replica's serve and drain scripts (`records.rollout`), run over SSH on
the host as the program's commands run them. The order is the program's own: the real
`__main__.py` runs under Pulumi's mocks (tests/support/pulumi_harness.py) and its resources for the
router and the replicas are taken in the order of their dependencies; the graph must leave
one container or serves step ready at a time, or the engine would run them together. It
gives, for a first deploy and for an image upgrade (every replica and the router replaced):
the router's build and workers scripts (they depend only on the image, so they may run
first); replica 1's container; the router's container (after replica 1); replica 1's serves
step; replica 2's container (after that step); its serves step; and so on. A replacement
deletes before it creates, and first deletes the dependant replaced with it, the replica's
old serves step, whose `delete` is the drain: drain, `docker stop` with the grace period,
`docker rm`, `docker run` from the new image, waited healthy (the provider's `wait`), then
the serves step that re-registers the replica.

Meanwhile one thread sends `GET /v1/models` through the router's published port every 0.2 s
(the route the npu-sim `vllm` serves; vllm-router does not retry it, so a request routed to a
replica that is going down fails: the drain is what keeps them succeeding) and another samples
the replicas' state. Timings are printed (`pytest -s`); no assert depends on them. The
containers' health is probed every second instead of the plan's 30 s (tests/simhost/probes.py):
the waits for `healthy` end sooner, and what is checked (the order, the drain, one replica down
at a time) is the same.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from records.rollout import workers_dir
from sim.host import IMAGE, ContainerFailed, SimHost
from sim.router_image import build_router_image
from tests.support.rolling import Chain, LOCAL_DOCKER, SERVICE, Stack, Watch, derived_image, values_of
from tests.support.rolling import REPLICAS

pytestmark = pytest.mark.simhost

NEW_IMAGE = "ascend-fleet/npu-sim:v2"
BROKEN_IMAGE = "ascend-fleet/npu-sim:broken"


@pytest.fixture(scope="module")
def chain(sim_host_session: SimHost) -> Iterator[Chain]:
    """The stack running on the simulated host with the npu-sim image, deployed once for this
    module: each test rolls it to a new image from whatever revision runs (they pass in any order)."""
    sim = sim_host_session
    made = not Path(workers_dir(f"{SERVICE}-router")).exists()
    try:
        sim.make_model("/srv/models/emb")
        running = Chain(sim)
        running.up(revision(sim, IMAGE))
        yield running
    finally:
        # The router is a descendant of the npu-sim image, so `reset` removes it with the replicas.
        sim.reset()
        if made:
            shutil.rmtree(workers_dir(f"{SERVICE}-router"), ignore_errors=True)


def revision(sim: SimHost, image: str) -> Stack:
    """The stack with `image`, its router's image built (or found)."""
    stack = Stack.of(values_of(sim, image))
    build_router_image(LOCAL_DOCKER, stack.router.base_image)
    return stack


def replicas(chain: Chain) -> list[str]:
    """The running replicas' names in their chain's order."""
    return [h.replica for h in chain.stack.router.handovers]


def test_an_image_upgrade_rolls_one_replica_at_a_time_and_requests_keep_succeeding_through_the_router(chain, capsys):
    sim, names = chain.sim, replicas(chain)
    new = revision(sim, derived_image(NEW_IMAGE))
    router = new.router
    assert router.spec.image != chain.stack.router.spec.image, "a new service image is a new router image"

    with Watch(router.plan.port, names) as watch:
        watch.sent_at_least(5)
        start = chain.mark("upgrade starts")
        chain.up(new)
        end = chain.mark("upgrade done")
        watch.sent_at_least(len(watch.requests) + 5)

    # Every replica and the router run the new release, and the router serves through all of them.
    for name in [*names, router.name]:
        assert sim.state(name)["Running"] is True
    running = sim.docker("inspect", "-f", "{{.Config.Image}}", *names).stdout.split()
    assert running == [NEW_IMAGE] * REPLICAS
    workers = json.loads(sim.run(f"wget -q -O - http://127.0.0.1:{router.plan.port}/workers").stdout)["workers"]
    assert {w["url"]: w["is_healthy"] for w in workers} == dict.fromkeys(router.workers, True)

    # At most one replica down at any sample, and each of them seen down once (the watch can see it).
    down = watch.down()
    assert [(t - start, d) for t, d in down if len(d) > 1] == []
    assert {r for _, d in down for r in d} == set(names)

    # Every request succeeded, but while the router itself was replaced (docs/replicas.md: "The router itself
    # restarts once during an image change of its service, after replica 1 ... a few seconds in
    # which the endpoint refuses connections"): there a request may only fail to connect.
    events = {what: t for t, what in chain.events if t >= start}
    router_down, router_up = events[f"{router.name} down"], events[f"{router.name} up"]
    failed = [(s, e, result) for s, e, result in watch.requests if result != 200]
    outside = [(s - start, result) for s, e, result in failed if e < router_down or s > router_up]
    assert outside == [], "a request failed while the router was up: a replica went down undrained"
    assert {result for _, _, result in failed} <= {"URLError", "ConnectionResetError", "RemoteDisconnected"}
    # ...and the watch did look: requests went out while each replica was replaced.
    for n in names:
        sent = [s for s, _, _ in watch.requests if events[f"{n} down"] <= s <= events[f"{n} serves"]]
        assert sent, f"no request sent while {n} was replaced"

    per_replica = [round(events[f"{n} serves"] - events[f"{n} down"], 1) for n in names]
    refused = f"{failed[-1][1] - failed[0][0]:.1f}s" if failed else "never"
    worst = max(len(d) for _, d in down)
    with capsys.disabled():
        print(
            f"\nrolling upgrade of {REPLICAS} replicas: {end - start:.1f}s in all; per replica (drain to serving "
            f"again) {per_replica}s; router replaced in {router_up - router_down:.1f}s, refusing connections "
            f"for {refused}; {len(watch.requests)} requests, {len(failed)} failed, all while the router was "
            f"replaced; {len(watch.samples)} samples, at most {worst} replica down (min healthy {REPLICAS - worst})"
        )


def test_a_new_image_that_never_serves_stops_the_rollout_at_its_replica_while_the_others_keep_serving(chain, capsys):
    sim, names = chain.sim, replicas(chain)
    broken = derived_image(
        BROKEN_IMAGE,
        # A release whose vllm dies at start, as one with a broken dependency does.
        "RUN printf '#!/bin/sh\\necho \"ImportError: libascend_hal.so: cannot open shared object file\" >&2\\nexit 1\\n'"
        " > /usr/local/bin/vllm",
    )
    new = revision(sim, broken)
    router = chain.stack.router.name
    before = {n: sim.docker("inspect", "-f", "{{.Id}}", n).stdout.strip() for n in [*names, router]}

    with Watch(new.router.plan.port, names) as watch:
        start = chain.mark("upgrade starts")
        with pytest.raises(ContainerFailed) as failure:
            chain.up(new)
        end = chain.mark("upgrade stopped")
        watch.sent_at_least(len(watch.requests) + 10)

    assert failure.value.args[0].startswith(f"{names[0]} ")
    assert "ImportError: libascend_hal.so" in sim.logs(names[0])
    # The chain stopped at replica 1: replicas 2 and 3 and the router are the containers they were.
    after = {n: sim.docker("inspect", "-f", "{{.Id}}", n).stdout.strip() for n in before if n != names[0]}
    assert after == {n: i for n, i in before.items() if n != names[0]}
    assert all(sim.state(n)["Running"] for n in after)
    down = watch.down()
    assert {r for _, d in down for r in d} == {names[0]}, "only the replica with the new image went down"
    failed = [(s - start, result) for s, _, result in watch.requests if result != 200]
    assert failed == [], "the drained replica took no request: the others served them all"
    assert [s for s, _, _ in watch.requests if s > end], "requests went on after the rollout stopped"
    with capsys.disabled():
        print(
            f"\nbroken image: rollout stopped at {names[0]} after {end - start:.1f}s; {len(watch.requests)} "
            f"requests through the router, {len(failed)} failed; {REPLICAS - 1} replicas served throughout"
        )
