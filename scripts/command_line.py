"""The scripts' command lines, in absl flags as train.py's and eval.py's.

Each script defines its flags on a FlagValues of its own rather than absl's global FLAGS: scripts imported
into one process (by the tests, or one script using another's functions) would collide there on names like
--out. main(argv) parses the list it is given, so that a test runs a script as the command line does.
"""
import sys
import types

from absl import flags

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
