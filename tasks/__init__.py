"""The tasks, by config.task. Every module of this package that defines NAME is a task (the Task interface of
tasks/interface.py): adding one is adding a module, and `register` adds one defined elsewhere."""
import functools
import importlib
import pkgutil

from tasks.interface import MEMBERS, Task

_REGISTERED: dict[str, Task] = {}


@functools.cache
def _discover() -> None:
    """Imports this package's task modules once, on first use: none imports this package, so a task module
    can be imported alone."""
    for module in pkgutil.iter_modules(__path__):
        candidate = importlib.import_module(f"{__name__}.{module.name}")
        if hasattr(candidate, "NAME") and candidate.NAME not in _REGISTERED:
            register(candidate)


def register(task: Task) -> Task:
    if not isinstance(task, Task):
        missing = [name for name in MEMBERS if not hasattr(task, name)]
        raise TypeError(f"{task!r} is not a task: it lacks {', '.join(sorted(missing))}")
    _REGISTERED[task.NAME] = task
    return task


def names() -> list[str]:
    _discover()
    return sorted(_REGISTERED)


def get(name: str) -> Task:
    if name not in names():
        raise ValueError(f"config.task={name!r} is not a task; choose one of: {', '.join(names())}")
    return _REGISTERED[name]
