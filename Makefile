# Quick start: `make demo` and `make test` each set up .venv when it is missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint lab bench bench-triage bench-real bench-real-sealed clean browser

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

# ruff and mypy (configured in pyproject.toml; issue 16). mypy's first run reads torch's
# annotations (~40 s of CPU); later runs reuse .mypy_cache and take a few seconds.
lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy

test: lint $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 tests

bench: $(STAMP)
	$(BIN)/python benchmarks/overhead.py

# How much of torch's own error catalogue the triage classifies (tests/data/torch_errors_*.tsv).
bench-triage: $(STAMP)
	$(BIN)/python benchmarks/triage_coverage.py

# Real code nobody here wrote (issue 24): ../shared/realcases and corpora/, development half;
# the sealed half once per round, just before submitting (corpora/README.md).
bench-real: $(STAMP)
	$(BIN)/python benchmarks/real.py

bench-real-sealed: $(STAMP)
	$(BIN)/python benchmarks/real.py --sealed

clean:
	rm -rf $(VENV) build src/*.egg-info

# The HTML report's browser tests (tests/test_browser.py) drive Debian's chromium; a small CJK
# font (1.6 MB) lets the Chinese page render. Needs root for apt-get; skipped when installed.
browser:
	@if command -v chromium >/dev/null 2>&1 && dpkg -s fonts-wqy-microhei >/dev/null 2>&1; then \
	  echo "browser: $$(command -v chromium) and fonts-wqy-microhei already installed"; \
	elif [ "$$(id -u)" = 0 ]; then \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium fonts-wqy-microhei; \
	else \
	  echo "make browser: run as root (apt-get install chromium fonts-wqy-microhei)" >&2; exit 1; \
	fi

