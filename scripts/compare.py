"""Trains a study's grid of attention kinds over several seeds in parallel, then writes its report.

  python -m scripts.compare --task=mlm                                  # preset quick
  python -m scripts.compare --task=translation --preset=kinds --jobs=2
  python -m scripts.compare --task=mlm --only=softmax,linear --seeds=1 -- --config.wandb.mode=disabled
  python -m scripts.compare --task=recall --preset=kinds --rewrite_report --publish  # the committed report
                                                                                    # again, no training

From the repository root. The grids: STUDIES in configs/<task>.py. Each (run, seed) trains in its own process
and workdir, <runs_dir>/<task>/<preset>/<run>/seed<k> (its log in train.log there); one whose eval.json is
at the config's last step is skipped, so an interrupted study resumes. Arguments after `--` go to every
train.py run. The report (tables, plots) goes to <reports_dir>/<task>/report.md for the quick preset and
to <reports_dir>/<task>/<preset>/report.md for the others, from every run that finished. <reports_dir> is
runs/reports, untracked, unless --publish refreshes the committed report under reports/ (its "Produced by"
block then names --publish).
"""
import shlex
import sys

from absl import flags

from studies.catalog import presets
from scripts import command_line
from studies.runner import rewrite_report, run_study

FLAGS = flags.FlagValues()
flags.DEFINE_enum("task", None, sorted(presets()), "the study's task", required=True, flag_values=FLAGS)
flags.DEFINE_string("preset", "quick", "the study of the task: STUDIES in configs/<task>.py", flag_values=FLAGS)
command_line.define_study_flags(FLAGS)
flags.DEFINE_bool("rewrite_report", False, "train nothing: write the report again from what its directory "
                  "records (runs.json, else results.json), e.g. after the report's tables changed",
                  flag_values=FLAGS)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    own, extra = command_line.split_extra(argv)
    args = command_line.parse(FLAGS, own, __doc__)
    args.reports_dir = command_line.reports_dir(args)
    with command_line.one_line_errors():
        if args.rewrite_report:
            print(f"report: {rewrite_report(args.task, args.preset, args.reports_dir)}", flush=True)
            return
        run_study(args.task, args.preset, args, extra, shlex.join(["python", "-m", "scripts.compare", *argv]))


if __name__ == "__main__":
    main()
