"""Trains a config in a workdir, resuming from its latest checkpoint, then evaluates it.

  python train.py --config=configs/translation.py --workdir=runs/x [--config.attention.name=linear]
"""
from absl import app, flags, logging
from ml_collections import config_flags

from training.loop import train_and_evaluate

_CONFIG = config_flags.DEFINE_config_file("config", "configs/translation.py", "Config file[:presets].")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory: config, metrics, checkpoints, eval.", required=True)


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # Orbax and TFDS log every file operation at INFO
    train_and_evaluate(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
    app.run(main)
