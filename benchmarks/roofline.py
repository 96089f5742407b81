"""A program's time against its roofline, all measured in the run that times it: the benchmarks' yardstick.

benchmarks/attention.py (`python -m scripts.bench_attention`) puts each kind's time against its own roofline,
benchmarks/linear_paths.py (`python -m scripts.bench_linear_paths`) each of linear attention's paths;
`python -m scripts.bench_roofline` prints this machine's rates alone.

The machine's rates: the matmul rate, FLOP/s of the fastest of square matmuls of `MATMUL_SIZES` in the
benchmark's dtype (XLA's own kernel), and the memory bandwidth, bytes/s of a sum over a large float32 array
(`BANDWIDTH_MIB`, read once; a sum writes nothing, so no page of a fresh output is touched for the first time
inside the timing). Each is the fastest of its timings: a shared machine's load can only slow one down. An
accelerator gets larger sizes: a 1024-square matmul keeps a GPU busy for microseconds, about as long as
launching it.

A program's work: FLOPs and bytes accessed from XLA's cost analysis of the compiled program timed
(benchmarks/common.py: xla_cost). That analysis counts a while loop's body once, whatever its trip count,
and attention/ops/chunked_sums.py runs its passes over chunks as lax.scan loops: `loop_aware_cost` compiles the
same program a second time with each scan unrolled twice (chunked_sums.UNROLL = 2), whose difference is one
more trip of every loop, and counts that trip trips - 1 more times. A program without loops gives the same
cost both ways. Exact for an even trip count (every power-of-two length in chunks of a power of two); for an
odd one lax.scan runs the last trip outside the loop, where XLA may prune what its result does not need, and
the count is a few % low.

The roofline time is max(FLOPs / matmul rate, bytes / bandwidth): what the program would take if every FLOP
ran at the large matmul's rate and every byte moved at the sum's bandwidth, whichever binds. A run measures
the rates before its first program and after its last, and the better of the two counts; each row gets its
FLOP rate, its share of the matmul rate, its roofline time and its time over that (`over_roofline`: 1.0
would be the machine's limit).
"""
import contextlib
import math
import re

import jax
import jax.numpy as jnp
from flax import nnx

from attention.ops import chunked_sums, chunking
from attention.kernelized_base import KernelizedAttention
from benchmarks.common import seconds_per_call, xla_cost

MATMUL_SIZES = {"cpu": (512, 1024), "accelerator": (4096, 8192)}
BANDWIDTH_MIB = {"cpu": 256, "accelerator": 2048}
# custom_call_target names of kernels opaque to XLA's cost analysis: cuDNN's, and Pallas's on a GPU.
OPAQUE_KERNELS = re.compile(r'custom_call_target="(__cudnn\$[^"]*|[^"]*triton[^"]*|mosaic_gpu[^"]*)"')
RATES = ("matmul_flops_per_s", "bandwidth_bytes_per_s")


def fastest_seconds(program, arguments, repeats: int) -> float:
    """The fastest of `repeats` timed calls, each after an untimed one: the machine's capacity."""
    return min(seconds_per_call(program, arguments, 1) for _ in range(repeats))


def _sizes(table: dict):
    return table["cpu" if jax.default_backend() == "cpu" else "accelerator"]


def matmul_sizes() -> tuple[int, ...]:
    """The square matmuls this backend's rate is the fastest of (MATMUL_SIZES)."""
    return _sizes(MATMUL_SIZES)


def matmul_rate(dtype: str = "float32", repeats: int = 5) -> float:
    """FLOP/s of the fastest square matmul of matmul_sizes() in `dtype` now (the fastest of `repeats` timings)."""
    matmul = jax.jit(jnp.matmul)
    return max(2 * size**3 / fastest_seconds(matmul, (jnp.ones((size, size), dtype),) * 2, repeats)
               for size in matmul_sizes())


