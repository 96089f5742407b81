"""softmax_rank's basis: exact (eigh of A^T A) against steps of subspace iteration, error and time.

  python -m scripts.bench_rank_basis                              # L 128 (batch 64) and 512 (batch 16), m = 32
  python -m scripts.bench_rank_basis --lengths=256 --batches=32 --iterations=2,4 --rounds=7

For each length, the forward and backward of `softmax_rank` (m = --rank, 4 heads of 32, queries scaled 2x) with
each basis, and of `softmax` on the same inputs, each jitted and compiled first, are timed in rounds that
alternate between them; a program's time is its median round. The excess error is the projection's Frobenius
error over the best rank-m approximation's (float64 singular values), less 1, over one batch of 4. Writes JSON
and a markdown table under --out.
"""
from absl import flags

from benchmarks.rank_basis import run
from scripts import command_line

FLAGS = flags.FlagValues()
flags.DEFINE_string("lengths", "128,512", "comma-separated sequence lengths", flag_values=FLAGS)
flags.DEFINE_string("batches", "64,16", "comma-separated batch sizes, one per length", flag_values=FLAGS)
flags.DEFINE_integer("rank", 32, "m, softmax_rank's rank", flag_values=FLAGS)
flags.DEFINE_string("iterations", "2,3,4", "comma-separated subspace iteration steps", flag_values=FLAGS)
flags.DEFINE_integer("rounds", 5, "timing rounds; a program's time is its median round", flag_values=FLAGS)
flags.DEFINE_string("out", "reports/bench", "folder for rank_basis.json and rank_basis.md", flag_values=FLAGS)


def main(argv=None) -> dict:
    return run(command_line.parse(FLAGS, argv, __doc__))


if __name__ == "__main__":
    main()
