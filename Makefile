# quixsinks developer commands. Everything runs in a local virtualenv (.venv) that
# `make install` creates; Java (for Spark) is installed from Debian when missing.

VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# TEST_REPORTS=DIR: each pytest run of `make test` also writes DIR/junit-<run>.xml and
# DIR/durations-<run>.txt (every test phase, slowest first); <run> is main or compat
TEST_REPORTS ?=
reports = $(if $(TEST_REPORTS),--junitxml=$(TEST_REPORTS)/junit-$(1).xml \
	--durations-file=$(TEST_REPORTS)/durations-$(1).txt)

.PHONY: install java services demo test test-compat test-unit test-integration bench chaos lint format docs clean

install: java $(STAMP)

# editable_mode=compat puts the checkout itself on sys.path: setup.py generates the
# top-level pyspark_quixsinks_* modules there (git ignores them), and Spark finds them
# (auto-registration) with pkgutil.iter_modules, which does not see the import hook of a
# default editable install. They are generated again when the sink list changes.
$(STAMP): pyproject.toml Makefile setup.py quixsinks/catalogue.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]" --config-settings editable_mode=compat
	touch $(STAMP)

java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "Java not found: installing openjdk-17-jre-headless (Spark needs Java 17+)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless; }

## Servers the integration tests start (PostgreSQL...): installed from Debian when missing.
services:
	bash tests/services/install.sh
	bash tests/services/install_azure.sh
	bash tests/services/install_kinesis.sh
	bash tests/services/install_bigquery.sh

## Run the demo: a streaming job from an embedded source into the csvfile and file sinks.
demo: install
	$(PY) examples/streaming_demo.py

## Run every test (unit and integration, with the servers they need), then the compat tests.
## The compat virtualenv is built in the background while the main run's tests go.
# `make test` runs the suite in several pytest runs, one after the other, each split over
# TEST_WORKERS pytest-xdist workers (whole files per worker: module fixtures start once),
# one Spark JVM and its own servers per worker. The parts keep memory low: in CI here on
# 12-06, the three parts took 378, 252 and 176 s with memory use peaking at 11.1 GB, one
# run of everything 718 s with 15.0 GB, still climbing at its end. A test waits on Spark,
# its servers and subprocesses most of the time, so two workers on 2 cores take about 0.6
# of the time of one (three workers: no faster). Files marked `long` run first
# (conftest.py), so no worker starts one last. Every part runs; any failure fails.
# TEST_WORKERS=1: no xdist.
TEST_WORKERS ?= 2
XDIST = $(if $(filter-out 0 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)
TEST_PARTS := tests/integration/test_[a-d]*.py|\
	tests/integration/test_[e-p]*.py|tests/integration/test_[q-z]*.py tests/unit
test: install services
	@{ $(MAKE) --no-print-directory $(COMPAT_VENV)/.installed-stamp > .compat-venv.log 2>&1; \
	   echo $$? > .compat-venv.rc; } & \
	status=0; n=0; parts='$(TEST_PARTS)'; set -f; IFS='|'; \
	for part in $$parts; do set +f; unset IFS; n=$$((n + 1)); \
	  echo "== make test: part $$n: $$part"; \
	  $(PY) -m pytest $$part $(XDIST) $(PYTEST_ARGS) \
	    $(if $(TEST_REPORTS),--junitxml=$(TEST_REPORTS)/junit-main-$$n.xml \
	    --durations-file=$(TEST_REPORTS)/durations-main-$$n.txt) || status=1; set -f; IFS='|'; \
	done; set +f; unset IFS; wait; \
	if [ "$$(cat .compat-venv.rc)" != 0 ]; then cat .compat-venv.log; exit 1; fi; \
	if [ $$status != 0 ]; then exit $$status; fi
	$(MAKE) test-compat

## The oldest supported versions (pyspark 4.1.0, pyarrow 15, psycopg2 2.9.5: the floors in
## pyproject.toml) in a second virtualenv: the unit
## tests and the file, csvfile and postgresql integration tests. `make test` covers the newest.
## The iceberg extra (pyarrow>=17) is not installed there; conftest.py names those skips.
COMPAT_VENV ?= .venv-compat
COMPAT_PINS := pyspark==4.1.0 pyarrow==15.0.0 "numpy<2" psycopg2-binary==2.9.5
COMPAT_TESTS := tests/unit tests/integration/test_file_sink.py tests/integration/test_guarantees.py \
	tests/integration/test_postgresql.py tests/integration/test_type_fidelity.py
test-compat: java services $(COMPAT_VENV)/.installed-stamp
	$(COMPAT_VENV)/bin/python -c "import pyspark, pyarrow; print('compat:', 'pyspark', pyspark.__version__, 'pyarrow', pyarrow.__version__)"
	QUIXSINKS_COMPAT=1 $(COMPAT_VENV)/bin/python -m pytest $(COMPAT_TESTS) $(XDIST) $(PYTEST_ARGS) \
	  $(call reports,compat)

$(COMPAT_VENV)/.installed-stamp: pyproject.toml Makefile
	$(PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/pip install --quiet --upgrade pip
	printf '%s\n' $(COMPAT_PINS) > $(COMPAT_VENV)/constraints.txt
	$(COMPAT_VENV)/bin/pip install --quiet -c $(COMPAT_VENV)/constraints.txt -e ".[dev-compat]" \
	  --config-settings editable_mode=compat
	touch $@

test-unit: install
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-integration: install services
	$(PY) -m pytest tests/integration $(PYTEST_ARGS)

## Benchmarks: results in benchmarks/results/*.json and *.md
bench: install services
	$(PY) benchmarks/bench_foundation.py
	$(PY) benchmarks/bench_postgresql.py
	$(PY) benchmarks/bench_influxdb3.py
	$(PY) benchmarks/bench_influxdb1.py
	$(PY) benchmarks/bench_redis.py
	$(PY) benchmarks/bench_iceberg.py
	$(PY) benchmarks/bench_bigquery.py
	$(PY) benchmarks/bench_pubsub.py
	$(PY) benchmarks/bench_object_storage.py
	$(PY) benchmarks/bench_tsdatalake.py
	$(PY) benchmarks/bench_kinesis.py
	$(PY) benchmarks/bench_mqtt.py
	$(PY) benchmarks/bench_dedupe_memory.py
	$(PY) benchmarks/bench_dead_letters.py
	$(PY) benchmarks/bench_json_values.py
	$(PY) benchmarks/bench_floor.py
	$(PY) benchmarks/bench_cpu.py
	$(PY) benchmarks/bench_memory.py
	$(PY) benchmarks/bench_latency.py
	$(PY) benchmarks/harness/plot.py
	$(PY) benchmarks/harness/summary.py

## The fault matrix: every sink under every fault (tests/chaos); writes
## tests/chaos/results.json and docs/reliability.md. `make test` runs its quick cells.
chaos: install services
	$(PY) -m tests.chaos

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

## Regenerate the options tables in docs/sinks/*.md from the code, then build the docs site
## into site/.
docs: install
	$(PY) docs/generate.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) $(COMPAT_VENV) .pytest_cache .mypy_cache .ruff_cache demo-output site
