"""Config checks that run before any data is built or anything is compiled."""
import os

from flax import nnx

import attention
from data import listops, recall, scan_grammar, text_corpus
from models import TransformerSpec, pooling, rnn
from training import sharding, steps, workdirs

ROLE_FIELDS = ("encoder_self", "decoder_self", "cross")
# The roles each task's model has (recall's depend on its form, see model_roles).
TASK_ROLES = {"translation": ROLE_FIELDS, "mlm": ("encoder_self",), "recall": ("decoder_self", "encoder_self"),
              "listops": ("encoder_self",)}
TASKS = tuple(TASK_ROLES)
MODELS = ("transformer", "rnn")  # translation's model.name
RNN_ROLES = ("cross",)  # the RNN attends from decoder states to encoder states only
DATASETS = {"translation": ("scan", "files"), "mlm": ("pydoc", "tfds", "text_files"), "recall": ("mqar",),
            "listops": ("listops",)}
TOKENIZERS = ("unigram", "bpe")
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
# Dataset fields only one dataset.name reads: set under another name, they would be silently ignored.
DATASET_FIELDS = {"translation": {"files": ("train_file", "test_file")},
                  "mlm": {"text_files": ("train_file", "test_file"), "tfds": ("tfds_name",)}}


class ConfigError(ValueError):
    pass


def _choice(field: str, value, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"config.{field}={value!r} is not allowed; choose one of: {', '.join(allowed)}")


def _get(config, dotted: str):
    for part in dotted.split("."):
        config = config[part]
    return config


def _check_int(config, field: str, low: int) -> None:
    """config.<field> (dotted) must be an integer >= low."""
    value = _get(config, field)
    if not isinstance(value, int) or value < low:
        raise ConfigError(f"config.{field}={value!r} must be an integer >= {low}")


def _check_number(config, field: str) -> None:
    interval, why = NUMBER_RANGES[field]
    low, high = (float(end) for end in interval[1:-1].split(","))
    value = _get(config, field)
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (is_number and (low <= value if interval[0] == "[" else low < value) and value < high):
        raise ConfigError(f"config.{field}={value!r} must be a number in {interval}" +
                          (f"; {why}" if why else ""))


def _check_dataset_fields_read(config) -> None:
    """A data field set for a dataset.name other than the run's would be silently ignored."""
    for name, fields in DATASET_FIELDS.get(config.task, {}).items():
        for field in fields:
            if config.dataset.name != name and config.dataset[field]:
                raise ConfigError(f"config.dataset.{field}={config.dataset[field]!r} is read only when "
                                  f"dataset.name={name!r} (it is {config.dataset.name!r}); add "
                                  f"--config.dataset.name={name}, or leave {field} out")


def _check_resume_fields(config) -> None:
    named = workdirs.changes_named(config)
    if unknown := [name for name in named if not workdirs.is_under(name, workdirs.CHANGEABLE)]:
        raise ConfigError(f"config.resume_with_changes={config.resume_with_changes!r}: {', '.join(unknown)} "
                          f"cannot change within a run; a restart may change only: "
                          f"{', '.join(workdirs.CHANGEABLE)}")


def role_kinds(config) -> dict[str, str]:
    """The attention kind of each role of the task's model: the role's override, else `attention.name`."""
    return {role: config.attention[role] or config.attention.name for role in model_roles(config)}


def _check_recurrent_attention(config) -> None:
    """The RNN's attention forms (models/rnn.py); the Transformer leaves these fields alone."""
    _choice("model.decoder_memory", config.model.decoder_memory, rnn.DECODER_MEMORIES)
    _check_int(config, "model.memory_window", 1)
    if not _is_rnn(config):
        for field, default in (("static_attention", False), ("decoder_memory", rnn.NO_MEMORY)):
            if config.model[field] != default:
                raise ConfigError(f"config.model.{field}={config.model[field]!r} applies to model.name='rnn' only")
        return
    if config.model.decoder_memory != rnn.NO_MEMORY:
        parts = 3 if config.model.decoder_memory == "key_value_predict" else 2
        if config.model.d_model % parts:
            raise ConfigError(f"config.model.decoder_memory={config.model.decoder_memory!r} splits each state in "
                              f"{parts}: config.model.d_model={config.model.d_model} must be divisible by {parts}")
    kind = role_kinds(config)["cross"]
    if config.model.static_attention and kind in (rnn.NO_ATTENTION, "forced_forward"):
        raise ConfigError(f"config.model.static_attention=True shares one context between the decoder steps; "
                          f"config.attention.name={kind!r} cannot: choose a kind other than none and forced_forward")


