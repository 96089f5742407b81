"""Config checks that run before any data is built or anything is compiled: here the fields every task has,
in each task's check_config (tasks/interface.py) the task's own."""
import os

import attention
import tasks
from attention import fused, registry
from attention.ops import linear_pallas
from models import CAUSAL_ROLES, ROLES, SELF_ROLES
from runtime import profiling, workdirs
from training import model_config, sharding, steps
from training.config_checks import ConfigError, check_int, check_number, choice

POSITIONS = ("sinusoidal", "learned")
WANDB_MODES = ("online", "offline", "disabled")
NONFINITE = ("stop", "skip")  # what training does after a step with a non-finite loss or gradient
POSITIVE_INTS = ("num_train_steps", "log_every_steps", "eval_every_steps", "checkpoint_every_steps",
                 "per_device_batch_size", "model.num_layers", "model.d_model", "model.num_heads",
                 "eval.batch_size", "eval.rank_examples")
# 0: none, or the default
NON_NEGATIVE_INTS = ("seed", "warmup_steps", "model.mlp_dim", "model.qk_head_dim", "model.conv_kernel")
# field: the interval its value must lie in ("[" where the low end is allowed), and why where it helps.
NUMBER_RANGES = {
    "learning_rate": ("(0, inf)", ""),
    "weight_decay": ("[0, inf)", ""),
    "grad_clip_norm": ("[0, inf)", "0: no clipping"),
    "label_smoothing": ("[0, 1)", "the share of each target's probability spread over the vocabulary"),
    "model.dropout_rate": ("[0, 1)", ""),
}


def _check_resume_fields(config) -> None:
    named = workdirs.changes_named(config)
    if unknown := [name for name in named if not workdirs.is_under(name, workdirs.CHANGEABLE)]:
        raise ConfigError(f"config.resume_with_changes={config.resume_with_changes!r}: {', '.join(unknown)} "
                          f"cannot change within a run; a restart may change only: "
                          f"{', '.join(workdirs.CHANGEABLE)}")


def _check_attention_fields(config, task) -> None:
    """Only roles the model has, a kind that role may take (in a causal role, an incremental one), and options
    some kind takes."""
    model_roles = task.roles(config)
    for role in ROLES:
        if config.attention[role] and role not in model_roles:
            raise ConfigError(f"config.attention.{role}={config.attention[role]!r}: the {task.NAME} task's "
                              f"model has no {role} attention (its roles: {', '.join(model_roles)})")
    _check_layer_kinds(config, model_roles)
    for role, kinds in model_config.kinds_in_use(config, model_roles).items():
        field = model_config.kind_field(config, role)
        for layer, kind in enumerate(kinds):
            choice(f"{field} (layer {layer})" if len(kinds) > 1 else field, kind, task.allowed_kinds(config))
    model_config.check_incremental(config, tuple(role for role in model_roles if role in CAUSAL_ROLES),
                                   "attends causally")
    model_config.check_within_one_sequence(config, tuple(role for role in model_roles if role not in SELF_ROLES))
    known_options = attention.all_options() | {"name", *ROLES}
    for key in config.attention:
        if successors := registry.replacement(key):
            raise ConfigError(f"config.attention.{key} is replaced by {successors}")
        choice(f"attention.{key} (an attention option)", key, sorted(known_options))


def _check_layer_kinds(config, model_roles: tuple[str, ...]) -> None:
    """model.layer_kinds: a text, one kind for each of the model's layers, in a model with self-attention."""
    text = config.model.get("layer_kinds", "")
    if not isinstance(text, str):
        raise ConfigError(f"config.model.layer_kinds={text!r} must be a text: kinds separated by commas")
    if not (kinds := model_config.layer_kinds(config)):
        return
    if not any(role in SELF_ROLES for role in model_roles):
        raise ConfigError(f"config.model.layer_kinds={text!r}: this model has no self-attention (its roles: "
                          f"{', '.join(model_roles)}); leave it empty")
    if len(kinds) != config.model.num_layers:
        raise ConfigError(f"config.model.layer_kinds={text!r} names {len(kinds)} kind(s) for "
                          f"config.model.num_layers={config.model.num_layers}: one a layer")


# Implementations that run on some devices only: option -> (value, why it cannot run on this process's, or None).
DEVICE_BOUND = {"softmax_implementation": ("cudnn", fused.platform_unsupported),
                "kernelized_implementation": ("pallas", lambda: linear_pallas.UNAVAILABLE or None)}


def _check_implementation_here(config, kind: str) -> None:
    """An explicit implementation that cannot run on this process's devices whatever the shapes, refused here
    rather than when the first step compiles (a workdir already written)."""
    for option, (value, unsupported) in DEVICE_BOUND.items():
        if option in attention.options(kind) and config.attention.get(option) == value and (reason := unsupported()):
            raise ConfigError(f"config.attention.{option}={value!r} (kind {kind!r}) cannot run here: {reason}; use "
                              f"'auto' (it takes what runs here) or 'xla'")


def _check_unread_option(option: str, value, role_kinds: dict[str, str]) -> None:
    """An option set away from its default that no kind in use reads: refused in one line naming the kinds that
    read it (it would change nothing, silently: a run that widens linear attention with Performer's num_features
    would compare nothing), with the reason a reader would refuse the value too, where one would."""
    kinds = registry.readers(option)
    default = registry.options_of(kinds[0])[option].default
    in_use = ", ".join(f"{role}: {kind}" for role, kind in role_kinds.items())
    refusals = []
    for kind in kinds:
        try:
            registry.options_of(kind)[option].check(value)
        except ValueError as error:
            refusals.append(f"kind {kind!r} refuses it: {error}")
    invalid = f" ({refusals[0]})" if len(refusals) == len(kinds) else ""
    raise ConfigError(f"config.attention.{option}={value!r} is read by no kind in use ({in_use}), only by "
                      f"{', '.join(kinds)}{invalid}; leave it at {default!r}")


def _check_kind_options(config, task) -> None:
    """Checks each option a kind in use reads by that kind's declaration (attention/registry.py), building no
    kind, and refuses each option set away from its default that none of them reads: here, before any data is
    built or anything is compiled."""
    role_kinds = model_config.role_kinds(config, task.roles(config))
    in_use = model_config.kind_options(config, task.roles(config))
    for kind, options in in_use.items():
        try:
            registry.check_options(kind, options)
        except ValueError as error:
            raise ConfigError(f"config.attention options for kind {kind!r}: {error}") from None
        _check_implementation_here(config, kind)
    read = {option for kind in in_use for option in attention.options(kind)}
    for option, default in attention.option_defaults().items():
        if option not in read and config.attention.get(option, default) != default:
            _check_unread_option(option, config.attention[option], role_kinds)


def _check_convolution(config, task) -> None:
    """A centred convolution needs an odd kernel and a bidirectional role. The convolution sits in an
    Encoder's blocks, whose role is causal exactly when the model's only self-attention is decoder_self
    (recall's causal language model; an encoder-decoder's decoder has none)."""
    if not config.model.conv_centered:
        return
    if not isinstance(config.model.conv_centered, bool):
        raise ConfigError(f"config.model.conv_centered={config.model.conv_centered!r} must be True or False")
    if config.model.conv_kernel % 2 == 0:
        raise ConfigError(f"config.model.conv_centered=True needs an odd config.model.conv_kernel (the same "
                          f"number of positions on each side), not {config.model.conv_kernel}")
    if "encoder_self" not in task.roles(config):
        raise ConfigError("config.model.conv_centered=True: this model's convolution is in a causal role "
                          f"({', '.join(task.roles(config))}), where it would read later positions; use the "
                          "causal convolution (conv_centered=False)")


def check_devices(config) -> None:
    """The device and precision fields, checked before jax.distributed.initialize(), which must precede
    any JAX computation (the rest of validate() runs some)."""
    choice("sharding.params", config.sharding.params, sharding.PARAMS)
    choice("compute_dtype", config.compute_dtype, steps.COMPUTE_DTYPES)
    if not isinstance(config.distributed, bool):
        raise ConfigError(f"config.distributed={config.distributed!r} must be True or False")


def _check_early_stop(config, task) -> None:
    if not config.eval.stop_metric and config.eval.stop_at != 1.0:  # common.py's default
        raise ConfigError(f"config.eval.stop_at={config.eval.stop_at!r} is read only with eval.stop_metric, which "
                          f"is empty; set config.eval.stop_metric={task.PROGRESS_METRIC!r} to stop there")
    if config.eval.stop_metric:
        choice("eval.stop_metric", config.eval.stop_metric, ("", task.PROGRESS_METRIC))
        check_number(config, "eval.stop_at", "[0, 1]", f"{task.PROGRESS_METRIC} is a fraction: above 1 training "
                     "would never stop early")


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
    _check_early_stop(config, task)
    _check_convolution(config, task)
    choice("model.positions", config.model.positions, POSITIONS)
    choice("nonfinite", config.nonfinite, NONFINITE)
    profiling.window(config)
    task.check_config(config)
    mode = os.environ.get("WANDB_MODE") or config.wandb.mode
    choice("wandb.mode (or WANDB_MODE)", mode, WANDB_MODES)
