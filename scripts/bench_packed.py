"""Trainings per hour: one run at a time against several runs packed into one vmapped program.

  python -m scripts.bench_packed                                  # MLM standard and recall quick, 3 runs
  python -m scripts.bench_packed --configs=configs/mlm.py:standard --runs=4 --rounds=7

Each config's jitted train step is compiled for one run (the step the training loop runs) and for --runs runs
packed as training/packed.py packs them (their states and batches stacked, the step vmapped), then both are timed
in rounds that alternate, so that a shared machine's load falls on both alike; a row's time is its median round.
Trainings per hour are of the config's whole schedule, training steps alone; "x one run" is the packed program's
against one run's in the same run. FLOPs per step come from XLA's cost analysis of the compiled step, against the
fastest dense matmul measured in each round. --batches says where batches come from: "fixed" (made before
timing: the step alone) or "prefetch" (made ahead in a thread each step, as training does: R of them a step).
Writes JSON and a markdown table under --out.
"""
from absl import flags

from benchmarks.packed import BATCH_SOURCES, run
from scripts import command_line

FLAGS = flags.FlagValues()
flags.DEFINE_string("configs", "configs/mlm.py:standard,configs/recall.py:quick", "comma-separated FILE[:PRESETS]",
                    flag_values=FLAGS)
flags.DEFINE_integer("runs", 3, "runs packed in one program (a study's seeds)", flag_values=FLAGS)
flags.DEFINE_string("overrides", "", "comma-separated field=value set on every config after its presets",
                    flag_values=FLAGS)
flags.DEFINE_string("batches", "fixed,prefetch", f"comma-separated, of {', '.join(BATCH_SOURCES)}",
                    flag_values=FLAGS)
flags.DEFINE_integer("rounds", 5, "timing rounds; a row's time is its median round", flag_values=FLAGS)
flags.DEFINE_integer("steps_per_round", 10, "train steps per program in a round", flag_values=FLAGS)
flags.DEFINE_string("out", "reports/bench", "folder for packed.json and packed.md", flag_values=FLAGS)
flags.DEFINE_string("workdir", "runs/bench", "data a config prepares in its workdir", flag_values=FLAGS)


def main(argv=None) -> dict:
    return run(command_line.parse(FLAGS, argv, __doc__))


if __name__ == "__main__":
    main()
