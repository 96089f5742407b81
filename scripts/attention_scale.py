"""Why attention divides q.k by sqrt(d): the variance of q.k, the entropy of softmax rows and the softmax's
Jacobian against d, with and without the scale, for random unit-variance q and k. JSON, PNG, report.md; the
report quotes the lab's SCAN result of `dot` (unscaled) against `softmax` (scaled) from its results.json.

  python -m scripts.attention_scale [--out reports/attention_scale] [--seed 0] [--max_dim 1024] [--pairs 20000]
                                    [--length 128] [--key_sets 16] [--queries 32]
                                    [--scan_results reports/translation/kinds/results.json]
"""
import sys

from absl import flags

from demos.attention_scale import run
from scripts import command_line

FLAGS = flags.FlagValues()
flags.DEFINE_string("out", "reports/attention_scale", "folder for report.md, JSON and PNG", flag_values=FLAGS)
flags.DEFINE_integer("seed", 0, "seed of q and k", flag_values=FLAGS)
flags.DEFINE_integer("max_dim", 1024, "largest d; d runs over powers of two from 2", lower_bound=2, flag_values=FLAGS)
flags.DEFINE_integer("pairs", 20_000, "(q, k) pairs per d for the variance", lower_bound=2, flag_values=FLAGS)
flags.DEFINE_integer("length", 128, "keys per softmax row, L", lower_bound=2, flag_values=FLAGS)
flags.DEFINE_integer("key_sets", 16, "independent sets of L keys per d", lower_bound=2, flag_values=FLAGS)
flags.DEFINE_integer("queries", 32, "queries per key set: rows of each softmax", lower_bound=2, flag_values=FLAGS)
flags.DEFINE_string("scan_results", "reports/translation/kinds/results.json",
                    "results.json of the translation kinds study, read for dot and softmax", flag_values=FLAGS)


def main(argv=None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    args = command_line.parse(FLAGS, argv, __doc__)
    return run(args, ("python -m scripts.attention_scale " + " ".join(argv)).strip())


if __name__ == "__main__":
    main()
