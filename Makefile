# Two commands on a fresh machine: `make demo` and `make test`. Each creates .venv if missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo demo-batch test bench proof venv clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

# The demos need tarry alone: no extra, none of the test suite's dev tools (playwright, mypy...).
DEMO_STAMP := $(VENV)/.demo-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

$(DEMO_STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q -e .
	rm -f $(VENV)/.demo-*
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	rm -f examples/tickets.db examples/tickets.db-wal examples/tickets.db-shm
	$(PY) examples/tickets.py

# 1,000 prompts through OpenAI's Batch API (the official SDK against the project's fake
# provider server): one upload, one batch, results delivered by custom_id. Then 1,000 prompts:
# concurrent async model calls, 1,000 waits resumed with one resume_many, a Gate. Tarry with
# its `openai` extra, nothing else.
DEMO_BATCH_STAMP := $(VENV)/.demo-batch-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

$(DEMO_BATCH_STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q -e '.[openai]'
	rm -f $(VENV)/.demo-batch-*
	touch $(DEMO_BATCH_STAMP)

demo-batch: $(DEMO_BATCH_STAMP)
	$(PY) examples/openai_batch_eval.py
	$(PY) examples/batch_eval.py

# pytest exits 5 when it collects nothing; that is a failure of the suite here, not a pass.
test: $(STAMP)
	$(VENV)/bin/pytest tests benchmarks -m "not slow" --benchmark-disable -p no:cacheprovider

# The peers come from the `bench` extra; one that fails to install is recorded and reported
# as such (benchmarks/install_peers.py), which also builds tarry's wheel into
# .benchmarks/venvs/tarry: the counts (benchmarks/counts.py: callgrind instructions, bytes, RSS,
# ratios in turns) and the fresh processes run every system from a regular install. Needs
# valgrind. The run before is kept (.benchmarks/bench-previous.json): the report puts every
# count beside its previous value. The report is written even when a benchmark fails.
bench: $(STAMP)
	$(PY) benchmarks/install_peers.py .benchmarks/peers.json
	if [ -f .benchmarks/bench.json ]; then mv .benchmarks/bench.json .benchmarks/bench-previous.json; fi
	$(VENV)/bin/pytest benchmarks --benchmark-only -p no:cacheprovider \
		--benchmark-json=.benchmarks/bench.json --benchmark-columns=median,min,rounds; \
	status=$$?; \
	$(PY) benchmarks/report.py .benchmarks/bench.json .benchmarks/peers.json docs/performance.md \
		.benchmarks/bench-previous.json \
		&& exit $$status

# The reliability campaigns at full size (tests/proof/; their quick slices run in make test).
# Every campaign runs even when one fails; docs/guarantees.md gets the figures of all of them.
PROOF := crash fuzz stress limits poison delivery
proof: $(STAMP)
	mkdir -p .proof
	rm -f $(addprefix .proof/,$(addsuffix .json,$(PROOF)))
	$(PY) -m pip install -q atheris || echo "atheris did not install: fuzzing runs on hypothesis alone"
	status=0; \
	for c in $(PROOF); do \
		$(PY) tests/proof/$$c.py --full --json .proof/$$c.json || status=1; \
	done; \
	$(PY) tests/proof/report.py .proof docs/guarantees.md || status=1; \
	exit $$status

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
