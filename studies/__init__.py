"""Studies of attention kinds across runs: a study (STUDIES in configs/<task>.py) trained and reported (runner.py, its
training processes in jobs.py), run from a W&B sweep file (sweeps.py, which also generates them), and the
tables of finished workdirs (summaries.py)."""


class StudyError(Exception):
    """A study that cannot run as asked (an unknown run, a sweep file no study generates, an eval.json that does
    not read): the scripts print `error: <message>` and exit with `status`, 2 unless set."""

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status