def _is_rnn(config) -> bool:
    return config.task == "translation" and config.model.name == "rnn"


def model_roles(config) -> tuple[str, ...]:
    if config.task == "recall":  # a causal language model, or an encoder
        return ("decoder_self",) if config.dataset.form == "causal" else ("encoder_self",)
    return RNN_ROLES if _is_rnn(config) else TASK_ROLES[config.task]


def _allowed_kinds(config) -> list[str]:
    return attention.names() + ([rnn.NO_ATTENTION] if _is_rnn(config) else [])


def kind_options(config) -> dict[str, dict]:
    """Options for each kind in use, taken from `config.attention.*`."""
    candidates = {key: value for key, value in config.attention.items()
                  if key not in ("name", *ROLE_FIELDS)}
    return {kind: attention.select_options(kind, candidates) for kind in set(role_kinds(config).values())
            if kind != rnn.NO_ATTENTION}


def transformer_spec(config, max_len: int) -> TransformerSpec:
    """The Transformer of `config.model` with the attention of `config.attention`, positions up to max_len."""
    model = config.model
    return TransformerSpec(
        num_layers=model.num_layers, d_model=model.d_model, num_heads=model.num_heads, mlp_dim=model.mlp_dim,
        dropout_rate=model.dropout_rate, max_len=max_len, positions=model.positions,
        tied_embeddings=model.get("tied_embeddings", True),  # a classifier has its own output layer
        qk_head_dim=model.qk_head_dim, conv_kernel=model.conv_kernel,
        attention=role_kinds(config), attention_options=kind_options(config))


def _check_kind_options(config) -> None:
    """Builds each kind in use once, so that its own checks of its options (an odd Taylor order, a
    window below 1, ...) fail here, before any data is built or anything is compiled."""
    head_dim = config.model.qk_head_dim or config.model.d_model // config.model.num_heads
    for kind, options in kind_options(config).items():
        try:
            attention.create(kind, num_heads=config.model.num_heads, head_dim=head_dim,
                             rngs=nnx.Rngs(0), **options)
        except ValueError as error:
            raise ConfigError(f"config.attention options for kind {kind!r}: {error}") from None


def _check_file(config, field: str) -> None:
    path = config.dataset[field]
    if not path:
        raise ConfigError(f"config.dataset.{field} is empty; dataset.name={config.dataset.name!r} needs it")
    if os.path.isdir(path):
        raise ConfigError(f"config.dataset.{field}={path!r} is a directory; give the data file")
    if not os.path.isfile(path):
        raise ConfigError(f"config.dataset.{field}={path!r}: file not found")


def _check_translation_data(config) -> None:
    if config.dataset.name == "scan":
        _choice("dataset.split", config.dataset.split, tuple(scan_grammar.SPLITS))
    else:
        for field in ("train_file", "test_file"):
            _check_file(config, field)
    for field in ("max_source_len", "max_target_len"):
        _check_int(config, f"dataset.{field}", 1)


def _check_decoding(config) -> None:
    beam_size, alpha = config.eval.beam_size, config.eval.length_penalty
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ConfigError(f"config.eval.beam_size={beam_size!r} must be an integer >= 1 (1: greedy decoding)")
    if not 0 <= alpha < float("inf"):
        raise ConfigError(f"config.eval.length_penalty={alpha!r} must be a finite number >= 0 "
                          f"(the GNMT alpha; 0: no length penalty)")


def _check_mlm_data(config) -> None:
    dataset, mlm = config.dataset, config.mlm
    if dataset.name == "tfds" and not dataset.tfds_name:
        raise ConfigError("config.dataset.tfds_name is empty; dataset.name='tfds' needs a TFDS text dataset")
    _choice("dataset.corpus", dataset.corpus, text_corpus.CORPORA)
    if dataset.name == "text_files":
        for field in ("train_file", "test_file"):
            _check_file(config, field)
    _choice("dataset.tokenizer", dataset.tokenizer, TOKENIZERS)
    for field, low in (("seq_len", 2), ("vocab_size", 8)):
        _check_int(config, f"dataset.{field}", low)
    for field in ("mask_rate", "mask_token_rate", "random_token_rate"):
        if not 0.0 <= mlm[field] <= 1.0:
            raise ConfigError(f"config.mlm.{field}={mlm[field]!r} must be in [0, 1]")
    if mlm.mask_rate == 0.0:
        raise ConfigError("config.mlm.mask_rate=0.0 leaves nothing to predict")
    if mlm.mask_token_rate + mlm.random_token_rate > 1.0:
        raise ConfigError(f"config.mlm.mask_token_rate + random_token_rate = "
                          f"{mlm.mask_token_rate + mlm.random_token_rate} exceeds 1")


