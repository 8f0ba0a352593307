# Two entry points for operators: `make plan` (no credentials needed) and `make test`;
# `make test-engine` runs the real-engine suite where Pulumi and its plugins are installed.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
BENCH_STAMP := $(VENV)/.installed-bench
STACK ?= prod

.PHONY: plan test test-sim test-engine k8s-tools test-kube bench

# The runtime (requirements.txt) is all `make plan` and the Pulumi program need; the test and lint
# tools (requirements-dev.txt) come on top for the test targets. .ci/run runs `make test`: both.
$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

$(DEV_STAMP): $(STAMP) requirements-dev.txt
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

plan: $(STAMP)
	$(VENV)/bin/python -m allocation plan --stack $(STACK)

# Three pytest-xdist workers on two cores: one runs the simulated-host tests in turn (they mostly
# wait for containers and hold a host-wide lock), the other two the rest, a module at a time
# (tests/scheduling.py). tests/README.md has the timings.
TEST_WORKERS ?= 3
# The simulator's own tests (marker `simulator`: tests/simhost/test_npu_sim.py, test_npu_smi.py,
# test_simulated_host.py) check sim/, not the program, and would wait on the simulated-host worker,
# the suite's critical path: `make test` leaves them out, `make test-sim` runs them (after a change
# to sim/), and .ci/run runs every test (`TEST_MARKS=`).
TEST_MARKS ?= not simulator

test: $(DEV_STAMP)
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadscope -m "$(TEST_MARKS)"

test-sim: $(DEV_STAMP)
	$(VENV)/bin/python -m pytest tests/simhost -m simulator

# The real Pulumi engine against the simulated host (docs/testing.md, "Verifying with the real engine"):
# needs pulumi, its Python language host and the docker and command plugins; skips without
# them unless ASCEND_FLEET_REQUIRE_ENGINE=1. Its pull test also needs Debian's docker-registry
# (.ci/run test-engine installs it) and fails, naming it, without it.
test-engine: $(DEV_STAMP)
	$(VENV)/bin/python -m pytest tests/engine -v --durations=0

# The real-API-server lane (docs/testing.md, "Kubernetes lane"): etcd, kube-apiserver and the
# pulumi-kubernetes provider built from the Go module proxy into $(K8S_TOOLS), outside the repository;
# test-kube skips without them unless ASCEND_FLEET_REQUIRE_KUBE=1.
K8S_TOOLS ?= /opt/k8s/bin

k8s-tools:
	ASCEND_FLEET_K8S_TOOLS=$(K8S_TOOLS) scripts/build-k8s-tools.sh

test-kube: $(DEV_STAMP)
	ASCEND_FLEET_K8S_TOOLS=$(K8S_TOOLS) $(VENV)/bin/python -m pytest tests/kube -v --durations=0

$(BENCH_STAMP): $(DEV_STAMP) requirements-bench.txt
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-bench.txt
	touch $@

bench: $(BENCH_STAMP)
	$(VENV)/bin/python benchmarks/plan_bench.py
	$(VENV)/bin/python benchmarks/program_bench.py
	$(VENV)/bin/python benchmarks/failover_bench.py
