# The two front-door commands are `make demo` and `make test`; both set up what they need.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
# Tests and benchmarks read the shared benchmark data when it is beside the checkout.
export VERILOOP_PATHS__DATA_DIR ?= $(abspath ../shared/data)

.PHONY: setup services demo test lint typecheck pytest

setup:
	@scripts/setup-python.sh

# Test services: sandbox tools and dockerd, the verifiers (Dafny, Nagini's own venv), PostgreSQL,
# Chromium and docker-compose for the dashboard's browser tests and the compose.yaml check.
services:
	@bash scripts/setup-sandbox.sh
	@bash scripts/setup-verifiers.sh
	@bash scripts/setup-browser.sh > /dev/null
	@bash scripts/start-postgres.sh > .postgres-url

# The demo needs bubblewrap (its default sandbox) and Dafny (its Treefinement step), not Docker or Nagini.
demo: setup
	@VERILOOP_SKIP_DOCKER=1 bash scripts/setup-sandbox.sh
	@VERILOOP_SKIP_NAGINI=1 bash scripts/setup-verifiers.sh
	$(BIN)/veriloop demo

lint: setup
	$(BIN)/ruff check veriloop tests
	$(BIN)/ruff format --check veriloop tests

typecheck: setup
	$(BIN)/mypy

# Two pytest workers, a test file each at a time: most tests wait on one single-threaded tool (Dafny's Z3, Nagini's
# JVM, a compiler, torch pinned to one thread) or on a sandbox, so two keep both cores busy (CI went from 71 min).
PYTEST_WORKERS ?= 2
pytest: setup services
	VERILOOP_TEST_POSTGRES_URL="$$(tail -n 1 .postgres-url)" VERILOOP_REQUIRE_POSTGRES=1 \
	  $(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=15

test: lint typecheck pytest

# The fast tests, on two workers like `make test`: no slow, model, docker, browser, postgres or gpu marker, and no services started; a part
# that is missing here (bwrap, dafny, nagini, the data folder) skips by marker (CONTRIBUTING.md, "Tests").
.PHONY: unit
UNIT_MARKERS := not slow and not model and not docker and not browser and not postgres and not gpu
unit: setup
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile -m "$(UNIT_MARKERS)" --durations=10