def machine_rates(dtype: str = "float32", repeats: int = 5) -> dict:
    """{"matmul_flops_per_s", "bandwidth_bytes_per_s"} of this machine now (the fastest of `repeats` timings),
    the matmul's in `dtype`."""
    x = jnp.ones((_sizes(BANDWIDTH_MIB) * 2**20 // 4,), jnp.float32)
    sum_s = fastest_seconds(jax.jit(jnp.sum), (x,), repeats)
    return {"matmul_flops_per_s": matmul_rate(dtype, repeats), "bandwidth_bytes_per_s": x.nbytes / sum_s}


@contextlib.contextmanager
def _unrolled(times: int):
    before = chunked_sums.UNROLL
    chunked_sums.UNROLL = times
    try:
        yield
    finally:
        chunked_sums.UNROLL = before


def loop_aware_cost(compile_program, trips: int, compiled=None) -> dict:
    """{"flops", "bytes"} of `compile_program()` (a compiled program whose loops, if any, all run `trips`
    times; `compiled`: that program, already compiled) with each loop's body counted once per trip."""
    compiled = compiled if compiled is not None else compile_program()
    if calls_opaque_kernels(compiled):
        return {"flops": None, "bytes": None}
    once = xla_cost(compiled)
    if trips <= 1:
        return once
    with _unrolled(2):
        twice = xla_cost(compile_program())
    counted = {}
    for field, value in once.items():
        if value is None or twice[field] is None:
            counted[field] = None
            continue
        trip = (twice[field] - value) / (1 + trips % 2)  # an odd count: the unrolled loop runs one trip less
        counted[field] = value + (trips - 1) * trip
    return counted


def calls_opaque_kernels(compiled) -> bool:
    """Whether a compiled program calls a kernel XLA's cost analysis cannot see into (`OPAQUE_KERNELS`)."""
    return OPAQUE_KERNELS.search(compiled.as_text()) is not None


def trips(layer, causal: bool, length: int) -> int:
    """How many times a causal kernelised layer's loops over chunks run at `length` (1: no loop). `layer` is
    (graphdef, state) as benchmarks/attention.py builds it ((None, {}) for the reference)."""
    graphdef, state = layer
    if graphdef is None or not causal:
        return 1
    module = nnx.merge(graphdef, state)
    if not isinstance(module, KernelizedAttention):
        return 1
    return math.ceil(length / min(module.chunk_size or chunking.chunk_size_for(jax.default_backend(), length),
                                  length))


def against_roofline(seconds: float, work: dict, rates: dict) -> dict:
    """A program's FLOP rate, its share of the matmul rate, its roofline time and its time over that."""
    flops, moved = work["flops"], work["bytes"]
    if flops is None or moved is None:
        return {"flops_per_s": None, "matmul_share": None, "roofline_s": None, "over_roofline": None}
    roofline = max(flops / rates["matmul_flops_per_s"], moved / rates["bandwidth_bytes_per_s"])
    return {"flops_per_s": flops / seconds, "matmul_share": flops / seconds / rates["matmul_flops_per_s"],
            "roofline_s": roofline, "over_roofline": seconds / roofline}


def annotate(rows: list[dict], rates: list[dict]) -> dict:
    """Adds each measured row's place against the roofline of the run's rates (the best of `rates`, measured
    before and after); returns those rates."""
    run_rates = {field: max(rate[field] for rate in rates) for field in RATES}
    for row in rows:
        if row["ms"] is not None:
            row.update(against_roofline(row["ms"] / 1e3, {"flops": row["flops"], "bytes": row["bytes_accessed"]},
                                        run_rates))
    return run_rates


def rates_text(result: dict) -> str:
    """The rates a run measured (result["rates"], before and after) as its report states them."""
    measured = "; ".join(f"{when}: matmul {rate['matmul_flops_per_s'] / 1e9:.1f} GFLOP/s, bandwidth "
                         f"{rate['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s" for when, rate in zip(("before", "after"),
                                                                                                result["rates"]))
    return (f"Roofline: max(FLOPs / matmul rate, bytes / bandwidth), FLOPs and bytes from XLA's cost analysis of "
            f"the program timed (loop bodies once per trip), rates measured in this run ({measured}; the better "
            f"counts).\n")


def run(options) -> dict:
    """This machine's rates now, printed (the flags of scripts/bench_roofline.py: `options.repeats`)."""
    rates = machine_rates(repeats=options.repeats)
    print(f"matmul {rates['matmul_flops_per_s'] / 1e9:.1f} GFLOP/s (float32, sizes {_sizes(MATMUL_SIZES)}), "
          f"bandwidth {rates['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s (a sum over {_sizes(BANDWIDTH_MIB)} MiB)")
    return rates
