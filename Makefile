# The two commands a new user needs: `make demo` and `make test`. Both set up .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SCENARIO ?= scenarios/demo.toml

.PHONY: demo test bench mutation clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test,bench]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/fedrecsim run $(SCENARIO)

test: $(STAMP)
	$(BIN)/python -m pytest

# Every workload beside its peer: the peers extra brings Flower's simulation engine (W7, W9) and Ray.
BENCH_STAMP := $(VENV)/.installed-bench
$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e ".[test,bench,peers]"
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	OPENBLAS_NUM_THREADS=1 $(BIN)/python -m benchmarks

# Mutation testing, slow and so not part of `make test` or CI: mutmut per module of the core, then the
# score table. One module: `make mutation MODULE=src/fedrecsim/seeding.py`. See tools/mutation.py.
MUTATION_STAMP := $(VENV)/.installed-mutation
$(MUTATION_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e ".[test,bench,mutation]"
	touch $(MUTATION_STAMP)

mutation: $(MUTATION_STAMP)
	$(BIN)/python tools/mutation.py run --module "$(MODULE)"

clean:
	rm -rf $(VENV) .pytest_cache
