"""Training speed of whole configs, measured in one run: time per step, tokens/s, achieved FLOP/s.

  python -m scripts.bench_train                                   # Transformer vs RNN on SCAN, MLM
  python -m scripts.bench_train --configs=configs/translation.py,configs/translation.py:rnn --rounds=7
  python -m scripts.bench_train --batches=host,prefetch           # the input pipeline's cost
  python -m scripts.bench_train --configs=configs/mlm.py --overrides=dataset.seq_len=512,compute_dtype=bfloat16

Each config's jitted train step is compiled once, then timed in rounds that alternate between the
configs, after an untimed round of each (compilation, warm-up), so that noise from a shared machine falls
on all of them alike; a config's time is its median
round. FLOPs per step come from XLA's cost analysis of the compiled step; "of matmul" compares them with the
fastest dense square matmul (benchmarks/roofline.py's sizes: 512 and 1024 on a CPU, 4096 and 8192 on an
accelerator) in the config's compute dtype, measured in each round of the same run. Writes JSON and a
markdown table under --out.

--batches says where each step's batch comes from: "fixed", four batches made before timing (the step
alone); "host", made in the loop before each step (the training loop before batches were prefetched);
"prefetch", made ahead by data/prefetch.py's thread (the training loop now). Each is its own row.
"""
from absl import flags

from benchmarks.train import BATCH_SOURCES, run
from scripts import command_line

FLAGS = flags.FlagValues()
flags.DEFINE_string("configs", "configs/translation.py,configs/translation.py:rnn,configs/mlm.py",
                    "comma-separated FILE[:PRESETS]", flag_values=FLAGS)
flags.DEFINE_string("overrides", "", "comma-separated field=value set on every config after its presets, as "
                    "train.py's --config.<field>=<value> (a value that is no Python literal is a string)",
                    flag_values=FLAGS)
flags.DEFINE_string("batches", "fixed", f"comma-separated, of {', '.join(BATCH_SOURCES)}", flag_values=FLAGS)
flags.DEFINE_integer("rounds", 5, "timing rounds; a config's time is its median round", flag_values=FLAGS)
flags.DEFINE_integer("steps_per_round", 20, "train steps per config in a round", flag_values=FLAGS)
flags.DEFINE_string("out", "reports/bench", "folder for train.json and train.md", flag_values=FLAGS)
flags.DEFINE_string("workdir", "runs/bench", "vocabularies of the translation configs", flag_values=FLAGS)


def main(argv=None) -> dict:
    return run(command_line.parse(FLAGS, argv, __doc__))


if __name__ == "__main__":
    main()
