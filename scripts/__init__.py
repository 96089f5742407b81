"""Command-line tools over runs: summaries, sweeps, benchmarks."""
