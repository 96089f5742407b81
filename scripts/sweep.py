"""W&B sweep definitions generated from the studies marked `sweep` (configs/<task>.py), a run of one started
by `wandb agent`, and a sweep run locally.

  python -m scripts.sweep --generate                      # writes sweeps/<task>-<preset>.yaml of the sweep studies
  wandb sweep sweeps/mlm-kinds.yaml                        # the sweep on W&B (docs/usage.md, "Sweeps"); the agent runs
  python -m scripts.sweep sweeps/mlm-kinds.yaml --study_run=performer_m32 --seed=0   # one of its runs
  python -m scripts.sweep sweeps/mlm-kinds.yaml --jobs=2   # the sweep locally, without a W&B server

From the repository root. A sweep file has `method: grid` over two parameters, study_run (the names of the
study's runs) and seed (its seeds), so that W&B's grid is exactly the study's runs, each config once; the
agent's command is this script on the file with ${args}, `--study_run=<run> --seed=<seed>`, which becomes
train.py on that run's config, as the study runner trains it, in a workdir per W&B run
(runs/agent/<task>-<preset>/<W&B run id>).

A sweep file runs locally as the study it was generated from (a file that none generates, edited or stale,
is refused): scripts/compare.py's runner (studies/runner.py) trains each run, with the flags below, in the
workdirs and into the report of `python -m scripts.compare --task=<task> --preset=<preset>`.
"""
import os
import shlex
import sys

from absl import flags

from scripts import command_line
from studies import sweeps

FLAGS = flags.FlagValues()
flags.DEFINE_bool("generate", False, "write the sweeps/*.yaml of the studies marked sweep", flag_values=FLAGS)
flags.DEFINE_string(sweeps.RUN_PARAMETER, None, "the run of the sweep file to train (what `wandb agent` passes)",
                    flag_values=FLAGS)
flags.DEFINE_integer(sweeps.SEED_PARAMETER, 0, "its seed", flag_values=FLAGS)
command_line.define_study_flags(FLAGS)


def train_agent_run(path: str, run_name: str, seed: int, extra: list[str]) -> None:
    """Becomes train.py on the run (the agent's signals then reach it, and its exit status is the run's)."""
    try:
        command = sweeps.agent_command(path, run_name, seed) + extra
    except (OSError, ValueError) as error:
        command_line.fail(str(error))
    os.execv(command[0], command)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    own, extra = command_line.split_extra(argv)
    args = command_line.parse(FLAGS, own, __doc__, positional=True)
    args.reports_dir = command_line.reports_dir(args)
    if args.generate:
        if args.positional or extra:
            command_line.fail("--generate takes no other arguments")
        print("written: " + ", ".join(sweeps.generate()))
        return
    if len(args.positional) != 1:
        command_line.fail("give one sweep file, e.g. sweeps/mlm-kinds.yaml, or --generate")
    if (run_name := vars(args)[sweeps.RUN_PARAMETER]) is not None:
        train_agent_run(args.positional[0], run_name, vars(args)[sweeps.SEED_PARAMETER], extra)
        return
    with command_line.one_line_errors():
        sweeps.run_sweep(args.positional[0], args, extra, shlex.join(["python", "-m", "scripts.sweep", *argv]))


if __name__ == "__main__":
    main()
