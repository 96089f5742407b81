"""Trains a config in a workdir, resuming from its latest checkpoint, then evaluates it.

  python train.py --config=configs/translation.py --workdir=runs/x [--config.attention.name=linear]

Under `wandb agent`, `--workdir=runs/sweeps/mlm/{wandb_run_id}` gives each run of the sweep its own
workdir, named by its W&B run id (see sweeps/).
"""
from absl import app, flags, logging
from ml_collections import config_flags

from training import metrics
from training.loop import train_and_evaluate

_CONFIG = config_flags.DEFINE_config_file("config", "configs/translation.py", "Config file[:presets].")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory: config, metrics, checkpoints, eval; "
                               f"{metrics.RUN_ID_PLACEHOLDER} in it is the W&B agent's run id.", required=True)


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # Orbax and TFDS log every file operation at INFO
    try:
        workdir = metrics.resolve_workdir(_WORKDIR.value)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    train_and_evaluate(_CONFIG.value, workdir)


if __name__ == "__main__":
    app.run(main)
