# Two commands on a fresh machine: `make demo` and `make test`. Each creates .venv if missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test bench venv clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	rm -f examples/tickets.db examples/tickets.db-wal examples/tickets.db-shm
	$(PY) examples/tickets.py

# pytest exits 5 when it collects nothing; that is a failure of the suite here, not a pass.
test: $(STAMP)
	$(VENV)/bin/pytest tests benchmarks -m "not slow" --benchmark-disable -p no:cacheprovider

bench: $(STAMP)
	$(VENV)/bin/pytest benchmarks --benchmark-only

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
