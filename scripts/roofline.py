"""A program's time against its roofline, all measured in the run that times it.

The machine's rates: the matmul rate, FLOP/s of the fastest of float32 square matmuls of `MATMUL_SIZES`
(XLA's own kernel), and the memory bandwidth, bytes/s of a sum over a large float32 array (`BANDWIDTH_MIB`, read once; a sum
writes nothing, so no page of a fresh output is touched for the first time inside the timing).

A program's work: FLOPs and bytes accessed from XLA's cost analysis of the compiled program timed. That
analysis counts a while loop's body once, whatever its trip count, and attention/chunked_sums.py runs its
passes over chunks as lax.scan loops: `loop_aware_cost` compiles the same program a second time with each
scan unrolled twice (chunked_sums.UNROLL = 2), whose difference is one more trip of every loop, and counts
that trip trips - 1 more times. A program without loops gives the same cost both ways. Exact for an even
trip count (every power-of-two length in chunks of a power of two); for an odd one lax.scan runs the last
trip outside the loop, where XLA may prune what its result does not need, and the count is a few % low.

The roofline time is max(FLOPs / matmul rate, bytes / bandwidth): what the program would take if every
FLOP ran at the large matmul's rate and every byte moved at the sum's bandwidth, whichever binds.
"""
import contextlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from attention import chunked_sums

MATMUL_SIZES = (512, 1024)
BANDWIDTH_MIB = 256


def _median_seconds(program, arguments, repeats: int) -> float:
    jax.block_until_ready(program(*arguments))
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        jax.block_until_ready(program(*arguments))
        seconds.append(time.perf_counter() - started)
    return float(np.median(seconds))


def machine_rates(repeats: int = 5) -> dict:
    """{"matmul_flops_per_s", "bandwidth_bytes_per_s"} of this machine now (median of `repeats` timings)."""
    matmul = jax.jit(jnp.matmul)
    matmul_rate = max(2 * size**3 / _median_seconds(matmul, (jnp.ones((size, size), jnp.float32),) * 2, repeats)
                      for size in MATMUL_SIZES)
    x = jnp.ones((BANDWIDTH_MIB * 2**20 // 4,), jnp.float32)
    sum_s = _median_seconds(jax.jit(jnp.sum), (x,), repeats)
    return {"matmul_flops_per_s": matmul_rate, "bandwidth_bytes_per_s": x.nbytes / sum_s}


def cost(compiled) -> dict:
    """{"flops", "bytes"} of XLA's cost analysis of a compiled program (None where the backend gives none)."""
    try:
        analysis = compiled.cost_analysis()
    except Exception:  # noqa: BLE001  (a backend without cost analysis)
        analysis = None
    analysis = analysis[0] if isinstance(analysis, (list, tuple)) and analysis else analysis or {}
    return {"flops": analysis.get("flops"), "bytes": analysis.get("bytes accessed")}


@contextlib.contextmanager
def _unrolled(times: int):
    before = chunked_sums.UNROLL
    chunked_sums.UNROLL = times
    try:
        yield
    finally:
        chunked_sums.UNROLL = before


def loop_aware_cost(compile_program, trips: int) -> dict:
    """The cost of `compile_program()` (a compiled program whose loops, if any, all run `trips` times) with
    each loop's body counted once per trip (see the module's docstring)."""
    once = cost(compile_program())
    with _unrolled(2):
        twice = cost(compile_program())
    counted = {}
    for field, value in once.items():
        if value is None or twice[field] is None:
            counted[field] = None
            continue
        trip = (twice[field] - value) / (1 + trips % 2) if trips > 1 else 0.0
        counted[field] = value + (trips - 1) * trip
    return counted


def against_roofline(seconds: float, work: dict, rates: dict) -> dict:
    """A program's FLOP rate, its share of the matmul rate, its roofline time and its time over that."""
    flops, moved = work["flops"], work["bytes"]
    if flops is None or moved is None:
        return {"flops_per_s": None, "matmul_share": None, "roofline_s": None, "over_roofline": None}
    roofline = max(flops / rates["matmul_flops_per_s"], moved / rates["bandwidth_bytes_per_s"])
    return {"flops_per_s": flops / seconds, "matmul_share": flops / seconds / rates["matmul_flops_per_s"],
            "roofline_s": roofline, "over_roofline": seconds / roofline}
