"""A workdir belongs to one config: the config.json its first run wrote is what every later train.py or
eval.py on it is compared with, field by field, before anything in the workdir is written."""
import json
import os

CONFIG_FILE = "config.json"
CHECKPOINTS_DIR = "checkpoints"
# The bytes a run's longest path adds to its workdir's, with room: an Orbax checkpoint's data file while it
# is written, checkpoints/<step>.orbax-checkpoint-tmp-<time>/state/ocdbt.process_<i>/d/<32 hex digits>.
LONGEST_INSIDE = 160
# Fields a restart may change when it names them (or their block) in config.resume_with_changes: how
# long the run trains, what it logs and how it is evaluated, where it runs (per_device_batch_size: to keep
# the global batch on another number of devices); never the model, the data, the optimiser or the seed.
# eval.py may change them without naming them.
CHANGEABLE = ("num_train_steps", "log_every_steps", "eval_every_steps", "checkpoint_every_steps", "profile_steps",
              "eval", "wandb", "sharding", "distributed", "per_device_batch_size")
# Not part of what was trained: the machine that ran it, and the switch itself.
UNCOMPARED = ("runtime", "resume_with_changes")


class WorkdirError(ValueError):
    """A workdir, or a file in it, that cannot serve the command: another config's run, unreadable JSON."""


