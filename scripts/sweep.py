"""W&B sweep definitions generated from the studies marked `sweep` (configs/<task>.py), and a sweep run locally.

  python -m scripts.sweep --generate                      # writes sweeps/<task>-<preset>.yaml of the sweep studies
  python -m scripts.sweep sweeps/mlm-kinds.yaml --jobs=2   # the sweep locally, without a W&B server
  wandb sweep sweeps/mlm-kinds.yaml                        # the sweep on W&B (README, "Sweeps")

From the repository root. A study is a sweep when its runs are a grid: every combination of the values its
runs give the fields they override is one of its runs, once the kind options a combination's kind does
not take are left out. Its definition has `method: grid`, a parameter config.<field> per such field (one
value as `value`), config.seed over the study's seeds, and the command `wandb agent` runs: train.py on the
study's config, ${args} (`--config.<field>=<value>` for each parameter) and a workdir per W&B run.

A sweep file runs locally as the study it was generated from (a file that none generates, edited or stale,
is refused): scripts/compare.py's runner (studies/runner.py) trains each distinct config once, with the
flags below, in the workdirs and into the report of `python -m scripts.compare --task=<task> --preset=<preset>`.
"""
import shlex
import sys

from absl import flags

from scripts import command_line
from studies import sweeps

FLAGS = flags.FlagValues()
flags.DEFINE_bool("generate", False, "write the sweeps/*.yaml of the studies marked sweep", flag_values=FLAGS)
command_line.define_study_flags(FLAGS)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    own, extra = command_line.split_extra(argv)
    args = command_line.parse(FLAGS, own, __doc__, positional=True)
    if args.generate:
        if args.positional or extra:
            command_line.fail("--generate takes no other arguments")
        print("written: " + ", ".join(sweeps.generate()))
        return
    if len(args.positional) != 1:
        command_line.fail("give one sweep file, e.g. sweeps/mlm-kinds.yaml, or --generate")
    with command_line.one_line_errors():
        sweeps.run_sweep(args.positional[0], args, extra, shlex.join(["python", "-m", "scripts.sweep", *argv]))


if __name__ == "__main__":
    main()
