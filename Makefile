# Chorus: the two commands that matter are `make demo` and `make test`.
# Both install and start what they need (venv, Kafka, PostgreSQL) and stop
# nothing: `make down` stops the local stack.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LOCAL := deploy/local
PYTEST_ARGS ?=
# The local stack's environment. Kafka is secured (SCRAM over TLS, ACLs): what runs here
# logs in as the local cluster's admin (made by deploy/local/kafka.sh); services started by
# the dev stack log in as their own principals, whose passwords live in KAFKA_USERS_DIR
# (`chorus access apply`). CHORUS_ENV=demo lets services start with the demo secrets (the
# local database password, demo API keys), which they refuse anywhere else.
# Decision events are signed (chorus.privacy.signing); `chorus access signing-keys` makes local keys.
KAFKA_USERS_DIR := $(CURDIR)/.local/kafka/secrets/users
SIGNING_DIR := $(CURDIR)/.local/kafka/secrets/signing
# The key service's data-key API is TLS only; `chorus access key-service-tls` makes a local
# certificate authority and its certificate here, which every local service trusts.
TLS_DIR := $(CURDIR)/.local/tls
# The third reference workflow is a project of its own (examples/support, written by following
# docs/tutorial.md): the local stack's topics, ACLs and database roles are those of the union of
# its registry with the platform's, and `make services` and the demo run its services beside.
PROJECT_SCHEMAS := --schemas-dir $(CURDIR)/examples/support/schemas
LOCAL_ENV = set -a && . $(CURDIR)/.local/kafka/admin.env && set +a && \
	CHORUS_KAFKA_USERS_DIR=$(KAFKA_USERS_DIR) CHORUS_SIGNING_DIR=$(SIGNING_DIR) CHORUS_ENV=demo \
	CHORUS_KEY_SERVICE_TLS_CERT_FILE=$(TLS_DIR)/key_service.pem CHORUS_KEY_SERVICE_TLS_KEY_FILE=$(TLS_DIR)/key_service.key \
	CHORUS_KEY_SERVICE_CA_FILE=$(TLS_DIR)/ca.pem

.PHONY: help setup up down status demo services test test-fast test-service test-deploy test-pythons test-compose test-local-model lint fmt bench lock clean \
	schemas docs topics bench-quick test-reliability observe soak

help:
	@echo "make demo   start Kafka, PostgreSQL and every service, run the main job"
	@echo "make test   start what is needed and run every test against real Kafka and PostgreSQL"
	@echo "make test-fast   handlers, kernel steps, contracts, tools: no Kafka, no binaries (< 2 min)"
	@echo "make test-service S=NAME   one service's tests (tests/services/NAME), on the local stack"
	@echo "make test-pythons   the wheel as users install it: the tutorial from pip install; Python 3.10 to 3.13"
	@echo "make test-compose   docker-compose.yml built, started and the demo run against it (a Docker engine)"
	@echo "make test-local-model   the agent loop against a small real model on CPU (builds llama.cpp once: 5 min)"
	@echo "make soak   an hour of load with faults every few minutes (SOAK_MINUTES, SOAK_SEED); needs root"
	@echo "make up | down | status | lint | fmt | bench | setup | lock | clean"
	@echo "make services | observe   every service on its documented port | Prometheus on them (:9090)"
	@echo "make schemas | docs | topics   regenerate JSON Schemas | AsyncAPI doc; create Kafka topics"

$(STAMP): requirements.lock pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: requirements.lock is resolved for Python 3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q --require-hashes -r requirements.lock
	$(VENV)/bin/pip install -q --no-deps -e .
	@# No compose plugin here: tests/deploy/test_compose.py builds it when it needs one (make
	@# demo never does).
	@touch $(STAMP)

setup: $(STAMP)

