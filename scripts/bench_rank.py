"""Time of the rank analysis of a model's attention weights, by sequence length: the device path against the
host path it replaced.

  python -m scripts.bench_rank                             # 2 layers, B 1, 4 heads; L 128, 512, 1,024, 4,096
  python -m scripts.bench_rank --lengths=128,1024,2048 --heads=8 --old_max_length=1024

Input: the weights one role's attention gives to the analysis, [layers, B, H, L, L] float32 on the default
device: softmax(q k^T / sqrt(D)) of standard-normal q and k [layers, B, H, L, D] (no padding).

new: what evaluation runs now (training/evaluation.py attention_analysis): analysis.rank.attention_spectra
(a float64 batched SVD, singular values only, one layer at a time on the device; one transfer of the
spectra), then the summary rows and the mean spectrum from those spectra.

old: what evaluation ran before: the weights copied to the host, then numpy's float64 SVD of each
example's [layers, H, L, L] block, all of it twice, once for the summary rows and once for the mean
spectrum (the metrics of the spectra, cheap, are left out). It is run in full up to --old_max_length; at
every length one matrix's numpy SVD is also timed, and "old, extrapolated" is the weights' transfer plus
2 x layers x B x H times that one SVD (for lengths where the full run would take too long).

Each path is called once untimed (compilation), then timed --repeats times and the median kept; a path
whose first call takes over --max_seconds is timed by that call alone (it then includes compilation,
well under a second). Run as a script, OpenBLAS gets one thread unless OPENBLAS_NUM_THREADS is set (below).
Writes rank.json (machine, settings, one row per L) and rank.md under --out.
"""
import os

if __name__ == "__main__":  # before numpy loads OpenBLAS, and not for a process that imports this module
    # numpy's SVD and jax's CPU one both run on OpenBLAS, whose worker threads spin while they wait. With
    # other processes on this 2-core machine's cores that made either path up to 50x slower (the analysis
    # at L = 1,024 took 18-113 s rather than 1.6-3.3 s), so one thread, unless the environment says.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from absl import flags  # noqa: E402

from benchmarks.rank import run  # noqa: E402
from scripts import command_line  # noqa: E402

FLAGS = flags.FlagValues()
flags.DEFINE_string("lengths", "128,512,1024,4096", "comma-separated sequence lengths", flag_values=FLAGS)
flags.DEFINE_integer("layers", 2, "layers of weights", lower_bound=1, flag_values=FLAGS)
flags.DEFINE_integer("batch", 1, "B", lower_bound=1, flag_values=FLAGS)
flags.DEFINE_integer("heads", 4, "H", lower_bound=1, flag_values=FLAGS)
flags.DEFINE_integer("head_dim", 64, "D", lower_bound=1, flag_values=FLAGS)
flags.DEFINE_integer("old_max_length", 4096, "the old path runs in full up to this length (above it, "
                     "extrapolated only)", flag_values=FLAGS)
flags.DEFINE_integer("repeats", 3, "timings per measurement; the median is kept", lower_bound=1, flag_values=FLAGS)
flags.DEFINE_float("max_seconds", 20.0, "a path whose first call takes longer is timed by that call alone",
                   flag_values=FLAGS)
flags.DEFINE_integer("seed", 0, "seed of q and k", flag_values=FLAGS)
flags.DEFINE_string("out", "reports/bench", "folder for rank.json and rank.md", flag_values=FLAGS)


def main(argv=None) -> dict:
    return run(command_line.parse(FLAGS, argv, __doc__))


if __name__ == "__main__":
    main()
