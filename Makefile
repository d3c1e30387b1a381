# lambdaline: two commands on a fresh machine.
#   make demo   set up, then run the demo
#   make test   set up, then lint and run the whole test suite
# `make setup` is shared by both and idempotent: a virtual environment in .venv,
# the package with its dev extras, and the JVM jars resolved by Maven.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# the JDK that Spark, the broker and keytool run on: JAVA_HOME's, as their own scripts do
JAVA   := $(if $(JAVA_HOME),$(JAVA_HOME)/bin/java,java)

.PHONY: setup prerequisites jars demo test test-unit lint bench-generator bench-batch clean

setup: prerequisites $(STAMP) jars

prerequisites:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "lambdaline needs Python >= 3.11; set PYTHON=python3.11")'
	@command -v $(JAVA) >/dev/null || { echo "lambdaline needs a JDK 17+ ($(JAVA) not found)"; exit 1; }
	@$(JAVA) -version 2>&1 | awk -F'"' '/version/ { split($$2, v, "."); if (v[1] < 17) { print "lambdaline needs JDK 17+, found " $$2; exit 1 } }'
	@command -v mvn >/dev/null || { echo "lambdaline needs Maven (mvn not found)"; exit 1; }

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

jars: $(STAMP)
	$(BIN)/lambdaline jvm resolve

demo: setup
	$(BIN)/lambdaline demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

test: setup lint  # the 15 slowest tests are listed, to keep the suite's time in view
	$(BIN)/pytest --durations=15

test-unit: $(STAMP)
	$(BIN)/pytest -m "not integration and not e2e"

bench-generator: setup
	$(BIN)/python benchmarks/generator_throughput.py

bench-batch: setup
	$(BIN)/python benchmarks/batch_throughput.py

clean:
	rm -rf $(VENV) .lambdaline .pytest_cache .mypy_cache .ruff_cache .hypothesis
