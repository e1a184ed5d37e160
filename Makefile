# `make run` and `make test` do all set-up on a fresh machine, then run.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: setup run test lint unit sim clean chromium npm java

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

# the dashboard tests drive Debian's chromium through Playwright (never `playwright install`)
chromium:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q chromium; }

# Spark (the connector in spark/, its tests and `folio bench spark`) needs a Java 17 runtime
java:
	@command -v java >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q openjdk-17-jre-headless; }

setup: $(STAMP)

# the conformance tests run Pulsar's documented Node.js clients with the `ws` package,
# and its REST example and the README walkthrough with curl
NODE_STAMP := tests/conformance/node_modules/.installed-stamp
$(NODE_STAMP): tests/conformance/package.json tests/conformance/package-lock.json
	@command -v npm >/dev/null && command -v curl >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q nodejs npm curl; }
	cd tests/conformance && npm ci --no-audit --no-fund
	touch $(NODE_STAMP)

npm: $(NODE_STAMP)

run: setup java
	$(VENV)/bin/folio up

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

# two passes: every test but the fault runs on both cores (pytest-xdist, a test file per
# worker), then the fault runs alone, so their timing (power losses that bite, the heal
# bound) is measured on a box nothing else in the suite is loading
test: lint chromium npm java
	status=0; \
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not quiet" --durations=30 --junitxml=.folio/test-results.xml || status=$$?; \
	$(PY) -m pytest -q -m quiet --durations=10 --junitxml=.folio/test-results-quiet.xml || status=$$?; \
	exit $$status

unit: setup
	$(PY) -m pytest -q -m "unit or sim"

clean:
	rm -rf $(VENV) .folio .folio-faults .pytest_cache .mypy_cache .ruff_cache tests/conformance/node_modules
