# Everyday tasks. `make demo` and `make test` set everything up on a fresh machine.
VENV ?= .venv
ifeq ($(VENV),system)
BIN :=
PY := python3
else
BIN := $(VENV)/bin/
PY := $(VENV)/bin/python
endif
STAMP := $(if $(BIN),$(VENV)/.installed,.installed-system)
# the tests run in one process per logical CPU (pytest-xdist; each test keeps to one thread): TEST_JOBS=1 for one
TEST_JOBS ?= logical

.PHONY: setup demo test test-fast lint bench bench-peers clean
setup: $(STAMP)
$(STAMP): setup.cfg pyproject.toml scripts/setup.sh
	VENV=$(VENV) bash scripts/setup.sh
	@touch $@

demo: setup  ## the main job: scorer ablation on the toy reverse task (CPU, minutes)
	$(BIN)seq2seq-attn ablate experiments/ablations/toy_reverse.yaml --out runs/ablation_toy_reverse

test: setup  ## the test suite (what CI runs)
	$(PY) -m pytest -n $(TEST_JOBS) --dist worksteal

test-fast: setup  ## the quick part of the suite: no slow or full-corpus tests
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist worksteal -m "not slow and not corpus"

lint: setup
	$(BIN)ruff check seq2seq_attn tests benchmarks
	$(BIN)ruff format --check seq2seq_attn tests benchmarks

bench: setup
	$(PY) benchmarks/step_speed.py

bench-peers: setup  ## ours vs Joey NMT and OpenNMT-py on the shared Multi30k model (about 25 min, quiet machine)
	PY=$(PY) bash benchmarks/peers/compare_peers.sh

clean:
	rm -rf runs .pytest_cache .ruff_cache
