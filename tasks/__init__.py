"""The tasks, by config.task: the lab's own are the modules imported below, one list that an IDE, grep or a
static walk follows from `tasks.get`; a task defined elsewhere (any object with the Task interface of
tasks/interface.py) joins them through `register`."""
from tasks import listops, mlm, recall, translation
from tasks.interface import MEMBERS, Task

LAB_TASKS = (listops, mlm, recall, translation)

_REGISTERED: dict[str, Task] = {}


def register(task: Task) -> Task:
    if not isinstance(task, Task):
        missing = [name for name in MEMBERS if not hasattr(task, name)]
        raise TypeError(f"{task!r} is not a task: it lacks {', '.join(sorted(missing))}")
    _REGISTERED[task.NAME] = task
    return task


for _task in LAB_TASKS:
    register(_task)


def names() -> list[str]:
    return sorted(_REGISTERED)


def get(name: str) -> Task:
    if name not in names():
        raise ValueError(f"config.task={name!r} is not a task; choose one of: {', '.join(names())}")
    return _REGISTERED[name]
