"""Trains a config in a workdir, resuming from its latest checkpoint, then evaluates it.

  python train.py --config=configs/translation.py --workdir=runs/x [--config.attention.name=linear]

A workdir belongs to the config it started with: a restart with other values is refused, unless the
changed fields may change within a run and are named, e.g. `--config.num_train_steps=6000
--config.resume_with_changes=num_train_steps` (runtime/workdirs.py). Under `wandb agent`,
`--workdir=runs/sweeps/mlm/{wandb_run_id}` gives each run of the sweep its own workdir, named by its W&B
run id (see sweeps/). A mistake in the flags, config, data or workdir ends in one line and exit status 2
(--debug: with its traceback). A finished run (its eval.json at its last step) says so and exits;
--evaluate_again runs its final evaluation again. --print_config prints the resolved config and exits.

  python train.py --config=configs/mlm.py:tiny --pack=runs/s0:seed=0 --pack=runs/s1:seed=1,learning_rate=0.01

trains the runs as one vmapped program (training/packed.py), each in its own workdir as if trained alone: they
may differ in the seed and the learning rate.
"""
import json
import sys

from absl import flags, logging
from ml_collections import config_flags

import tasks
from runtime import cli, workdirs
from training import metrics, model_config, validate

DEFAULT_CONFIG = "configs/translation.py"
_CONFIG = config_flags.DEFINE_config_file("config", None, f"Config file[:presets]; default: {DEFAULT_CONFIG}.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (required but with --print_config): config, "
                               f"metrics, checkpoints, eval; {metrics.RUN_ID_PLACEHOLDER} in it is the W&B agent's "
                               "run id.")
_PRINT_CONFIG = flags.DEFINE_enum("print_config", None, cli.PRINT_CONFIG_CHOICES, "Check and print the resolved "
                                  "config, and what the --config.<field> overrides changed in its presets, then exit; "
                                  "no --workdir needed. Bare, or `read`: the fields the task's model and the kinds in "
                                  "use read; `all`: every field.")
_PACK = flags.DEFINE_multi_string("pack", [], "In place of --workdir: one run of a packed training, "
                                  "<workdir>:<field>=<value>[,...] with fields among seed and learning_rate; "
                                  "repeat it, once per run.")
_EVALUATE_AGAIN = flags.DEFINE_bool("evaluate_again", False, "Run the final evaluation of a finished run again "
                                    "(without it, a finished run says so and exits).")


def printed_config(config, everything: bool) -> str:
    """The resolved config as JSON: every field where `everything`, else those the task's model and the kinds in
    use read (model_config.unread_fields), saying on stderr how many it left out."""
    record = workdirs.config_record(config)
    if everything:
        return json.dumps(record, indent=1)
    unread = model_config.unread_fields(config, tasks.get(config.task))
    for field in unread:
        *parents, leaf = field.split(".")
        node = record
        for parent in parents:
            node = node[parent]
        del node[leaf]
    print(f"{len(unread)} fields the task's model and the kinds in use do not read are left out "
          f"(--print_config=all prints every field)", file=sys.stderr)
    return json.dumps(record, indent=1)


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # Orbax and TFDS log every file operation at INFO
    config, spec = _CONFIG.value, flags.FLAGS["config"].config_filename
    # Checked here, before the training machinery is imported (seconds); a distributed run's checks wait for
    # jax.distributed.initialize(), which must come first (training/loop.py's check_run).
    if _PRINT_CONFIG.value or not config.distributed:
        validate.validate(config)
    if _PRINT_CONFIG.value:
        print(printed_config(config, everything=_PRINT_CONFIG.value == "all"))
        print(cli.describe_config(config, spec))
        return
    if _PACK.value and _WORKDIR.value is not None:
        cli.fail("--workdir and --pack: give each packed run's workdir in its --pack, and no --workdir")
    if not _PACK.value and _WORKDIR.value is None:
        cli.fail("--workdir is missing; name the run's directory, e.g. --workdir=runs/x (or give --print_config)")
    print(cli.describe_config(config, spec), flush=True)
    _train(config)


def _train(config) -> None:
    from training import loop, packed  # Orbax, SciPy, Matplotlib: imported once the command is checked

    if _PACK.value:
        if None in packed.train_packed(*packed.members(config, _PACK.value)):
            raise SystemExit(1)  # a run that stopped on a non-finite step, said above; the others finished
        return
    loop.train_and_evaluate(config, metrics.resolve_workdir(_WORKDIR.value), evaluate_again=_EVALUATE_AGAIN.value)


if __name__ == "__main__":
    cli.run(main, default_config=DEFAULT_CONFIG)
