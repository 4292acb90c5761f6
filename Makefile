# The two commands a new user needs: `make demo` and `make test`. Both set up .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SCENARIO ?= scenarios/demo.toml

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test,bench]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/fedrecsim run $(SCENARIO)

test: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	OPENBLAS_NUM_THREADS=1 $(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache
