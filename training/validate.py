"""Config checks that run before any data is built or anything is compiled: here the fields every task has,
in each task's check_config (tasks/interface.py) the task's own."""
import os

from flax import nnx

import attention
import tasks
from models import ROLES
from training import model_config, sharding, steps, workdirs
from training.config_checks import ConfigError, check_int, check_number, choice

POSITIONS = ("sinusoidal", "learned")
WANDB_MODES = ("online", "offline", "disabled")
NONFINITE = ("stop", "skip")  # what training does after a step with a non-finite loss or gradient
POSITIVE_INTS = ("num_train_steps", "log_every_steps", "eval_every_steps", "checkpoint_every_steps",
                 "per_device_batch_size", "model.num_layers", "model.d_model", "model.num_heads",
                 "eval.batch_size", "eval.rank_examples", "attention.num_features")
# 0: none, or the default; attention.chunk_size 0: the size attention/chunking.py picks (auto)
NON_NEGATIVE_INTS = ("seed", "warmup_steps", "model.mlp_dim", "model.qk_head_dim", "model.conv_kernel",
                     "attention.chunk_size", "attention.redraw_every_steps")
# field: the interval its value must lie in ("[" where the low end is allowed), and why where it helps.
NUMBER_RANGES = {
    "learning_rate": ("(0, inf)", ""),
    "weight_decay": ("[0, inf)", ""),
    "grad_clip_norm": ("[0, inf)", "0: no clipping"),
    "label_smoothing": ("[0, 1)", "the share of each target's probability spread over the vocabulary"),
    "model.dropout_rate": ("[0, 1)", ""),
    "attention.dropout_rate": ("[0, 1)", ""),
    "attention.eps": ("(0, inf)", "it keeps a kernelised normaliser away from 0"),
}


def _check_resume_fields(config) -> None:
    named = workdirs.changes_named(config)
    if unknown := [name for name in named if not workdirs.is_under(name, workdirs.CHANGEABLE)]:
        raise ConfigError(f"config.resume_with_changes={config.resume_with_changes!r}: {', '.join(unknown)} "
                          f"cannot change within a run; a restart may change only: "
                          f"{', '.join(workdirs.CHANGEABLE)}")


def _check_attention_fields(config, task) -> None:
    """Only roles the model has, a kind that role may take, and options some kind takes."""
    model_roles = task.roles(config)
    for role in ROLES:
        if config.attention[role] and role not in model_roles:
            raise ConfigError(f"config.attention.{role}={config.attention[role]!r}: the {task.NAME} task's "
                              f"model has no {role} attention (its roles: {', '.join(model_roles)})")
    for role, kind in model_config.role_kinds(config, model_roles).items():
        choice(f"attention.{role}" if config.attention[role] else "attention.name", kind,
               task.allowed_kinds(config))
    known_options = attention.all_options() | {"name", *ROLES}
    for key in config.attention:
        choice(f"attention.{key} (an attention option)", key, sorted(known_options))


def _check_kind_options(config, task) -> None:
    """Builds each kind in use once, so that its own checks of its options (an odd Taylor order, a
    window below 1, ...) fail here, before any data is built or anything is compiled."""
    head_dim = config.model.qk_head_dim or config.model.d_model // config.model.num_heads
    for kind, options in model_config.kind_options(config, task.roles(config)).items():
        try:
            attention.create(kind, num_heads=config.model.num_heads, head_dim=head_dim,
                             rngs=nnx.Rngs(0), **options)
        except ValueError as error:
            raise ConfigError(f"config.attention options for kind {kind!r}: {error}") from None


def check_devices(config) -> None:
    """The device and precision fields, checked before jax.distributed.initialize(), which must precede
    any JAX computation (the rest of validate() runs some)."""
    choice("sharding.params", config.sharding.params, sharding.PARAMS)
    choice("compute_dtype", config.compute_dtype, steps.COMPUTE_DTYPES)
    if not isinstance(config.distributed, bool):
        raise ConfigError(f"config.distributed={config.distributed!r} must be True or False")


def validate(config) -> None:
    choice("task", config.task, tasks.names())
    task = tasks.get(config.task)
    check_devices(config)
    for field in POSITIVE_INTS:
        check_int(config, field, 1)
    for field in NON_NEGATIVE_INTS:
        check_int(config, field, 0)
    for field, (interval, why) in NUMBER_RANGES.items():
        check_number(config, field, interval, why)
    _check_resume_fields(config)
    _check_attention_fields(config, task)
    if config.model.d_model % config.model.num_heads:
        raise ConfigError(f"config.model.d_model={config.model.d_model} is not divisible by "
                          f"config.model.num_heads={config.model.num_heads}")
    _check_kind_options(config, task)
    choice("model.positions", config.model.positions, POSITIONS)
    choice("nonfinite", config.nonfinite, NONFINITE)
    task.check_config(config)
    mode = os.environ.get("WANDB_MODE") or config.wandb.mode
    choice("wandb.mode (or WANDB_MODE)", mode, WANDB_MODES)
