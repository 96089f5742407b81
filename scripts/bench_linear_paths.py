"""Linear attention's paths side by side in one run: the autodiff path against the custom-VJP sums.

  python -m scripts.bench_linear_paths                       # L 1,024..16,384, causal and bidirectional
  python -m scripts.bench_linear_paths --program=grad --out=reports/bench/linear_paths_grad
  python -m scripts.bench_linear_paths --lengths=8192 --modes=causal \\
      --columns=xla:16:sequential,xla:32:sequential,xla:64:sequential,xla:32:parallel --out=reports/bench/strategies
  python -m scripts.bench_linear_paths --tables_of=reports/bench/linear_paths_grad/linear_paths.json

Each column is the kind `linear` (B = 1, H = 4, D = 64 by default, float32) with `kernelized_implementation`, chunk size
(0: attention/ops/chunking.py's) and, optionally, the strategy of attention/ops/chunked_sums.py forced at trace time
(else chunking.py's): "autodiff:64" is the autodiff path at the chunk size it ran best at on the CPU from
1,024 tokens, "xla:0" the custom-VJP sums as the kinds run them by default with chunk_size=0. The program
timed is the jitted value and gradient of sum(out * cotangent) for q, k and v: the output computed as a
training step needs it (of the gradient alone, XLA drops what only the output needs); `--program=grad`
times the gradient alone, the program the autodiff path was first measured by (and scripts/bench_attention.py
times). The columns run in alternating rounds so that a shared machine's noise falls on all alike, with
scripts/bench_attention.py's timing, warm-up and budgets (benchmarks/attention.py); a column's time is the
median of --repeats timings.

Per row: time; XLA's temporaries (`memory_analysis().temp_size_in_bytes`: the buffers XLA allocates beside
arguments and outputs); FLOPs and bytes of XLA's cost analysis of the program timed, each loop's body
counted once per trip (benchmarks/roofline.py); the FLOP rate, its share of the matmul rate and the time over
the roofline, from the matmul rate and memory bandwidth measured in the same run (before the first length
and after the last). Writes linear_paths.json, .md and .png under --out, and prints each mode's table and,
where the run has both, the autodiff path (autodiff C=64) and the custom-VJP one (xla C=auto) side by side (the
tables of docs/benchmarks.md). --tables_of prints those tables of a JSON a run wrote, measuring nothing.
"""
from absl import flags

from benchmarks.linear_paths import DEFAULT_COLUMNS, MODES, PROGRAMS, run
from scripts import command_line

FLAGS = flags.FlagValues()
flags.DEFINE_string("columns", DEFAULT_COLUMNS, "comma-separated implementation:chunk[:strategy] of the kind "
                    "linear (implementation autodiff or xla; chunk 0: attention/ops/chunking.py's; strategy "
                    "sequential or parallel: forced, else chunking.py's)", flag_values=FLAGS)
flags.DEFINE_string("modes", ",".join(MODES), "comma-separated: causal, bidirectional", flag_values=FLAGS)
flags.DEFINE_enum("program", "value_and_grad", tuple(PROGRAMS), "what is timed: the loss and its gradient, or the "
                  "gradient alone", flag_values=FLAGS)
command_line.define_shape_flags(FLAGS, "1024,2048,4096,8192,16384")
flags.DEFINE_float("max_seconds", 60.0, "a column slower than this per call skips its larger lengths",
                   flag_values=FLAGS)
flags.DEFINE_float("max_memory_gb", 8.0, "a column whose planned memory exceeds this (GiB) is skipped from that "
                   "length on", flag_values=FLAGS)
flags.DEFINE_string("tables_of", "", "a linear_paths.json a run wrote: print its tables, measure nothing",
                    flag_values=FLAGS)


def main(argv=None) -> dict:
    return run(command_line.parse(FLAGS, argv, __doc__))


if __name__ == "__main__":
    main()
