# Every target creates .venv from requirements.txt when it is missing or older than requirements.txt.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CONFIG ?= configs/translation.py
WORKDIR ?= runs/default
# make compare: the study of configs/studies.py to run (TASK=translation PRESET=kinds, ...).
TASK ?= mlm
PRESET ?= quick
# Tests run in parallel on all cores; PYTEST_ARGS adds to them (e.g. PYTEST_ARGS="-k attention").
PYTEST_ARGS ?=

.PHONY: setup train eval test compare bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

train: setup
	$(PY) train.py --config=$(CONFIG) --workdir=$(WORKDIR)

eval: setup
	$(PY) eval.py --config=$(CONFIG) --workdir=$(WORKDIR)

test: setup
	$(PY) -m pytest -n auto --dist loadfile $(PYTEST_ARGS)

compare: setup
	$(PY) scripts/compare.py --task=$(TASK) --preset=$(PRESET)

# Benchmarks write JSON and markdown tables to reports/bench (see docs/benchmarks.md).
bench: setup
	$(PY) scripts/bench_train.py
	$(PY) scripts/bench_attention.py
	$(PY) scripts/bench_decode.py

clean:
	rm -rf runs .pytest_cache
