# groupcoord — every target installs what it needs on a fresh Debian machine.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
APT_STAMP := $(VENV)/.apt-installed
ARGS    ?=

.PHONY: install run test bench lint clean apt-deps

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev,cluster]'
	touch $(STAMP)

install: $(STAMP)

# Debian packages used by tests against real components (kcat, promtool, zookeeper).
$(APT_STAMP): | $(BIN)/python
	@if ! command -v kcat >/dev/null || ! command -v promtool >/dev/null; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends kcat prometheus >/dev/null; \
	  else echo "apt-deps: not root, skipping kcat/prometheus install"; fi; \
	fi
	touch $(APT_STAMP)

apt-deps: $(APT_STAMP)

run: $(STAMP)
	$(BIN)/groupcoord serve $(ARGS)

test: $(STAMP) $(APT_STAMP)
	$(BIN)/python -m pytest -q -m "not spark" $(ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests selected"; exit 0; fi; exit $$rc

BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[dev,cluster,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python -m tests.bench $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check coordinator protocol client spark_bridge tests

clean:
	rm -rf $(VENV) build *.egg-info
