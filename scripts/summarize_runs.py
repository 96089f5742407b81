"""Markdown tables of test metrics and mean attention ranks per role, from the eval.json of workdirs;
runs of different tasks get a metrics table each.

  python -m scripts.summarize_runs runs/default runs/lin
"""
from absl import flags

from scripts import command_line
from studies.summaries import summary_tables

FLAGS = flags.FlagValues()  # none: the arguments are workdirs


def main(argv: list[str] | None = None) -> None:
    workdirs = command_line.parse(FLAGS, argv, __doc__, positional=True).positional
    if not workdirs:
        raise SystemExit(__doc__)
    with command_line.one_line_errors():
        print(summary_tables(workdirs))


if __name__ == "__main__":
    main()
