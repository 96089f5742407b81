"""Trains a config in a workdir, resuming from its latest checkpoint, then evaluates it.

  python train.py --config=configs/translation.py --workdir=runs/x [--config.attention.name=linear]

A workdir belongs to the config it started with: a restart with other values is refused, unless the
changed fields may change within a run and are named, e.g. `--config.num_train_steps=6000
--config.resume_with_changes=num_train_steps` (training/workdirs.py). Under `wandb agent`,
`--workdir=runs/sweeps/mlm/{wandb_run_id}` gives each run of the sweep its own workdir, named by its W&B
run id (see sweeps/). A mistake in the flags, config, data or workdir ends in one line and exit status 2
(--debug: with its traceback).
"""
from absl import flags, logging
from ml_collections import config_flags

from training import cli, metrics
from training.loop import train_and_evaluate

DEFAULT_CONFIG = "configs/translation.py"
_CONFIG = config_flags.DEFINE_config_file("config", None, f"Config file[:presets]; default: {DEFAULT_CONFIG}.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory: config, metrics, checkpoints, eval; "
                               f"{metrics.RUN_ID_PLACEHOLDER} in it is the W&B agent's run id.", required=True)


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # Orbax and TFDS log every file operation at INFO
    train_and_evaluate(_CONFIG.value, metrics.resolve_workdir(_WORKDIR.value))


if __name__ == "__main__":
    cli.run(main, default_config=DEFAULT_CONFIG)
