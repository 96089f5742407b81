"""The ListOps task (tasks/interface.py): expressions generated with fixed seeds (data/listops.py), an
encoder with a pooling head (models/classifier.py), accuracy over the 10 values, and attention ranks."""
import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from data import listops, pipeline
from models import SequenceClassifier, pooling
from training import evaluation, model_config
from training.config_checks import ConfigError, check_int, choice
from training.losses import token_cross_entropy

NAME = "listops"
METRICS = ("accuracy", "loss")
PROGRESS_METRIC = "accuracy"
allowed_kinds = model_config.registered_kinds
DATASETS = ("listops",)


@dataclasses.dataclass
class ListOpsData:
    train: dict  # data.listops.arrays: inputs int32 [N, 1 + max_length] ([CLS] first), targets and weights [N, 1]
    validation: dict
    test: dict


def roles(config) -> tuple[str, ...]:
    del config
    return ("encoder_self",)


def check_config(config) -> None:
    """ListOps' own fields: the expressions generated and the pooling head."""
    dataset, model = config.dataset, config.model
    choice("dataset.name", dataset.name, DATASETS)
    for field in ("max_depth", "max_args", "min_length", "max_length", "train_size", "validation_size",
                  "test_size"):
        check_int(config, f"dataset.{field}", 1)
    choice("dataset.split", dataset.split, ("validation", "test"))
    try:
        listops.check_settings(dataset.max_depth, dataset.max_args, dataset.min_length, dataset.max_length)
    except ValueError as error:
        raise ConfigError(f"config.dataset: {error}") from None
    choice("model.pooling", model.pooling, pooling.POOLINGS)
    check_int(config, "model.pooling_hops", 1)
    if not 0 <= model.pooling_penalty < float("inf"):
        raise ConfigError(f"config.model.pooling_penalty={model.pooling_penalty!r} must be a finite number >= 0")


def prepare_data(config, workdir: str) -> ListOpsData:
    del workdir  # generated from the config alone, cached with the data
    return ListOpsData(*(listops.cached_arrays(config.dataset, split) for split in listops.SPLITS))


def create_model(config, data: ListOpsData) -> SequenceClassifier:
    del data
    model = config.model
    params_key, dropout_key = jax.random.split(jax.random.key(config.seed))
    spec = model_config.transformer_spec(config, config.dataset.max_length + 1, roles(config))
    return SequenceClassifier(listops.VOCAB_SIZE, listops.NUM_CLASSES, spec,
                              pooling_name=model.pooling, pooling_hops=model.pooling_hops,
                              pooling_penalty=model.pooling_penalty,
                              rngs=nnx.Rngs(params=params_key, dropout=dropout_key), pad_id=listops.PAD)


def train_batch(config, data: ListOpsData, batch_size: int, step: int) -> dict:
    return pipeline.batch_at_step(data.train, batch_size, config.seed, step)


def metric_sums(model, batch, label_smoothing: float = 0.0):
    """(mean loss over the sequences, pooling penalty included; sums over them)."""
    logits, penalty = model(batch["inputs"])
    weights = batch["weights"][:, 0]
    losses, hits = token_cross_entropy(logits, batch["targets"][:, 0], weights, label_smoothing)
    sums = {"loss": losses.sum(), "penalty": (penalty * weights).sum(), "predictions": weights.sum(),
            "correct": (hits * weights).sum(),
            "input_tokens": (batch["inputs"] != listops.PAD).sum(dtype=jnp.float32)}
    return (sums["loss"] + sums["penalty"]) / jnp.maximum(sums["predictions"], 1.0), sums


def summarize(sums: dict) -> dict:
    """Accuracy, the cross-entropy and the pooling penalty (0 but for structured pooling), per sequence."""
    count = max(float(sums["predictions"]), 1.0)
    return {"accuracy": float(sums["correct"]) / count, "loss": float(sums["loss"]) / count,
            "penalty": float(sums["penalty"]) / count}


def evaluate_model(config, workdir: str, model, data: ListOpsData) -> evaluation.TaskEvaluation:
    """Accuracy on the whole `dataset.split` split; attention ranks and row shapes of test examples."""
    dataset = config.dataset
    evaluated = getattr(data, dataset.split)
    totals = evaluation.model_metric_totals(model, metric_sums, evaluated, config.eval.batch_size)
    analysis = evaluation.encoder_analysis(config, workdir, model, data.test["inputs"], listops.PAD, listops.decode)
    return evaluation.TaskEvaluation(dataset.split, len(evaluated["inputs"]), summarize(totals),
                                     {"encoder_self": dataset.max_length + 1},
                                     {"pooling": config.model.pooling, **analysis})


def report_sections(results: dict, spectra: dict, out_dir: str, head_dim: int | None) -> list[str]:
    """The rank study's sections; a model that learned nothing answers one of the 10 values (chance)."""
    from analysis import report  # SciPy and Matplotlib: for a study's report, not for a run's config check

    return report.rank_study_sections(METRICS, results, spectra, out_dir, head_dim,
                                      levels={f"chance (1 in {listops.NUM_CLASSES})": 1 / listops.NUM_CLASSES})
