"""The scripts' command lines, in absl flags as train.py's and eval.py's.

Each script defines its flags on a FlagValues of its own rather than absl's global FLAGS: scripts imported
into one process (by the tests) would collide there on names like --out. main(argv) parses the list it is
given, so that a test runs a script as the command line does. The groups of flags that several scripts
share are defined here too.
"""
import contextlib
import sys
import types

from absl import flags

from studies import StudyError

HELP = ("-h", "--help", "--helpfull")


def parse(flag_values: flags.FlagValues, argv: list[str] | None, doc: str,
          positional: bool = False) -> types.SimpleNamespace:
    """The flags of `argv` (None: the command line's) as attributes, those it omits at their defaults (an
    earlier parse does not carry over), and its other arguments as `positional` (an error unless the script
    takes them). --help prints `doc` and the flags; a wrong flag ends the process with its error and status
    2, as argparse and absl's app.run do."""
    argv = sys.argv[1:] if argv is None else argv
    if any(arg in HELP for arg in argv):
        print(f"{doc.strip()}\n\nflags:\n{flag_values.get_help(include_special_flags=False)}")
        sys.exit(0)
    flag_values.unparse_flags()
    try:
        arguments = flag_values(["", *argv])[1:]
    except flags.Error as error:
        fail(str(error))
    if arguments and not positional:
        fail(f"unexpected arguments {' '.join(arguments)}")
    return types.SimpleNamespace(**flag_values.flag_values_dict(), positional=arguments)


def fail(message: str):
    """A mistake in the command line: its message, and status 2."""
    print(f"error: {message} (see --help)", file=sys.stderr, flush=True)
    sys.exit(2)


@contextlib.contextmanager
def one_line_errors():
    """A study's error (studies.StudyError) as `error: <message>` on stderr and its status (2: a mistake to
    correct, as train.py's), without a traceback."""
    try:
        yield
    except StudyError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        sys.exit(error.status)
    except KeyboardInterrupt:  # out of the training (studies/children.py says what it stopped)
        print("interrupted (Ctrl-C); rerun the same command to go on", file=sys.stderr, flush=True)
        sys.exit(130)


# --- the studies' shared flags ---------------------------------------------------------------------------

PUBLISHED_REPORTS = "reports"  # the committed reports, which the README and docs quote
DRAFT_REPORTS = "runs/reports"  # beside the runs: ignored by git


def split_extra(argv: list[str]) -> tuple[list[str], list[str]]:
    """The arguments before `--`, and those after it (for every train.py run of a study)."""
    return (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])


def define_study_flags(flag_values: flags.FlagValues) -> None:
    """The flags of a study's run (studies/runner.py), compare's and sweep's (which runs a sweep's study)."""
    flags.DEFINE_integer("seeds", None, "seeds per run (default: the study's)", lower_bound=1,
                         flag_values=flag_values)
    flags.DEFINE_integer("jobs", None, "training processes at once (default: one per GPU, one on a TPU, one per "
                         "CPU core without them)", lower_bound=1, flag_values=flag_values)
    flags.DEFINE_string("only", "", "comma-separated subset of the study's run names", flag_values=flag_values)
    flags.DEFINE_enum("pack", "auto", ("auto", "on", "off"), "train each run's seeds, and a learning-rate pick's "
                      "candidates, as one vmapped program (train.py --pack, training/packed.py) where the configs "
                      "allow it: `on`; `off`: one process a seed; `auto`: on with an accelerator, off on the CPU, where "
                      "packing gained nothing (docs/benchmarks.md, \"Packed training\")", flag_values=flag_values)
    flags.DEFINE_string("part", "", "k/n: train the k-th of n consecutive slices of the runs (after --only); the "
                        "report merges what every part recorded (runs.json beside it)", flag_values=flag_values)
    flags.DEFINE_string("runs_dir", "runs/compare", "workdirs go to <runs_dir>/<task>/<preset>",
                        flag_values=flag_values)
    flags.DEFINE_string("reports_dir", None, f"the report goes to <reports_dir>/<task>[/<preset>]; default "
                        f"{DRAFT_REPORTS} (untracked), or with --publish {PUBLISHED_REPORTS}", flag_values=flag_values)
    flags.DEFINE_bool("publish", False, f"refresh the committed report, under {PUBLISHED_REPORTS}/, instead of "
                      f"writing one under {DRAFT_REPORTS}/", flag_values=flag_values)
    flags.DEFINE_bool("from_published", False, f"where the report folder has no runs.json yet, start from the "
                      f"committed one under {PUBLISHED_REPORTS}/: the seeds and rate picks it records are read, not "
                      "trained again (another machine adding seeds to the CPU's runs)", flag_values=flag_values)
    flags.DEFINE_string("compilation_cache", "", "JAX's compilation cache, shared by the study's training processes "
                        "(default <runs_dir>/compilation_cache)", flag_values=flag_values)


def reports_dir(args) -> str:
    """Where a study's report goes: --reports_dir, else the committed tree with --publish, else the untracked
    one, so that a study run to try something leaves `git status` clean."""
    if args.publish and args.reports_dir is not None:
        fail(f"--publish writes to {PUBLISHED_REPORTS}/; give it or --reports_dir, not both")
    return args.reports_dir or (PUBLISHED_REPORTS if args.publish else DRAFT_REPORTS)


# --- the benchmarks' shared flags ------------------------------------------------------------------------


def define_shape_flags(flag_values: flags.FlagValues, lengths: str) -> None:
    """The flags of bench_attention, bench_chunks and bench_decode: the shapes, timings, seed and output."""
    flags.DEFINE_string("lengths", lengths, "comma-separated sequence lengths", flag_values=flag_values)
    flags.DEFINE_integer("batch", 1, "B", lower_bound=1, flag_values=flag_values)
    flags.DEFINE_integer("heads", 4, "H", lower_bound=1, flag_values=flag_values)
    flags.DEFINE_integer("head_dim", 64, "D", lower_bound=1, flag_values=flag_values)
    flags.DEFINE_integer("num_features", 64, "for the kinds that take it (performer)", lower_bound=1,
                         flag_values=flag_values)
    flags.DEFINE_integer("repeats", 5, "timings per measurement; the median is kept", lower_bound=1,
                         flag_values=flag_values)
    flags.DEFINE_integer("seed", 0, "seed of the inputs and the module", flag_values=flag_values)
    flags.DEFINE_string("out", "reports/bench", "folder for the JSON, markdown and PNG", flag_values=flag_values)


def define_common_flags(flag_values: flags.FlagValues, lengths: str) -> None:
    """The flags bench_attention and bench_chunks share: the shapes, dtype, timing and budgets."""
    from attention import fused  # here, not above: the scripts without these flags need not load JAX

    define_shape_flags(flag_values, lengths)
    flags.DEFINE_enum("dtype", "float32", ("float32", "bfloat16"), "of the inputs and the module's floating state",
                      flag_values=flag_values)
    flags.DEFINE_enum("implementation", "auto", fused.IMPLEMENTATIONS, "softmax's (and the reference's) kernel, "
                      "for the kinds that take it: see attention/fused.py; cudnn is refused where it cannot run",
                      flag_values=flag_values)
    flags.DEFINE_float("max_seconds", 10.0, "a kind slower than this per forward+backward skips its larger "
                       "lengths", flag_values=flag_values)
    flags.DEFINE_float("max_memory_gb", 8.0, "a kind whose planned memory exceeds this (GiB) is skipped from "
                       "that length on", flag_values=flag_values)
