"""Evaluates the latest checkpoint of a workdir: writes eval.json and plots there.

  python eval.py --config=configs/translation.py --workdir=runs/x
"""
import json

from absl import app, flags, logging
from ml_collections import config_flags

from training.evaluate import evaluate

_CONFIG = config_flags.DEFINE_config_file("config", "configs/translation.py", "Config file[:presets].")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory holding checkpoints/.", required=True)


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # Orbax and TFDS log every file operation at INFO
    result = evaluate(_CONFIG.value, _WORKDIR.value)
    print(json.dumps(result["metrics"]))


if __name__ == "__main__":
    app.run(main)
