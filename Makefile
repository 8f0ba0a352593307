# Two entry points for operators: `make plan` (no credentials needed) and `make test`.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
STACK ?= prod

.PHONY: plan test bench

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

plan: $(STAMP)
	$(VENV)/bin/python -m allocation plan --stack $(STACK)

test: $(STAMP)
	$(VENV)/bin/python -m pytest

bench: $(STAMP)
	$(VENV)/bin/python benchmarks/plan_bench.py
	$(VENV)/bin/python benchmarks/program_bench.py
