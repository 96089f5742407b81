"""The causal chunk length of the kernelised kinds, by platform and sequence length, from measurements.

Causal linear attention (attention/kernel_sums.py, `causal_linear_attention`) is quadratic inside chunks
of C positions and linear across them. Smaller chunks do less arithmetic (about L (m + C/2) multiply-adds
per feature column against softmax's L^2) but run more, smaller matmuls over more per-chunk states; the
best C is where the two balance, which depends on the hardware. `chunk_size = 0` (the kinds' option,
`config.attention.chunk_size`) means "auto": the size `chunk_size_for` gives for the platform JAX runs
on and the sequence length, looked up when the attention is traced.

CPU: measured by scripts/bench_chunks.py (B = 1, H = 4, D = m = 64, float32, forward + backward, C in
8..256, L from 128 to 16,384, three runs on a shared 2-core machine; docs/benchmarks.md has the
tables). C = 32 was the fastest at 128 and 256 tokens in all three runs (1-9% ahead of 64); at 512 the
two traded places within the noise; from 1,024 to 16,384 C = 64 was the fastest in every run but one
length of one run (C = 128 by 2% at 2,048). From 1,024 tokens on, C = 16 took 2.1-2.7x as long as 64
and C = 8 3.7-4.7x (many small matmuls over many chunk states), C = 256 1.2-2.0x. Hence 32 up to 256
tokens, 64 beyond.

GPU and TPU: NOT measured (no accelerator was lent to the sessions that built this). Their entries are
an explicit default, 64, the chunk the kinds have always used, to be replaced by what
`scripts/bench_chunks.py` (run by `make bench-gpu`, scripts/gpu_check.sh) measures there. A platform not
in the table gets DEFAULT_CHUNK too.
"""

DEFAULT_CHUNK = 64

# platform -> ((largest length, chunk), ...) by increasing length; a length beyond the last bound takes
# the last chunk. Platform names are jax.default_backend()'s ("cpu", "gpu", "tpu"); "cuda" and "rocm"
# (a device's platform on some jax versions) are read as "gpu".
TABLE = {
    "cpu": ((256, 32), (None, 64)),  # measured (see above)
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


# platform -> ((largest length, strategy), ...) of attention/chunked_sums.py: "sequential" (one pass over
# chunks carrying the state) or "parallel" (every chunk at once, a prefix sum between). Provisional: to be
# replaced by measurements.
STRATEGIES = {
    "cpu": ((None, "sequential"),),
    "gpu": ((None, "parallel"),),
    "tpu": ((None, "parallel"),),
}
DEFAULT_STRATEGY = "parallel"


def strategy_for(platform: str, length: int) -> str:
    """How attention/chunked_sums.py carries the state across the chunks of `length` positions on `platform`."""
    return _lookup(STRATEGIES, platform, length, DEFAULT_STRATEGY)
