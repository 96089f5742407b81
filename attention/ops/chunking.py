"""The causal chunk length and strategy of the kernelised kinds, by platform and sequence length, from
measurements.

Causal linear attention (attention/ops/chunked_sums.py) is quadratic inside chunks of C positions and linear
across them. Smaller chunks do less arithmetic (about L (m + C/2) multiply-adds per feature column against
softmax's L^2) but run more, smaller matmuls; the best C is where the two balance, which depends on the
hardware. `chunk_size = 0` (the kinds' option, `config.attention.chunk_size`) means "auto": the size
`chunk_size_for` gives for the platform JAX runs on and the sequence length, looked up when the attention
is traced. The strategy (`strategy_for`) is how the state crosses the chunks: "sequential", one pass over
the chunks carrying it (its temporaries are the inputs' size), or "parallel", every chunk at once with a
prefix sum of the chunk states between (L/C states of m x Dv, and their cotangents, held at once).

CPU: measured by `python -m scripts.bench_linear_paths` (benchmarks/linear_paths.py; B = 1, H = 4,
D = m = 64, float32, value and gradient, on a 2-core machine shared with other jobs; the commands, the
tables and where they were run are in docs/benchmarks.md, the JSON in reports/bench/linear_strategies_short/
and reports/bench/linear_strategies_long/). The parallel strategy was the faster at 128 and 256 tokens (C = 64
at 128: 1.5 against 1.7-2.2 ms sequential; at 256 2.6 against 2.7), the two traded places at 512 and 1,024,
and from 2,048 on the sequential one was 1.4-1.9x faster with two thirds of the temporaries. Sequentially,
C = 32 was the fastest at 512, 1,024, 2,048, 4,096 and 16,384 tokens and 7% behind the fastest (16) at 8,192;
C = 128 took 1.1-1.6x as long. Hence: up to 256 tokens, parallel in chunks of 64; beyond, sequential in
chunks of 32. (The autodiff path, measured by `python -m scripts.bench_chunks`, ran best at C = 32 up
to 256 tokens and 64 beyond.)

GPU and TPU: NOT measured (no accelerator was lent to the sessions that built this). Their entries are
an explicit default, 64 and the parallel strategy (a GPU runs a loop of small matmuls poorly), to be
replaced by what `python -m scripts.bench_linear_paths` measures there; on a GPU the Pallas kernels
(attention/ops/linear_pallas.py) take the causal sums where they apply. A platform not in the tables gets
DEFAULT_CHUNK and DEFAULT_STRATEGY.
"""

DEFAULT_CHUNK = 64

# platform -> ((largest length, chunk), ...) by increasing length; a length beyond the last bound takes
# the last chunk. Platform names are jax.default_backend()'s ("cpu", "gpu", "tpu"); "cuda" and "rocm"
# (a device's platform on some jax versions) are read as "gpu".
TABLE = {
    "cpu": ((256, 64), (None, 32)),  # measured (see above)
    "gpu": ((None, DEFAULT_CHUNK),),  # not measured: default
    "tpu": ((None, DEFAULT_CHUNK),),  # not measured: default
}
_ALIASES = {"cuda": "gpu", "rocm": "gpu"}


def chunk_size_for(platform: str, length: int) -> int:
    """The causal chunk length for sequences of `length` positions on `platform` (callers cap it at the
    length: a chunk longer than the sequence is the sequence)."""
    return _lookup(TABLE, platform, length, DEFAULT_CHUNK)


def _lookup(table: dict, platform: str, length: int, default):
    entries = table.get(_ALIASES.get(platform, platform))
    if entries is None:
        return default
    for bound, value in entries:
        if bound is None or length <= bound:
            return value
    return entries[-1][1]


# platform -> ((largest length, strategy), ...) of attention/ops/chunked_sums.py, read as TABLE is.
STRATEGIES = {
    "cpu": ((256, "parallel"), (None, "sequential")),  # measured (see above)
    "gpu": ((None, "parallel"),),  # not measured: default
    "tpu": ((None, "parallel"),),  # not measured: default
}
DEFAULT_STRATEGY = "parallel"


def strategy_for(platform: str, length: int) -> str:
    """How attention/ops/chunked_sums.py carries the state across the chunks of `length` positions on `platform`."""
    return _lookup(STRATEGIES, platform, length, DEFAULT_STRATEGY)
