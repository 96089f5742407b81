"""What train.py and eval.py share on the command line: a mistake in the flags, the config, the data or
the workdir ends in one line on stderr, `error: <field or file[:line]>: <what is wrong>; <what to do>`,
and exit status 2, with no traceback unless --debug (or $ATTENTION_LAB_DEBUG=1) asks for it."""
import ast
import glob
import importlib.util
import os
import re
import sys
import textwrap

import ml_collections
from absl import app, flags

from data.files import DataFileError
from data.paths import REPOSITORY
from runtime import atomic, interrupts, workdirs
from runtime.checkpoints import CheckpointError
from runtime.workdirs import WorkdirError
from training.config_checks import ConfigError, did_you_mean
from training.metrics import WandbError

DEBUG_VAR = "ATTENTION_LAB_DEBUG"
EXIT_STATUS = 2  # a command the user can correct, as argparse and absl use for bad flags
# A non-finite step that stops the run (config.nonfinite="stop") says which step and what to change.
USER_ERRORS = (ConfigError, DataFileError, WorkdirError, CheckpointError, FloatingPointError, WandbError)
WORKDIR_CONFIG = "configs/workdir.py"  # the config a workdir's config.json holds (eval.py's default)
HELP_FLAGS = ("--help", "-h", "-?", "--helpshort", "--helpfull")

_DEBUG = flags.DEFINE_bool("debug", False, f"Show the traceback of a config, data or workdir error (or "
                                           f"set ${DEBUG_VAR}=1).")


def _debugging(argv) -> bool:
    # Flags may not be parsed yet: the mistake can be in them.
    return os.environ.get(DEBUG_VAR) == "1" or "--debug" in argv or _DEBUG.present and _DEBUG.value


def fail(message: str):
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(EXIT_STATUS)


