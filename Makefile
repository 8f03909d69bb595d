# The README's quick start is `make run` and `make test`: both create .venv and install on their own.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench venv clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(BIN)/corral simulate --trace synthetic:400,iat=500 --cluster dgx-a100:4 \
		--policy fifo,fifo-backfill,tiresias,consolidate,gandiva,contention-greedy --seed 0

test: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/simulate.py
	$(BIN)/python benchmarks/policies.py
	$(BIN)/python benchmarks/rl.py

clean:
	rm -rf $(VENV) .pytest_cache
