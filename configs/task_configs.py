"""The config module of each of the lab's tasks (tasks.LAB_TASKS), by task name: the one list that
studies/catalog.py (their STUDIES) and configs/workdir.py (a workdir's task's defaults) look them up in."""
from configs import listops, mlm, recall, translation

BY_TASK = {module.__name__.rpartition(".")[2]: module for module in (listops, mlm, recall, translation)}
