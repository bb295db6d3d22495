# Quick start: `make demo` and `make test` each set up .venv when it is missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lab bench bench-triage clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# The script runs unchanged and prints its own lines; the report follows on stderr.
demo: $(STAMP)
	$(BIN)/torchtriage run examples/nan_in_forward.py

lab: $(STAMP)
	$(BIN)/torchtriage lab

test: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 tests

bench: $(STAMP)
	$(BIN)/python benchmarks/overhead.py

# How much of torch's own error catalogue the triage classifies (tests/data/torch_errors_*.tsv).
bench-triage: $(STAMP)
	$(BIN)/python benchmarks/triage_coverage.py

clean:
	rm -rf $(VENV) build src/*.egg-info
