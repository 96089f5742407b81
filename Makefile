# Every target creates .venv from requirements.txt and requirements-test.txt when it is missing or older
# than either.
# Python 3.12, the accelerator image's: found by scripts/find_python.sh unless named (make PYTHON=...).
ifndef PYTHON
PYTHON := $(shell scripts/find_python.sh)
endif
VENV := .venv
PY := $(VENV)/bin/python
CONFIG ?= configs/translation.py
WORKDIR ?= runs/default
# make compare: the study to run (STUDIES in configs/<task>.py) (TASK=translation PRESET=kinds, ...).
TASK ?= mlm
PRESET ?= quick
# Tests run in parallel on all cores; PYTEST_ARGS adds to them (e.g. PYTEST_ARGS="-k attention").
PYTEST_ARGS ?=

.PHONY: setup train eval test test-accelerator compare bench bench-gpu wheelhouse clean

setup: $(VENV)/.installed

# --clear: a venv of another Python (an older lab's 3.11) is replaced, not patched.
$(VENV)/.installed: requirements.txt requirements-test.txt
	@test -n "$(PYTHON)" || { echo "make: no Python 3.12 (see above); name one with make PYTHON=..." >&2; exit 1; }
	$(PYTHON) -m venv --clear $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -r requirements-test.txt
	touch $@

train: setup
	$(PY) train.py --config=$(CONFIG) --workdir=$(WORKDIR)

# With the config the workdir trained (its config.json).
eval: setup
	$(PY) eval.py --workdir=$(WORKDIR)

# On the CPU even where a GPU or TPU is present (tests/conftest.py); test-accelerator runs the tests
# marked `accelerator` on it, in one process (several would each take the device).
# The 15 slowest tests end the output: the suite takes about 6 minutes on 2 cores (344-358 s measured), its budget.
test: setup
	$(PY) -m pytest -n auto --dist loadfile --durations=15 $(PYTEST_ARGS)

test-accelerator: setup
	TEST_ACCELERATOR=1 $(PY) -m pytest -m accelerator $(PYTEST_ARGS)

compare: setup
	$(PY) -m scripts.compare --task=$(TASK) --preset=$(PRESET)

# Benchmarks write JSON and markdown tables to reports/bench (see docs/benchmarks.md).
bench: setup
	$(PY) -m scripts.bench_train
	$(PY) -m scripts.bench_attention
	$(PY) -m scripts.bench_chunks
	$(PY) -m scripts.bench_linear_paths
	$(PY) -m scripts.bench_decode

# On a GPU (or TPU) machine, in one command: the accelerator tests, a short bf16 run, every benchmark
# (attention in float32 and bfloat16, masked and not, to 65,536 tokens; the chunk sweep) and the quick
# studies, reports in reports/gpu/ (scripts/gpu_check.sh; GPU_CHECK_ARGS="--quick --skip-studies" etc.).
GPU_CHECK_ARGS ?=
bench-gpu: setup
	PYTHON=$(PY) scripts/gpu_check.sh $(GPU_CHECK_ARGS)

# The wheels a lent GPU machine lacks (scripts/wheelhouse.txt) in wheelhouse/, for scripts/gpu_probe.sh to
# install there offline: carry `wheelhouse` with the working tree (docs/accelerators.md).
wheelhouse:
	PYTHON=$(PYTHON) scripts/wheelhouse.sh

clean:
	rm -rf runs .pytest_cache
