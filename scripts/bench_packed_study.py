"""A whole study's wall time: its runs trained one process a seed (`scripts.compare --pack=off`) against each run's
seeds, and its learning-rate pick's candidates, packed in one program (`--pack=on`).

  python -m scripts.bench_packed_study --task=recall --only=softmax_N16,linear_d16_N16   # the committed one
  python -m scripts.bench_packed_study --task=mlm --preset=standard --only=softmax,linear --order=off,on

Each sitting runs `scripts.compare` from scratch in a folder of its own under --root (its workdirs, its JAX
compilation cache, its report), one after the other in --order, which alternates the modes so that a shared
machine's load falls on both alike; each is timed from its start to its report: process start-ups, compilation,
data, training, evaluation and checkpoints, as a study spends them. Trainings per hour count every finished
training (a pick's candidates too); processes are train.py's (a train.log each). Every sitting trains the same
runs, so each one's test metrics are held to the first (unpacked) sitting's, workdir by workdir: a packed sitting's
gap is packing's, an unpacked one's is what rerunning alone changes. Writes JSON and a markdown table under --out.
"""
from absl import flags

from benchmarks.packed_study import run
from scripts import command_line
from studies.catalog import presets

FLAGS = flags.FlagValues()
flags.DEFINE_enum("task", None, sorted(presets()), "the study's task", required=True, flag_values=FLAGS)
flags.DEFINE_string("preset", "quick", "the study (STUDIES in configs/<task>.py)", flag_values=FLAGS)
flags.DEFINE_string("only", "", "comma-separated runs of the study (empty: all)", flag_values=FLAGS)
flags.DEFINE_integer("seeds", None, "seeds per run (default: the study's)", lower_bound=1, flag_values=FLAGS)
flags.DEFINE_integer("jobs", None, "training processes at once (default: scripts.compare's)", lower_bound=1,
                     flag_values=FLAGS)
flags.DEFINE_string("order", "off,on,on,off", "the sittings' modes, in the order they run, the first off",
                    flag_values=FLAGS)
flags.DEFINE_string("root", "runs/bench/packed_study", "each sitting's runs, under <root>/<k>_pack_<mode>",
                    flag_values=FLAGS)
flags.DEFINE_string("out", "reports/bench", "folder for packed_study.json and packed_study.md", flag_values=FLAGS)


def main(argv=None) -> dict:
    return run(command_line.parse(FLAGS, argv, __doc__))


if __name__ == "__main__":
    main()
