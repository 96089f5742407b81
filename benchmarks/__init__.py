"""The benchmarks behind `python -m scripts.bench_<name>` (results in docs/benchmarks.md): one module per
benchmark, its measurement and its reports, and common.py, what they share (timing, the machine line, the
report files)."""
