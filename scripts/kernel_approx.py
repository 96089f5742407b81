"""Error of Performer, Taylor and (1 + x/n)^n features against exp(q.k / sqrt d): JSON, PNG, table.

  python -m scripts.kernel_approx [--dim 16] [--out reports/kernel_approx] [--seed 0] [--pairs 256]
                                  [--draws 8]
"""
from absl import flags

from demos.kernel_approx import run
from scripts import command_line

FLAGS = flags.FlagValues()
flags.DEFINE_integer("dim", 16, "dimension d of q and k", flag_values=FLAGS)
flags.DEFINE_string("out", "reports/kernel_approx", "folder for the JSON and the PNG", flag_values=FLAGS)
flags.DEFINE_integer("seed", 0, "seed of the pairs and projections", flag_values=FLAGS)
flags.DEFINE_integer("pairs", 256, "random (q, k) pairs per norm", flag_values=FLAGS)
flags.DEFINE_integer("draws", 8, "Performer projections per kind (smaller m use their leading rows)",
                     flag_values=FLAGS)


def main(argv: list[str] | None = None) -> dict:
    return run(command_line.parse(FLAGS, argv, __doc__))


if __name__ == "__main__":
    main()
