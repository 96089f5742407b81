"""The config a workdir was trained with, read from its config.json: `--config=configs/workdir.py:runs/x`.

eval.py takes it when --config is left out; train.py takes it to continue a run without repeating its
presets, e.g. `--config=configs/workdir.py:runs/x --config.num_train_steps=6000
--config.resume_with_changes=num_train_steps`. A field the run's config.json lacks (written before the
field existed) keeps its default.
"""
from training import workdirs


def get_config(path: str | None = None):
    if not path:
        raise workdirs.WorkdirError("configs/workdir.py needs the workdir: --config=configs/workdir.py:<workdir>")
    return workdirs.load_config(path)
