"""Attention as Nadaraya-Watson kernel regression on a 1-D toy problem: average pooling, a fixed Gaussian kernel
and one of learned width, the last two through the lab's `gaussian` attention kind. JSON, two PNGs, report.md.

  python -m scripts.nadaraya_watson [--out reports/nadaraya_watson] [--seed 0] [--num_train 50]
                                    [--noise_std 0.5] [--steps 1000] [--learning_rate 1.0]
"""
import sys

from absl import flags

from demos.nadaraya_watson import run
from scripts import command_line

FLAGS = flags.FlagValues()
flags.DEFINE_string("out", "reports/nadaraya_watson", "folder for report.md, JSON and PNGs", flag_values=FLAGS)
flags.DEFINE_integer("seed", 0, "seed of the training inputs and their noise", flag_values=FLAGS)
flags.DEFINE_integer("num_train", 50, "training points (leave-one-out needs another point)", lower_bound=2,
                     flag_values=FLAGS)
flags.DEFINE_float("noise_std", 0.5, "std of the training targets' noise", flag_values=FLAGS)
flags.DEFINE_integer("steps", 1000, "Adam steps on the kernel's raw precision", flag_values=FLAGS)
flags.DEFINE_float("learning_rate", 1.0, "Adam's", flag_values=FLAGS)


def main(argv=None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    args = command_line.parse(FLAGS, argv, __doc__)
    return run(args, ("python -m scripts.nadaraya_watson " + " ".join(argv)).strip())


if __name__ == "__main__":
    main()