def _flag_value(argv, name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
        if arg == f"--{name}" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def _not_a_config(path: str, config) -> ConfigError:
    return ConfigError(f"{path}: get_config() returned a {type(config).__name__}, not an ml_collections "
                       f"ConfigDict; build it as the files in configs/ do (configs/common.py's base_config)")


def _load_config(spec: str):
    """The ConfigDict of `file[:arg]`, loaded as config_flags loads it; ConfigError naming the file where it
    has no get_config or its get_config returns something else."""
    path, _, arg = spec.partition(":")
    module_spec = importlib.util.spec_from_file_location("config_of_the_error", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    if not callable(getattr(module, "get_config", None)):
        raise ConfigError(f"{path}: defines no get_config(); a config file's get_config(arg) returns its "
                          f"ConfigDict, as the files in configs/ do")
    config = module.get_config(arg or None) if arg else module.get_config()
    if not isinstance(config, ml_collections.ConfigDict):
        raise _not_a_config(path, config)
    return config


def _config_file_problem(spec: str | None) -> str | None:
    """The config file's own mistake (no get_config, or one returning no ConfigDict), named with the file;
    None when it has none of these (or fails otherwise: config_flags' message then says how)."""
    if not spec:
        return None
    try:
        _load_config(spec)
    except ConfigError as error:
        return str(error)
    except Exception:  # noqa: BLE001 - the config's other errors are reported as config_flags words them
        return None
    return None


def changes_from_preset(config, spec: str) -> dict[str, tuple]:
    """field -> (its value in `spec`, the config file with its presets; its value in `config`) where they
    differ: what the command line's overrides changed."""
    preset = workdirs.flatten(_load_config(spec).to_dict())
    return {field: (preset.get(field), value) for field, value in workdirs.flatten(config.to_dict()).items()
            if preset.get(field) != value}


# train.py --print_config's values; the bare flag is the first.
PRINT_CONFIG_CHOICES = ("read", "all")


def describe_config(config, spec: str) -> str:
    """One line: the config file with its presets, and what the overrides changed in it."""
    path, colon, arg = spec.partition(":")
    shown = os.path.relpath(path, REPOSITORY) if path.startswith(REPOSITORY + os.sep) else path
    changes = changes_from_preset(config, spec)
    changed = ", ".join(f"{field}={value!r} (preset: {preset!r})" for field, (preset, value) in changes.items())
    return f"config: {shown}{colon}{arg}" + (f"; changed: {changed}" if changed else "; as its presets set it")


def _replaced_option(field: str) -> str | None:
    """What replaced `field` where it is an attention option no kind reads any more (attention/registry.py)."""
    block, _, option = field.partition(".")
    if block != "attention":
        return None
    from attention import registry  # registers every kind with it: only a mistyped attention field needs them

    return registry.replacement(option)


def _unknown_field(argv, default_config: str | None) -> str | None:
    """The first `--config.<field>` override that names no field of the config, with the closest ones or, for a
    replaced attention option, its replacements."""
    overrides = [re.match(r"--(?:no)?config\.([^=]+)", arg).group(1) for arg in argv
                 if re.match(r"--(?:no)?config\.", arg)]
    spec = _flag_value(argv, "config") or default_config
    if not overrides or not spec:
        return None
    try:
        fields = list(workdirs.flatten(_load_config(spec).to_dict()))
    except Exception:  # noqa: BLE001 - the config's own error is what the caller then reports
        return None
    for name in overrides:
        if name not in fields:
            if successors := _replaced_option(name):
                return f"--config.{name}: no such field of {spec}; it is replaced by {successors}"
            parent = name.rpartition(".")[0]
            siblings = [field for field in fields if field.rpartition(".")[0] == parent]
            hint = (did_you_mean(name, fields) or siblings and f"; did you mean {', '.join(siblings)}?" or
                    "; see the config file for its fields")
            return f"--config.{name}: no such field of {spec}{hint}"
    return None


def _last_line(error: Exception) -> str:
    """The message of an error raised while the flags were parsed. ml_collections wraps a config file's
    own error in that error's traceback; the traceback's last line is the message, after its type."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return re.sub(r"^[\w.]*(Error|Exception): ", "", lines[-1])


def _flags_parser(default_config: str | None):
    def parse(argv):
        if default_config and _flag_value(argv, "config") is None:  # the repository's, from any directory
            argv = [argv[0], f"--config={os.path.join(REPOSITORY, default_config)}", *argv[1:]]
        if (spec := _flag_value(argv, "config")) and not os.path.isfile(path := spec.partition(":")[0]):
            neighbours = _config_files(os.path.dirname(path))
            fail(f"--config={spec}: {path}: no such config file"
                 f"{did_you_mean(path, neighbours, key=os.path.basename) or '; the configs are in configs/'}")
        try:
            parsed = flags.FLAGS(argv)
        except Exception as error:  # noqa: BLE001 - any of them is a mistake in the flags
            if _debugging(argv):
                raise
            spec = _flag_value(argv, "config") or default_config
            fail(_config_file_problem(spec) or _unknown_field(argv, default_config) or _last_line(error))
        config = flags.FLAGS["config"].value
        if not isinstance(config, ml_collections.ConfigDict):  # config_flags takes any object get_config returns
            fail(str(_not_a_config(_flag_value(argv, "config").partition(":")[0], config)))
        return parsed
    return parse


def _config_files(folder: str) -> dict[str, ast.Module]:
    """The config files of `folder` (those that define get_config), each with its syntax tree, read without
    running the file; a file that does not parse is none."""
    files = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.py"))):
        try:
            with open(path) as f:
                tree = ast.parse(f.read(), path)
        except (OSError, SyntaxError, ValueError):  # ValueError: not UTF-8, or a NUL byte
            continue
        if any(isinstance(node, ast.FunctionDef) and node.name == "get_config" for node in tree.body):
            files[path] = tree
    return files


def _configs_with_presets() -> str:
    """Each config file's docstring (its task and presets)."""
    return "\n\n".join(f"{os.path.relpath(path, REPOSITORY)}\n{textwrap.indent(ast.get_docstring(tree) or '', '  ')}"
                       for path, tree in _config_files(os.path.join(REPOSITORY, "configs")).items())


def _kinds_with_options() -> str:
    import attention  # registers every kind; only --help needs them here

    rows = [f"  {name:<18} {', '.join(attention.options(name)) or '-'}" for name in attention.names()]
    return "\n".join(rows)


def guide() -> str:
    """What --help adds to a command's docstring: the configs and presets, the attention kinds and options."""
    kinds = ("Attention kinds (--config.attention.name=<kind>, or per role: .encoder_self, .decoder_self, "
             ".cross) and the options each takes (--config.attention.<option>=<value>):")
    fields = ("Every field, with a comment on what it does, is in the config file; any field is set with "
              "--config.<field>=<value>, e.g. --config.model.num_layers=4. docs/usage.md, Configuration, has more.")
    return (f"\nConfigs (--config=<file>[:<preset>,<preset>=<value>]) and their presets:\n\n"
            f"{_configs_with_presets()}\n\n{textwrap.fill(kinds, 110)}\n\n{_kinds_with_options()}\n\n"
            f"{textwrap.fill(fields, 110)}\n")


def run(main, default_config: str) -> None:
    """app.run(main) with the errors above made one line. Without --config, the config is `default_config`
    (given to the flag here, not where it is defined: config_flags would load it, and apply the
    overrides, at import, out of reach of these checks); WORKDIR_CONFIG is the --workdir's own."""
    def guarded(argv):
        try:
            return main(argv)
        except USER_ERRORS as error:
            if _debugging(argv):
                raise
            fail(str(error))
        except KeyboardInterrupt:  # outside the training loop, which checkpoints and says so itself
            if _debugging(argv):
                raise
            print("interrupted (Ctrl-C); what was written is complete: rerun the same command to go on",
                  file=sys.stderr, flush=True)
            sys.exit(interrupts.INTERRUPTED_STATUS)
        except Exception as error:  # noqa: BLE001 - a full or read-only disk is named in one line
            if _debugging(argv) or (message := atomic.disk_problem(error)) is None:
                raise
            fail(message)

    def parse(argv):
        argv = [f"--print_config={PRINT_CONFIG_CHOICES[0]}" if arg == "--print_config" else arg for arg in argv]
        if (workdir := _flag_value(argv, "workdir")) is not None and not workdir.strip():
            fail("--workdir is empty; name the run's directory, e.g. --workdir=runs/x")
        default = default_config
        if default == WORKDIR_CONFIG:  # the script reads a workdir (eval.py): nothing to do without one
            if workdir is None and not any(arg in HELP_FLAGS for arg in argv):
                fail("--workdir is missing; name the run to evaluate, e.g. --workdir=runs/x (the folder train.py "
                     "wrote)")
            default = f"{WORKDIR_CONFIG}:{workdir}" if workdir else None
        return _flags_parser(default)(argv)

    if any(arg in HELP_FLAGS for arg in sys.argv):
        main_module = sys.modules["__main__"]
        main_module.__doc__ = (main_module.__doc__ or "") + guide()
    app.run(guarded, flags_parser=parse)
