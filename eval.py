"""Evaluates the latest checkpoint of a workdir with the config it was trained with: writes eval.json
and plots there.

  python eval.py --workdir=runs/x [--config.eval.beam_size=4]

Without --config, the config is the workdir's config.json (configs/workdir.py). A config that differs
from it beyond the fields an evaluation may change (eval.*, wandb.*, the schedule, sharding) is refused.
"""
from absl import flags, logging
from ml_collections import config_flags

from runtime import cli
from training import validate

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file[:presets]; default: the workdir's own, "
                                          f"{cli.WORKDIR_CONFIG}:<workdir>.")
# Required: checked by cli.run, in the lab's words, before the config (the workdir's own) is read.
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory holding checkpoints/ (required).")


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # Orbax and TFDS log every file operation at INFO
    validate.validate(_CONFIG.value)  # here, before the evaluation machinery is imported (seconds)
    from training import loop  # Orbax, SciPy, Matplotlib: imported once the config is checked

    loop.evaluate(_CONFIG.value, _WORKDIR.value)  # its last line: the step, the metrics, the file it wrote


if __name__ == "__main__":
    cli.run(main, default_config=cli.WORKDIR_CONFIG)