def _check_recall_data(config) -> None:
    dataset = config.dataset
    _choice("dataset.form", dataset.form, recall.FORMS)
    _choice("dataset.split", dataset.split, ("validation", "test"))
    for field in ("vocab_size", "seq_len", "num_kv_pairs", "train_size", "validation_size", "test_size"):
        _check_int(config, f"dataset.{field}", 1)
    try:
        recall.check_sizes(dataset.vocab_size, dataset.seq_len, dataset.num_kv_pairs)
    except ValueError as error:
        raise ConfigError(f"config.dataset: {error}") from None
    if not dataset.power_a > 0:
        raise ConfigError(f"config.dataset.power_a={dataset.power_a!r} must be > 0 (1: uniform query gaps)")
    if not config.model.tied_embeddings:
        raise ConfigError("config.model.tied_embeddings=False: the recall model's logits always use the "
                          "token embeddings")


def _check_listops(config) -> None:
    dataset, model = config.dataset, config.model
    for field in ("max_depth", "max_args", "min_length", "max_length", "train_size", "validation_size",
                  "test_size"):
        _check_int(config, f"dataset.{field}", 1)
    _choice("dataset.split", dataset.split, ("validation", "test"))
    try:
        listops.check_settings(dataset.max_depth, dataset.max_args, dataset.min_length, dataset.max_length)
    except ValueError as error:
        raise ConfigError(f"config.dataset: {error}") from None
    _choice("model.pooling", model.pooling, pooling.POOLINGS)
    _check_int(config, "model.pooling_hops", 1)
    if not 0 <= model.pooling_penalty < float("inf"):
        raise ConfigError(f"config.model.pooling_penalty={model.pooling_penalty!r} must be a finite number >= 0")


def check_devices(config) -> None:
    """The device and precision fields, checked before jax.distributed.initialize(), which must precede
    any JAX computation (the rest of validate() runs some)."""
    _choice("sharding.params", config.sharding.params, sharding.PARAMS)
    _choice("compute_dtype", config.compute_dtype, steps.COMPUTE_DTYPES)
    if not isinstance(config.distributed, bool):
        raise ConfigError(f"config.distributed={config.distributed!r} must be True or False")


def validate(config) -> None:
    _choice("task", config.task, TASKS)
    check_devices(config)
    if config.task == "translation":
        _choice("model.name", config.model.name, MODELS)
        _choice("model.cell", config.model.cell, rnn.CELLS)
        _check_recurrent_attention(config)
    for field in POSITIVE_INTS:
        _check_int(config, field, 1)
    for field in NON_NEGATIVE_INTS:
        _check_int(config, field, 0)
    for field in NUMBER_RANGES:
        _check_number(config, field)
    _check_resume_fields(config)
    for role in ROLE_FIELDS:
        if config.attention[role] and role not in model_roles(config):
            model = "rnn" if _is_rnn(config) else config.task
            raise ConfigError(f"config.attention.{role}={config.attention[role]!r}: the {model} model "
                              f"has no {role} attention (its roles: {', '.join(model_roles(config))})")
    for role, kind in role_kinds(config).items():
        _choice(f"attention.{role}" if config.attention[role] else "attention.name", kind,
                _allowed_kinds(config))
    known_options = attention.all_options() | {"name", *ROLE_FIELDS}
    for key in config.attention:
        _choice(f"attention.{key} (an attention option)", key, sorted(known_options))
    if config.model.d_model % config.model.num_heads:
        raise ConfigError(f"config.model.d_model={config.model.d_model} is not divisible by "
                          f"config.model.num_heads={config.model.num_heads}")
    _check_kind_options(config)
    _choice("model.positions", config.model.positions, POSITIONS)
    _choice("nonfinite", config.nonfinite, NONFINITE)
    _choice("dataset.name", config.dataset.name, DATASETS[config.task])
    _check_dataset_fields_read(config)
    if config.task == "translation":
        _check_translation_data(config)
        _check_decoding(config)
    elif config.task == "recall":
        _check_recall_data(config)
    elif config.task == "listops":
        _check_listops(config)
    else:
        _check_mlm_data(config)
    mode = os.environ.get("WANDB_MODE") or config.wandb.mode
    _choice("wandb.mode (or WANDB_MODE)", mode, WANDB_MODES)
