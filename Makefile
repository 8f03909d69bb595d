# The README's quick start is `make run` and `make test`: both create .venv and install on their own.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run simulate test bench venv clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

# The live service on embedded defaults: 4 virtual nodes x 8 virtual GPUs on a local Ray cluster, SQLite under
# CORRAL_HOME (~/.corral), the pretrained rl:default policy, the API on http://127.0.0.1:8080.
run: $(STAMP)
	$(BIN)/corral serve --host 127.0.0.1 --port 8080 --nodes 4 --gpus-per-node 8 --preset dgx-a100

# The offline comparison `make run` used to print: six policies on a synthetic trace, in the simulator.
simulate: $(STAMP)
	$(BIN)/corral simulate --trace synthetic:400,iat=500 --cluster dgx-a100:4 \
		--policy fifo,fifo-backfill,tiresias,consolidate,gandiva,contention-greedy --seed 0

# The dashboard's browser tests drive Debian's chromium through Playwright (never `playwright install`); without it
# they skip, saying why.
test: $(STAMP)
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) || \
		echo "chromium could not be installed: the dashboard's browser tests will skip"
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/simulate.py
	$(BIN)/python benchmarks/policies.py
	$(BIN)/python benchmarks/rl.py
	$(BIN)/python benchmarks/live.py

clean:
	rm -rf $(VENV) .pytest_cache
