# groupcoord — every target installs what it needs on a fresh Debian machine.
# The interpreter the venv is built on: Debian's /usr/bin/python3 when it is 3.11+ and can make venvs (it is
# built with PGO+LTO and a static libpython; the pyenv build on PATH is a shared-libpython build without
# PGO, measured ~1.3-1.5x slower on our hot paths), else python3 from PATH. `make PY=python3.12 ...` overrides.
SYSTEM_PY := /usr/bin/python3
PY      ?= $(shell $(SYSTEM_PY) -c 'import sys, ensurepip; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 \
             && echo $(SYSTEM_PY) || echo python3)
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
APT_STAMP := $(VENV)/.apt-installed
ARGS    ?=

.PHONY: install compile run test test-fast bench lint clean apt-deps

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev,cluster]'
	touch $(STAMP)

# Byte-compile our packages, as a wheel install would (an editable install does not, and with
# PYTHONDONTWRITEBYTECODE set every server start would compile them again: ~0.1 s of each spawn).
# Quick when nothing changed; run before the server starts and before benchmarks.
PACKAGES := coordinator protocol client spark_bridge
compile: $(STAMP)
	@$(BIN)/python -m compileall -q $(PACKAGES) >/dev/null

install: $(STAMP)

# Debian packages used by tests against real components (kcat, promtool, zookeeper, burrow).
$(APT_STAMP): Makefile | $(BIN)/python
	@if ! command -v kcat >/dev/null || ! command -v promtool >/dev/null; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends kcat prometheus >/dev/null; \
	  else echo "apt-deps: not root, skipping kcat/prometheus install"; fi; \
	fi
	@if [ ! -f /usr/share/java/zookeeper.jar ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends zookeeper >/dev/null; \
	  else echo "apt-deps: not root, skipping zookeeper install"; fi; \
	fi
	@if [ ! -x /usr/bin/Burrow ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends burrow >/dev/null; \
	  else echo "apt-deps: not root, skipping burrow install"; fi; \
	fi
	touch $(APT_STAMP)

apt-deps: $(APT_STAMP)

run: compile
	$(BIN)/groupcoord serve $(ARGS)

# The docker-compose topology as local processes on 127.0.0.1 (deploy/local_cluster.py; docs/cluster.md):
# ZooKeeper, three nodes and Prometheus, data and logs under ./cluster-data (CLUSTER_* env vars override).
# `make cluster SECURE=1`: the same, secured (SASL_SSL, TLS between nodes, SCRAM users, ACLs for User:app;
# docs/cluster.md "Secured cluster"); it makes the certificates (`make certs`) when they are missing or expiring.
.PHONY: cluster cluster-stop certs compose-secrets
SECURE  ?=
cluster: compile $(APT_STAMP)
	$(BIN)/python deploy/local_cluster.py start$(if $(filter 1 yes true,$(SECURE)), --secure)

cluster-stop: | $(BIN)/python
	$(BIN)/python deploy/local_cluster.py stop

# A CA and node1..3 certificates (deploy/certs.py; kept while valid, never committed).
CERTS_DIR ?= $(or $(CLUSTER_DIR),cluster-data)/certs
certs: $(STAMP)
	$(BIN)/python deploy/certs.py $(CERTS_DIR)

# For `docker compose -f deploy/docker-compose.yml -f deploy/docker-compose.secure.yml up`: certificates in
# deploy/certs/ and random passwords in deploy/secrets/{admin,app}.password (made once; both gitignored).
compose-secrets: $(STAMP)
	$(BIN)/python deploy/certs.py deploy/certs
	@umask 077 && mkdir -p deploy/secrets && for user in admin app; do \
	  [ -s deploy/secrets/$$user.password ] || \
	    $(BIN)/python -c 'import secrets; print(secrets.token_urlsafe(24))' > deploy/secrets/$$user.password; \
	done && echo "passwords in deploy/secrets/admin.password, deploy/secrets/app.password"

# PySpark (~456 MB) for spark_bridge and its tests (marked `spark`), which `make test` runs with the rest.
SPARK_STAMP := $(VENV)/.spark-installed

$(SPARK_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[dev,cluster,spark]'
	touch $(SPARK_STAMP)

# The npm project of the JavaScript client tests (tests/compat/js), from its lock file. CKJS_LINKING=dynamic: when
# @confluentinc/kafka-javascript's prebuilt addon cannot be downloaded (from github.com), node-pre-gyp builds
# librdkafka from the bundled source against the system's OpenSSL and zlib (~2 min on 2 cores), instead of
# its default static build, which downloads OpenSSL, zlib, zstd and curl sources from github.com too.
JS_DIR   := tests/compat/js
JS_STAMP := $(JS_DIR)/node_modules/.installed

$(JS_STAMP): $(JS_DIR)/package.json $(JS_DIR)/package-lock.json
	cd $(JS_DIR) && CKJS_LINKING=dynamic npm ci --no-audit --no-fund
	touch $(JS_STAMP)

# The stream processors' venvs (Quix Streams, Faust: tests/compat/stream_support.py, under .venv/streams), built
# before the suite starts rather than inside the first test that needs them (~25 s each on a fresh clone);
# stream_support.ensure rebuilds one whose pinned requirements changed.
STREAMS_STAMP := $(VENV)/streams/.all-installed

$(STREAMS_STAMP): $(STAMP) tests/compat/stream_apps/requirements-quix.txt tests/compat/stream_apps/requirements-faust.txt
	$(BIN)/python -c 'import sys; sys.path.insert(0, "tests/compat"); import stream_support as s; [s.ensure(n) for n in s.NAMES]'
	touch $(STREAMS_STAMP)

# `make test`: the whole suite in two phases, one command, green only when both are (issue #35 item 7):
#  1. on pytest-xdist workers. Most tests wait on clocks (server starts, session timeouts, rebalances): on 2
#     cores 6 workers took 5-6 min, 4 took 7-8, the serial suite 15-16; 8 gained little more and load the
#     CPU more. TEST_WORKERS=auto: 6 (tests/conftest.py's WORKERS), fewer when ARGS names fewer files, none
#     for one file or with --pdb; TEST_WORKERS=N sets it. --dist loadgroup turns on tests/conftest.py's
#     scheduler: a test file (or a group: all of tests/spark, one JVM) at a time per worker, longest first.
#     Every worker has its own ports (server_process.free_port), temp dirs (tmp_path) and ZooKeeper.
#  2. the tests marked `serial` (they need the machine to themselves; each mark says why), in one process.
# Each phase prints pytest's summary line; a last line gives both wall times and the total. ARGS goes to both
# phases (`make test ARGS=tests/cluster`, `ARGS='-k commit -x'`); pytest's exit status 5 (no tests selected)
# counts as success.
# pytest keeps the assertion-rewritten test modules in tests/**/__pycache__ (gitignored), unless
# PYTHONDONTWRITEBYTECODE is set: then every run, and every worker, rewrites all of them again (~5 s of CPU
# each), so the test targets unset it. On a fresh clone one collection before the phases writes them once,
# instead of all 6 workers rewriting all of them at the same time. The printed wall times are the two phases':
# set-up (venvs, npm, apt, this collection) comes before them.
TEST_WORKERS ?= auto
PYTEST  := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q
test: compile $(APT_STAMP) $(SPARK_STAMP) $(JS_STAMP) $(STREAMS_STAMP)
	@$(PYTEST) --collect-only -q >/dev/null 2>&1 || true  # assertion-rewritten test modules, once
	@t0=$$(date +%s); \
	$(PYTEST) -n $(TEST_WORKERS) --dist loadgroup --phase parallel $(ARGS); rc1=$$?; \
	t1=$$(date +%s); rc2=5; \
	case $$rc1 in 0|1|5) $(PYTEST) -n 0 --phase serial $(ARGS); rc2=$$?;; esac; \
	t2=$$(date +%s); \
	echo "make test: parallel phase $$((t1 - t0)) s (exit $$rc1), serial phase $$((t2 - t1)) s (exit $$rc2)," \
	     "total $$((t2 - t0)) s"; \
	if [ $$rc1 -eq 5 ] && [ $$rc2 -eq 5 ]; then echo "no tests selected"; exit 0; fi; \
	for rc in $$rc1 $$rc2; do case $$rc in 0|5) ;; *) exit $$rc;; esac; done

# The inner loop: the sans-IO core, the wire protocol, storage and the import graph (no servers, no clocks).
test-fast: compile
	$(PYTEST) tests/core tests/protocol tests/storage tests/test_runtime_imports.py $(ARGS)

BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[dev,cluster,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP) $(SPARK_STAMP) compile
	$(BIN)/python -m tests.bench $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check coordinator protocol client spark_bridge tests

clean:
	rm -rf $(VENV) build *.egg-info
