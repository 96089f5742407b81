"""Studies of attention kinds across runs: a study (STUDIES in configs/<task>.py) trained and reported (runner.py, its
training processes in jobs.py), run from a W&B sweep file (sweeps.py, which also generates them), and the
tables of finished workdirs (summaries.py)."""