up: setup
	$(LOCAL)/kafka.sh start
	$(LOCAL_ENV) $(VENV)/bin/chorus topics apply $(PROJECT_SCHEMAS)
	$(LOCAL_ENV) $(VENV)/bin/chorus access apply $(PROJECT_SCHEMAS)
	$(LOCAL_ENV) $(VENV)/bin/chorus access signing-keys $(PROJECT_SCHEMAS)
	$(VENV)/bin/chorus access key-service-tls --dir $(TLS_DIR)
	$(LOCAL)/postgres.sh start
	$(LOCAL_ENV) $(VENV)/bin/chorus access database $(PROJECT_SCHEMAS)

down:
	$(LOCAL)/kafka.sh stop
	$(LOCAL)/postgres.sh stop

status:
	-$(LOCAL)/kafka.sh status
	-$(LOCAL)/postgres.sh status

demo: up
	$(LOCAL_ENV) $(PY) -m chorus.tools.demo

# Every service in the foreground (API on :8080, sandbox on :9400) until Ctrl-C.
# RELEASES="invoice_agent@0.2.0 ..." also runs those releases beside (versioned rollouts).
services: up
	$(LOCAL_ENV) $(PY) -m chorus.tools.devstack $(foreach r,$(RELEASES),--release $(r))

# Prometheus (Debian's package) on http://127.0.0.1:$(PROMETHEUS_PORT), scraping what
# `make services` runs (it writes .local/observe/targets.json) with the alert rules of
# deploy/observability/prometheus. Foreground until Ctrl-C; data in .local/observe/data.
PROMETHEUS_PORT ?= 9090
observe: setup
	$(LOCAL)/prometheus.sh ensure
	@mkdir -p .local/observe/data
	@test -f .local/observe/targets.json || echo '[]' > .local/observe/targets.json
	prometheus --config.file=deploy/observability/prometheus/prometheus.local.yml \
	  --storage.tsdb.path=.local/observe/data --web.listen-address=127.0.0.1:$(PROMETHEUS_PORT)

# Test files run in TEST_WORKERS processes at once (pytest-xdist; a file's tests stay in one,
# so a module's stack starts once): most of a test's time is spent waiting on Kafka, the
# database or a service, and two workers keep both cores busy. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
# The compatibility gate runs first: against HEAD (uncommitted changes) and, when the
# clone has it, HEAD~1 (the last commit). A missing ref is a note, not a failure.
test: up
	$(VENV)/bin/chorus schemas check --against HEAD
	@if git rev-parse --verify -q HEAD~1 >/dev/null; then \
	  echo "$(VENV)/bin/chorus schemas check --against HEAD~1"; \
	  $(VENV)/bin/chorus schemas check --against HEAD~1; \
	fi
	$(LOCAL)/browser.sh ensure
	$(LOCAL)/prometheus.sh ensure
	$(LOCAL)/pgbouncer.sh ensure
	$(LOCAL)/helm.sh ensure
	$(LOCAL_ENV) $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --timeout=900 --durations=25 -m "not pythons and not wheel and not compose and not localmodel" $(PYTEST_ARGS)

# The wheels as users install them, one test at a time (each starts processes enough to load
# both cores; beside make test's they made its reliability scenarios miss their deadlines):
# the tutorial from `pip install` in an empty folder, with a Kafka and PostgreSQL of its own
# in a network namespace, on 3.11; then the other Pythons Chorus supports (3.10, 3.12, 3.13: pyenv or
# PATH), the wheel installed from .local/wheelhouse into a virtualenv per version, its fast
# tier run there, and a project `chorus new` starts there tested on the local stack. CI
# runs it after test.
test-pythons: up
	$(LOCAL)/helm.sh ensure
	$(LOCAL_ENV) $(PY) -m pytest tests/e2e/test_tutorial.py tests/deploy/test_pythons.py -m "wheel or pythons" --timeout=1800 --durations=5 $(PYTEST_ARGS)

# The support triage's agent loop against a small real model (SmolLM2-135M-Instruct, from
# PyPI) that llama-cpp-python's OpenAI-compatible server runs on CPU: the model's own tool
# calls, tokens and cost, kept turn by turn. The first run builds llama-cpp-python from source
# (5 minutes on 2 idle cores, 15 on busy ones: PyPI has no wheel of it), which is why make test leaves it out.
test-local-model: up
	$(LOCAL)/localmodel.sh ensure
	$(LOCAL_ENV) $(PY) -m pytest tests/deploy/test_local_model.py -m localmodel --timeout=1800 --durations=5 $(PYTEST_ARGS)