def read_json(path: str) -> dict:
    """The JSON object in `path`; WorkdirError naming the path and the reason when there is none."""
    try:
        with open(path, encoding="utf-8") as f:
            content = json.load(f)
    except FileNotFoundError:
        raise WorkdirError(f"{path}: not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise WorkdirError(f"{path}: not readable as JSON ({error})") from None
    if not isinstance(content, dict):
        raise WorkdirError(f"{path}: holds a JSON {type(content).__name__}, not an object")
    return content


def flatten(tree: dict, prefix: str = "") -> dict:
    """{"model": {"d_model": 64}} -> {"model.d_model": 64}."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def config_record(config) -> dict:
    """The config as config.json and eval.json hold it (JSON types: what a comparison with them sees)."""
    return json.loads(json.dumps(config.to_dict()))


def stored_config(workdir: str) -> dict | None:
    """The workdir's config.json without its runtime; None where there is none (a new workdir)."""
    path = os.path.join(workdir, CONFIG_FILE)
    if not os.path.exists(path):
        return None
    return {key: value for key, value in read_json(path).items() if key != "runtime"}


def differences(stored: dict, config) -> dict[str, tuple]:
    """field -> (stored value, new value) where they differ. Fields only one side has are left out: a
    config.json written before a field existed ran with the value that is now its default."""
    old, new = flatten(stored), flatten(config_record(config))
    return {field: (old[field], new[field]) for field in sorted(old.keys() & new.keys())
            if old[field] != new[field] and not is_under(field, UNCOMPARED)}


def is_under(field: str, blocks) -> bool:
    """Whether `field` is one of `blocks` or inside one ("eval.beam_size" is under "eval")."""
    return any(field == block or field.startswith(block + ".") for block in blocks)


def changes_named(config) -> tuple[str, ...]:
    """The fields or blocks of config.resume_with_changes (validate.py checks them against CHANGEABLE)."""
    return tuple(name.strip() for name in config.resume_with_changes.split(",") if name.strip())


def _fixed(changed: dict) -> dict:
    """The changed fields that change what is trained: none of CHANGEABLE."""
    return {field: values for field, values in changed.items() if not is_under(field, CHANGEABLE)}


def _listed(changed: dict) -> str:
    return ", ".join(f"{field} {old!r} -> {new!r}" for field, (old, new) in changed.items())


def _shortened(path: str, keep: int = 40) -> str:
    return path if len(path) <= 2 * keep + 3 else f"{path[:keep]}...{path[-keep:]}"


def _limits(path: str) -> tuple[int, int] | None:
    """(NAME_MAX, PATH_MAX) of the filesystem that would hold `path` (its nearest existing parent's); None
    where the system does not say."""
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    try:
        return os.pathconf(existing, "PC_NAME_MAX"), os.pathconf(existing, "PC_PATH_MAX")
    except (OSError, ValueError):
        return None


def _check_length(workdir: str) -> None:
    """Refuses a workdir whose own name, or the files a run writes in it, would pass the filesystem's limits:
    the checkpoint store would fail in its background threads, after the run has started."""
    path = os.path.abspath(workdir)
    if (limits := _limits(path)) is None:
        return
    name_max, path_max = limits
    if long_names := [name for name in path.split(os.sep) if len(name.encode()) > name_max]:
        raise WorkdirError(f"--workdir={_shortened(workdir)}: a name in it is {len(long_names[0].encode())} bytes "
                           f"long, over the filesystem's limit of {name_max} (NAME_MAX); name a shorter workdir")
    if len(path.encode()) + LONGEST_INSIDE > path_max:
        raise WorkdirError(f"--workdir={_shortened(workdir)}: {len(path.encode())} bytes long as an absolute path; "
                           f"with the {LONGEST_INSIDE} a run's files add under it, it would pass the "
                           f"filesystem's limit of {path_max} (PATH_MAX); name a shorter workdir")


def check_path(workdir: str) -> None:
    """Refuses a --workdir that names no directory it could be: empty, a file, or a path too long."""
    if not workdir or not workdir.strip():
        raise WorkdirError("--workdir is empty; name the run's directory, e.g. --workdir=runs/x")
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        raise WorkdirError(f"--workdir={workdir}: is a file, not a directory; name a directory (train.py "
                           f"makes it)")
    _check_length(workdir)


def checkpoint_steps(workdir: str) -> list[int]:
    """The steps of the workdir's checkpoints as Orbax names them (a directory per step), read without Orbax."""
    try:
        names = os.listdir(os.path.join(workdir, CHECKPOINTS_DIR))
    except OSError:
        return []
    return sorted(int(name) for name in names if name.isdigit())


def check_restart(config, workdir: str) -> None:
    """Refuses to train `config` in a workdir that another config trained, unless every differing field
    is named in config.resume_with_changes (and changeable); and a workdir whose checkpoints lost their
    config.json, whose config is then unknown."""
    if (stored := stored_config(workdir)) is None:
        if steps := checkpoint_steps(workdir):
            raise WorkdirError(
                f"{os.path.join(workdir, CONFIG_FILE)}: missing, but {os.path.join(workdir, CHECKPOINTS_DIR)} holds "
                f"step {steps[-1]}: the config these checkpoints trained is unknown, so they are not resumed under "
                f"this one; restore config.json (a finished run's eval.json holds it under \"config\"), or train "
                f"in a new --workdir")
        return
    named = changes_named(config)
    refused = {field: values for field, values in differences(stored, config).items()
               if not is_under(field, named)}
    if not refused:
        return
    where = os.path.join(workdir, CONFIG_FILE)
    if fixed := _fixed(refused):
        raise WorkdirError(f"{where}: this workdir trained another config ({_listed(fixed)}); train this "
                           f"one in a new --workdir")
    flag = ",".join([*named, *refused])
    raise WorkdirError(f"{where}: this run trained with other values ({_listed(refused)}); to continue it "
                       f"with the new ones, add --config.resume_with_changes={flag}")


def require_directory(workdir: str) -> None:
    check_path(workdir)
    if not os.path.isdir(workdir):
        raise WorkdirError(f"--workdir={workdir}: no such directory; train.py makes a workdir, eval.py "
                           f"evaluates one")


def check_eval_config(config, workdir: str) -> None:
    """Refuses to evaluate `workdir` with a config that differs from the one it trained in more than an
    evaluation may change (CHANGEABLE)."""
    require_directory(workdir)
    if (stored := stored_config(workdir)) is None:  # a workdir from before config.json was written
        return
    if fixed := _fixed(differences(stored, config)):
        raise WorkdirError(f"{os.path.join(workdir, CONFIG_FILE)}: this workdir trained another config "
                           f"({_listed(fixed)}); leave out --config to evaluate it as it was trained")
