# The README's quick start is `make run` and `make test`: both create .venv and install on their own.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run simulate test test-fast lint bench docs venv clean lock

LOCK := requirements.lock
UV := uv==0.13.9

# Installs exactly the versions in the lock file (every transitive package pinned with its hashes), then Corral itself
# without resolving anything: a fresh machine gets what the tests ran on. pyproject.toml keeps ranges for library users.
$(STAMP): $(LOCK) pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

# Refresh the lock after changing a dependency in pyproject.toml (commit both). Linux x86_64, CPython 3.11: torch is
# the CPU build (2.13.0+cpu) that pip finds in the machine's local wheel folder.
lock:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(UV)
	$(BIN)/uv pip compile pyproject.toml --extra test --extra docs --generate-hashes --python-version 3.11 \
		--python-platform x86_64-manylinux_2_28 --find-links /opt/wheels --custom-compile-command "make lock" \
		-o $(LOCK)

venv: $(STAMP)

# The live service on embedded defaults: 4 virtual nodes x 8 virtual GPUs on a local Ray cluster, SQLite under
# CORRAL_HOME (~/.corral), the pretrained rl:default policy, the API on http://127.0.0.1:$(PORT) (`make run PORT=9090`).
PORT ?= 8080
run: $(STAMP)
	$(BIN)/corral serve --host 127.0.0.1 --port $(PORT) --nodes 4 --gpus-per-node 8 --preset dgx-a100

# The offline comparison `make run` used to print: six policies on a synthetic trace, in the simulator.
simulate: $(STAMP)
	$(BIN)/corral simulate --trace synthetic:400,iat=500 --cluster dgx-a100:4 \
		--policy fifo,fifo-backfill,tiresias,consolidate,gandiva,contention-greedy --seed 0

# The dashboard's browser tests drive Debian's chromium through Playwright (never `playwright install`); without it
# they skip, saying why.
#
# Every test, spread over the cores by pytest-xdist, one module per worker process (module-scoped fixtures, such as a
# module's Ray cluster or browser, stay shared). Tiers (tests/conftest.py marks them) pick parts: `pytest -m ray`.
test: $(STAMP) lint
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) || \
		echo "chromium could not be installed: the dashboard's browser tests will skip"
	$(BIN)/python -m pytest -n auto --dist loadfile

# The unit tier alone (nothing but Python: no Ray, browser, PostgreSQL, namespaces or tests of seconds): about three
# CPU-minutes, spread over the cores. It prints its ten slowest tests: one of seconds belongs in `slow`.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -n auto -q -m unit --durations=10

# Lint and types, at the strictness pyproject.toml sets ([tool.ruff], [tool.mypy]).
lint: $(STAMP)
	$(BIN)/ruff check scheduler policies agents web benchmarks tests
	$(BIN)/mypy

# The documentation site (mkdocs.yml, docs/) into site/, warnings as errors; tests/test_docs.py builds it too.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# decision_quality.py: every policy against tiresias and the best heuristic of each held-out case, loads 0.8-2.2
# (~10 min on 2 cores); add --json FILE and --plot FILE.png to keep the figures.
bench: $(STAMP)
	$(BIN)/python benchmarks/simulate.py
	$(BIN)/python benchmarks/policies.py
	$(BIN)/python benchmarks/rl.py
	$(BIN)/python benchmarks/live.py
	$(BIN)/python benchmarks/decision_quality.py --markdown

clean:
	rm -rf $(VENV) .pytest_cache site