# docker-compose.yml run for real (tests/deploy/test_compose_up.py): a Docker engine (Debian's
# docker.io, started here when none answers), the bases (built from Debian packages where no
# container registry answers), the image, the stack up with the support project, the demo
# and the samples against it, the CLI from the host, the stack down. Needs no `make up`.
test-compose: setup
	$(LOCAL)/docker.sh ensure
	$(PY) -m pytest tests/deploy/test_compose_up.py -m compose --timeout=2700 --durations=5 $(PYTEST_ARGS)

# The fast tier: what needs neither Kafka, PostgreSQL nor any binary beyond the venv —
# handler tests (the testing kit), the kernel's steps on the memory store, the feature
# packages' unit tests, tools and the registry's contracts.
FAST := tests/kernel tests/features tests/services tests/tools contracts-tests
test-fast: setup
	CHORUS_ENV=demo $(PY) -m pytest $(FAST) -m "not integration" -q --timeout=120 $(PYTEST_ARGS)

# One service's tests: its handlers in memory and the service on the local stack.
S ?=
test-service: setup
	@test -n "$(S)" || { echo "make test-service S=NAME: name one of: $$(ls tests/services | grep -v __ | tr '\n' ' ')" >&2; exit 2; }
	@test -d tests/services/$(S) || { echo "no tests/services/$(S); services with tests: $$(ls tests/services | grep -v __ | tr '\n' ' ')" >&2; exit 2; }
	@$(MAKE) --no-print-directory up
	$(LOCAL_ENV) $(PY) -m pytest tests/services/$(S) --timeout=900 $(PYTEST_ARGS)

# The deployment artefacts: the Helm chart, compose, the alert rules (helm, promtool, docker).
test-deploy: up
	$(LOCAL)/prometheus.sh ensure
	$(LOCAL)/helm.sh ensure
	$(LOCAL_ENV) $(PY) -m pytest tests/deploy --timeout=900 $(PYTEST_ARGS)

# The reliability suite (tests/reliability): every scenario, faults injected into real
# services on real Kafka and PostgreSQL (the broker and database restarts on private ones
# it starts itself). Report in .local/reliability-results/<timestamp>/; the last line on
# stdout is `scenarios=N workflows=M faults=K lost=0 duplicate_effects=0 stuck=0`.
# RELIABILITY_ARGS="--only NAME" runs one scenario. Its short version runs in `make test`.
RELIABILITY_ARGS ?=
test-reliability: up
	$(LOCAL_ENV) $(PY) -m tests.reliability $(RELIABILITY_ARGS)

# The soak (tests/soak): SOAK_MINUTES (default 60) of the three reference workflows at half
# of what this machine sustains (measured first), a fault drawn at random every 1-3 minutes,
# sometimes two at once: processes killed and paused, brokers killed, PostgreSQL restarted,
# services partitioned (network namespaces, nftables), latency and packet loss, clock skew.
# SOAK_SEED replays a run's schedule (its first line prints it). Report and plots in
# .local/soak-results/<timestamp>/; SOAK_PUBLISH=docs/soak makes it the committed latest
# result. Needs root (network namespaces); not part of `make test`.
SOAK_MINUTES ?= 60
SOAK_SEED ?=
SOAK_PUBLISH ?=
soak: up
	bench/make-venv.sh
	$(LOCAL_ENV) $(PY) -m tests.soak --minutes $(SOAK_MINUTES) $(if $(SOAK_SEED),--seed $(SOAK_SEED)) \
		$(if $(SOAK_PUBLISH),--publish $(SOAK_PUBLISH))

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy services tests contracts-tests
	cd services && ../$(VENV)/bin/lint-imports --config ../pyproject.toml
	$(VENV)/bin/deptry services --extend-exclude "services/chorus/reference"
	cd services/chorus/reference && $(CURDIR)/$(VENV)/bin/deptry .

