"""Studies of attention kinds across runs: a study (STUDIES in configs/<task>.py) trained and reported (runner.py, its
training processes in jobs.py), run from a W&B sweep file (sweeps.py, which also generates them), and the
tables of finished workdirs (summaries.py). This module imports nothing: the GPU probe's process, which imports no
JAX, reads where a study reports from it."""
import os

RUNS_JSON = "runs.json"  # beside a study's report: every run's seeds' results, curves and pick (runner.py)
COMPILATION_CACHE_DIR = "compilation_cache"  # under a study's --runs_dir: JAX's, shared by its training processes


class StudyError(Exception):
    """A study that cannot run as asked (an unknown run, a sweep file no study generates, an eval.json that does
    not read): the scripts print `error: <message>` and exit with `status`, 2 unless set."""

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status


def report_dir(reports_dir: str, task: str, preset: str) -> str:
    """The quick study's report is the task's; another preset's sits beside it, so none overwrites another."""
    return os.path.join(reports_dir, task, *([] if preset == "quick" else [preset]))
