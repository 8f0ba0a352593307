"""How `make test` shares the suite among its pytest-xdist workers (`-n 3 --dist loadscope`).

A worker gets a whole scope at a time: a module (a class, for tests in a class), except that every
test under tests/simhost is one scope, since they share one simulated host per session and the
host holds a machine-wide lock (sim/host.py `LOCK_FILE`): two workers with a host each would wait
on each other. Modules stay whole, so a module-scoped fixture (the real router's fleet in
test_router_e2e, the venv in test_router_image) is built once.

The scopes that mostly wait go first, each to a worker of its own, so the CPU-bound rest of the
suite runs beside them on the other workers instead of after them.

pytest-xdist's own `--dist loadgroup` (`xdist_group` marks) would say this with marks, but in
pytest-xdist 3.8.0 it renames `item._nodeid`, which pytest 9 no longer reads (nodes keep `_id`), so
every test stays a group of its own. This subclass uses only what loadscope does: it cuts scopes
from node ids (`_split_scope`) and hands out the first scope of its queue (`_assign_work_unit`).
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

SIMHOST = "tests/simhost"
# Longest first: about 4 minutes of container waits, the real router's failovers (about 2), the
# router image's pip installs (half a minute).
FIRST = (SIMHOST, "tests/test_router_e2e.py", "tests/test_router_image.py")


class SuiteScheduling(LoadScopeScheduling):
    def _split_scope(self, nodeid: str) -> str:
        if nodeid.startswith(f"{SIMHOST}/"):
            return SIMHOST
        return super()._split_scope(nodeid)

    def _assign_work_unit(self, node) -> None:
        first = next((scope for scope in FIRST if scope in self.workqueue), None)
        if first is not None:
            self.workqueue.move_to_end(first, last=False)
        super()._assign_work_unit(node)