fmt: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# JSON Schemas under schemas/ from the models in services/chorus/contracts.
schemas: setup
	$(VENV)/bin/chorus schemas generate
	$(PY) contracts-tests/state_schemas.py

# schemas/asyncapi.yaml, docs/architecture.md (event-flow pictures) and docs/events.md (each
# event's producers, consumers and tests) from the registry (after regenerating the schemas
# they document); the Grafana dashboards from services/chorus/tools/dashboards.py; the Helm
# chart's registry file (services, ports, topics, ACLs, HTTP calls) and docker-compose.yml's
# URL files (deploy/docker/http) from the registry.
docs: schemas
	$(VENV)/bin/chorus schemas asyncapi
	$(VENV)/bin/chorus schemas diagrams
	$(VENV)/bin/chorus events docs
	$(PY) -m chorus.tools.dashboards
	$(PY) -m chorus.tools.chart
	$(PY) -m chorus.tools.compose

# Every topic of schemas/topics on CHORUS_KAFKA_BOOTSTRAP (created, or partitions and
# configs brought in line; never shrunk). `make up` runs it after starting Kafka.
topics: setup
	$(LOCAL_ENV) $(VENV)/bin/chorus topics apply

# Benchmarks (bench/README.md): Chorus and its baselines side by side, one run, same broker
# and database. Results in .local/bench-results/<timestamp>-<mode>/. The side venvs (chart
# and profiler tools; DBOS, which cannot share .venv with faust; Restate's SDK, with its
# server binary from the npm registry) are built once.
bench: up
	bench/make-venv.sh
	bench/dbos/make-venv.sh
	bench/restate/make-venv.sh
	$(LOCAL_ENV) $(PY) -m bench.run --mode full

# The short version (under 2 minutes once the side venvs exist); its last line is
# R2=.. R3=.. R4_p50_ms=.. R4_p99_ms=.. R5=.. R5_p50_ms=.. R5_p99_ms=.. ... timer_p99_ms=..
# R5_per_s=.. R5_sealed_per_s=.. R5_sealed_p50_ms=.. R5_sealed_p99_ms=.. R5_sealed_ratio=..
# signed_hop_ratio=.. R5_vs_restate=.. R5_p50_vs_restate=.. R5_p99_vs_restate=.. R5_closed_vs_restate=..
bench-quick: up
	bench/make-venv.sh
	bench/dbos/make-venv.sh
	bench/restate/make-venv.sh
	$(LOCAL_ENV) $(PY) -m bench.run --mode quick

# Re-pin after editing pyproject.toml (pip-tools, with hashes; pins already in the
# files are kept unless UPGRADE=--upgrade). requirements-runtime.lock is what the image
# installs (runtime, the analytics and otlp extras); requirements.lock adds the dev tools.
UPGRADE ?=
PIP_COMPILE = .lockenv/bin/pip-compile -q --generate-hashes --strip-extras --no-emit-find-links $(UPGRADE)
lock:
	rm -rf .lockenv && $(PYTHON) -m venv .lockenv
	.lockenv/bin/pip install -q pip-tools
	@# The reference distribution's own dependencies (the sandbox's mail server) join both
	@# locks: the image's reference target and this venv install it. Its dependency on
	@# chorus-workflows is this tree, which no index has.
	.lockenv/bin/python -c 'import tomllib, sys; deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]; print("\n".join(d for d in deps if not d.startswith("chorus-workflows")))' \
		services/chorus/reference/pyproject.toml > .lockenv/reference.in
	$(PIP_COMPILE) --extra analytics --extra otlp --extra pydantic-ai -o requirements-runtime.lock pyproject.toml .lockenv/reference.in
	$(PIP_COMPILE) --extra analytics --extra otlp --extra pydantic-ai --extra dev -c requirements-runtime.lock -o requirements.lock pyproject.toml .lockenv/reference.in
	rm -rf .lockenv

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
