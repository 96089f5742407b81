"""This machine's matmul rate and memory bandwidth, now: the rates the benchmarks' roofline is drawn from.

  python -m scripts.bench_roofline                 # matmul GFLOP/s (float32) and bandwidth GB/s
  python -m scripts.bench_roofline --repeats=9

The matmul rate is the FLOP/s of the fastest of float32 square matmuls (512 and 1,024, XLA's kernel), the
bandwidth the bytes/s of a sum over 256 MiB of float32; each the fastest of --repeats timings (a shared
machine's load only slows one down). scripts/bench_attention.py and scripts/bench_linear_paths.py measure
the same rates before and after their runs and put each program's time against max(FLOPs / matmul rate,
bytes / bandwidth), FLOPs and bytes from XLA's cost analysis of the program timed, loop bodies counted once
per trip (benchmarks/roofline.py states the method). Prints the two rates; writes nothing.
"""
from absl import flags

from benchmarks.roofline import run
from scripts import command_line

FLAGS = flags.FlagValues()
flags.DEFINE_integer("repeats", 5, "timings per rate; the fastest is kept", lower_bound=1, flag_values=FLAGS)


def main(argv=None) -> dict:
    return run(command_line.parse(FLAGS, argv, __doc__))


if __name__ == "__main__":
    main()
