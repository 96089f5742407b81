"""The config a workdir was trained with, read from its config.json: `--config=configs/workdir.py:runs/x`.

eval.py takes it when --config is left out; train.py takes it to continue a run without repeating its
presets, e.g. `--config=configs/workdir.py:runs/x --config.num_train_steps=6000
--config.resume_with_changes=num_train_steps`. A field the run's config.json lacks (written before the
field existed) keeps its default, or takes the value runs had before it (BEFORE_THEY_EXISTED).
"""
import os

import tasks
from attention import registry
from configs.task_configs import BY_TASK
from runtime import workdirs
from runtime.workdirs import CONFIG_FILE, WorkdirError


def get_config(path: str | None = None):
    if not path:
        raise WorkdirError("configs/workdir.py needs the workdir: --config=configs/workdir.py:<workdir>")
    return load_config(path)


def load_config(workdir: str):
    """The config `workdir` was trained with."""
    workdirs.require_directory(workdir)
    if (stored := workdirs.stored_config(workdir)) is None:
        raise WorkdirError(f"{os.path.join(workdir, CONFIG_FILE)}: not found; pass the run's --config")
    return from_record(stored, os.path.join(workdir, CONFIG_FILE))


def _replaced_at_default(field: str, value, where: str) -> bool:
    """Whether `field` is an attention option that others replaced (attention/registry.py, RETIRED) at the default
    they all share: it then says nothing they do not, and is left out. At another value it is refused, naming
    them: which of them it meant depends on the run's kinds."""
    block, _, option = field.partition(".")
    if block != "attention" or not (successors := registry.replacement(option)):
        return False
    if {registry.option_defaults()[successor] for successor in registry.RETIRED[option]} == {value}:
        return True
    raise WorkdirError(f"{where}: field {field}={value!r} is replaced by {successors}; pass the run's --config with "
                       f"the one its kinds read")


# Fields whose default is not what a run trained with before the field existed: such a run's config.json lacks
# them and loads at this value.
BEFORE_THEY_EXISTED = {"weight_decay_on_decays": True}  # weight decay reached every parameter


def from_record(record: dict, where: str):
    """The ConfigDict of a config.json without its runtime: its task's default config with the record's
    values; a field the record lacks (written before the field existed) keeps its default, or the value runs
    trained with before it existed (BEFORE_THEY_EXISTED)."""
    task = record.get("task")
    if task not in tasks.names():
        raise WorkdirError(f"{where}: task={task!r} is not a task of this lab")
    config = BY_TASK[task].get_config()
    config.update_from_flattened_dict({field: value for field, value in BEFORE_THEY_EXISTED.items()
                                       if field not in record})
    for field, value in workdirs.flatten(record).items():
        if _replaced_at_default(field, value, where):
            continue
        try:
            config.update_from_flattened_dict({field: value})
        except (KeyError, AttributeError, TypeError) as error:
            raise WorkdirError(f"{where}: field {field}={value!r} does not fit this version's config "
                               f"({error}); pass the run's --config") from None
    return config
