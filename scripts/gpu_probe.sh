#!/usr/bin/env bash
# The one-shot check of a lent GPU machine: about 8 minutes, offline, at most 8 files back. Here, once:
# `make wheelhouse`; then on the machine, with `wheelhouse` carried beside the working tree:
#
#   scripts/gpu_probe.sh --out=$OUT
#
# It installs wheelhouse/ into a --target folder (pip --no-index), puts it on PYTHONPATH, sets
# WANDB_MODE=disabled, and runs the steps in priority order, each capped by `timeout`: versions and devices;
# the accelerator tests; the Pallas kernels against the XLA path and their times; cuDNN flash attention
# against linear attention; an MLM training step's speed and MFU; the rank-or-shape study's arms at L = 512 in the time left (PROBE_STUDY).
# After every step OUT holds summary.md, results.json, logs.txt and a few reports. The steps and their
# flags: `scripts/gpu_probe.sh --help` (python -m scripts.gpu_probe). `--smoke` runs them at toy sizes on a
# CPU in about a minute (tests/test_gpu_probe.py).
#
# Environment: PYTHON (default python3), PROBE_STUDY, OUT (the default of --out).
# scripts/gpu_check.sh is the longer check of a GPU machine of one's own (tens of minutes, reports/gpu/).
set -euo pipefail

cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" -m scripts.gpu_probe "$@"
