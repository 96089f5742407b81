"""A program's time against its roofline, all measured in the run that times it: the benchmarks' yardstick.

  python -m scripts.roofline                 # this machine's matmul rate and memory bandwidth, now

scripts/bench_attention.py puts each kind's time against its own roofline, and takes variants of one kind as
columns of the same run: a column is a registered kind, or `kind:implementation` for a kind that takes
`implementation` (e.g. `linear:autodiff`, the kernelised kinds' former autodiff path, beside `linear`);
scripts/bench_linear_paths.py does the same for the linear paths' chunk sizes and strategies.

The machine's rates: the matmul rate, FLOP/s of the fastest of float32 square matmuls of `MATMUL_SIZES`
(XLA's own kernel), and the memory bandwidth, bytes/s of a sum over a large float32 array (`BANDWIDTH_MIB`,
read once; a sum writes nothing, so no page of a fresh output is touched for the first time inside the
timing).

A program's work: FLOPs and bytes accessed from XLA's cost analysis of the compiled program timed. That
analysis counts a while loop's body once, whatever its trip count, and attention/chunked_sums.py runs its
passes over chunks as lax.scan loops: `loop_aware_cost` compiles the same program a second time with each
scan unrolled twice (chunked_sums.UNROLL = 2), whose difference is one more trip of every loop, and counts
that trip trips - 1 more times. A program without loops gives the same cost both ways. Exact for an even
trip count (every power-of-two length in chunks of a power of two); for an odd one lax.scan runs the last
trip outside the loop, where XLA may prune what its result does not need, and the count is a few % low.

The roofline time is max(FLOPs / matmul rate, bytes / bandwidth): what the program would take if every
FLOP ran at the large matmul's rate and every byte moved at the sum's bandwidth, whichever binds. A run
measures the rates before its first program and after its last, and the better of the two counts (a
shared machine only ever slows a timing down); each row gets its FLOP rate, its share of the matmul rate,
its roofline time and its time over that (`over_roofline`: 1.0 would be the machine's limit).
"""
import contextlib
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags
from flax import nnx

import attention
from attention import chunked_sums, chunking
from attention.kernelized_base import KernelizedAttention
from scripts import command_line

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


# --- the attention benchmark's columns and rows ----------------------------------------------------------------

SEPARATOR = ":"


def kind_of(label: str) -> str:
    """The registered kind of a column's label."""
    return label.split(SEPARATOR)[0]


def variant_options(label: str) -> dict:
    """The options a label sets beyond the benchmark's: {"implementation": ...} for `kind:implementation`."""
    parts = label.split(SEPARATOR)
    if len(parts) == 1:
        return {}
    if len(parts) > 2 or "implementation" not in attention.options(parts[0]):
        raise SystemExit(f"--kinds: {label!r}: a variant is kind{SEPARATOR}implementation, for a kind that "
                         f"takes implementation")
    return {"implementation": parts[1]}


def trips(layer, causal: bool, length: int) -> int:
    """How many times a causal kernelised kind's loops over chunks run at `length` (1: no loop)."""
    graphdef, state = layer
    if graphdef is None or not causal:
        return 1
    module = nnx.merge(graphdef, state)
    if not isinstance(module, KernelizedAttention):
        return 1
    return math.ceil(length / min(module.chunk_size or chunking.chunk_size_for(jax.default_backend(), length),
                                  length))


def work(compile_program, layer, causal: bool, length: int) -> dict:
    """{"flops", "bytes"} of the compiled program, each loop's body counted once per trip."""
    return loop_aware_cost(compile_program, trips(layer, causal, length))


def annotate(rows: list[dict], rates: list[dict]) -> dict:
    """Adds each measured row's place against the roofline of the run's rates; returns those rates."""
    run_rates = {field: max(rate[field] for rate in rates) for field in rates[0]}
    for row in rows:
        if row["ms"] is not None:
            row.update(against_roofline(row["ms"] / 1e3, {"flops": row["flops"],
                                                                   "bytes": row.get("bytes_accessed")}, run_rates))
    return run_rates


def rates_text(result: dict) -> str:
    """The run's rates as the report states them."""
    rates = result.get("rates")
    if not rates:
        return ""
    measured = "; ".join(f"{when}: matmul {rate['matmul_flops_per_s'] / 1e9:.1f} GFLOP/s, bandwidth "
                         f"{rate['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s" for when, rate in zip(("before", "after"),
                                                                                                rates))
    return (f"Roofline: max(FLOPs / matmul rate, bytes / bandwidth), FLOPs and bytes from XLA's cost analysis of "
            f"the program timed (loop bodies once per trip), rates measured in this run ({measured}; the better "
            f"counts).\n")


FLAGS = flags.FlagValues()
flags.DEFINE_integer("repeats", 5, "timings per rate; the median is kept", lower_bound=1, flag_values=FLAGS)


def main(argv=None) -> dict:
    args = command_line.parse(FLAGS, argv, __doc__)
    rates = machine_rates(args.repeats)
    print(f"matmul {rates['matmul_flops_per_s'] / 1e9:.1f} GFLOP/s (float32, sizes {MATMUL_SIZES}), "
          f"bandwidth {rates['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s (a sum over {BANDWIDTH_MIB} MiB)")
    return rates


if __name__ == "__main__":
    main()
