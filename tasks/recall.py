"""The associative-recall task (tasks/interface.py): MQAR sequences generated in memory (data/recall.py),
a causal language model or an encoder over them, accuracy at the query positions, and the ranks of the
attention rows of those queries. Its studies' report sections are analysis/recall_report.py's."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from data import pipeline, recall
from models import LanguageModel
from training import evaluation, model_config
from training.config_checks import ConfigError, check_int, choice
from training.losses import prediction_loss_and_accuracy, prediction_sums

NAME = "recall"
METRICS = ("query_accuracy", "loss")
PROGRESS_METRIC = "query_accuracy"
allowed_kinds = model_config.registered_kinds
DATASETS = ("mqar",)
_SPLITS = ("train", "validation", "test")  # each generated from its own stream of dataset.seed


@dataclasses.dataclass
class RecallData:
    train: dict  # data.recall.generate arrays: inputs [N, L]; positions, targets, weights [N, pairs]
    validation: dict
    test: dict


def roles(config) -> tuple[str, ...]:
    """A causal language model's self-attention, or an encoder's."""
    return ("decoder_self",) if config.dataset.form == "causal" else ("encoder_self",)


def check_config(config) -> None:
    """Recall's own fields: the MQAR sizes and form, and the tied embeddings its logits need."""
    dataset = config.dataset
    choice("dataset.name", dataset.name, DATASETS)
    choice("dataset.form", dataset.form, recall.FORMS)
    choice("dataset.split", dataset.split, ("validation", "test"))
    choice("dataset.random_non_queries", dataset.get("random_non_queries", True), (True, False))
    for field in ("vocab_size", "seq_len", "num_kv_pairs", "train_size", "validation_size", "test_size"):
        check_int(config, f"dataset.{field}", 1)
    try:
        recall.check_sizes(dataset.vocab_size, dataset.seq_len, dataset.num_kv_pairs)
        recall.check_power(dataset.power_a, dataset.seq_len, dataset.num_kv_pairs)
    except ValueError as error:
        raise ConfigError(f"config.dataset.{error}") from None
    if not config.model.tied_embeddings:
        raise ConfigError("config.model.tied_embeddings=False: the recall model's logits always use the "
                          "token embeddings")


def _generate(dataset, split: str) -> dict:
    return recall.generate(dataset[f"{split}_size"], vocab_size=dataset.vocab_size, seq_len=dataset.seq_len,
                           num_kv_pairs=dataset.num_kv_pairs, seed=[dataset.seed, _SPLITS.index(split)],
                           form=dataset.form, power_a=dataset.power_a,
                           random_non_queries=dataset.get("random_non_queries", True))  # older configs: True


def prepare_data(config, workdir: str) -> RecallData:
    del workdir  # generated from the config alone
    return RecallData(*(_generate(config.dataset, split) for split in _SPLITS))


def create_model(config, data: RecallData) -> LanguageModel:
    del data
    dataset = config.dataset
    params_key, dropout_key = jax.random.split(jax.random.key(config.seed))
    (role,) = roles(config)
    return LanguageModel(recall.model_vocab_size(dataset.vocab_size, dataset.form),
                         model_config.transformer_spec(config, dataset.seq_len, roles(config)),
                         rngs=nnx.Rngs(params=params_key, dropout=dropout_key), role=role)


def train_batch(config, data: RecallData, batch_size: int, step: int) -> dict:
    return pipeline.batch_at_step(data.train, batch_size, config.seed, step)


def input_tokens(batch):
    """Every token: recall sequences have no padding."""
    return jnp.float32(batch["inputs"].size)


def metric_sums(model, batch, label_smoothing: float = 0.0):
    """(mean loss over the queries, sums over them)."""
    return prediction_sums(model, batch, input_tokens(batch), label_smoothing)


def summarize(sums: dict) -> dict:
    loss, accuracy = prediction_loss_and_accuracy(sums)
    return {"query_accuracy": accuracy, "loss": loss}


def attention_analysis(config, workdir: str, model, data: RecallData) -> dict:
    """Ranks and shapes of the attention rows at the prediction positions ([pairs, L] per head): to answer N
    queries the model must point N rows at N different keys, a matrix of rank N, which a kernelised kind
    reaches only while its feature dim allows."""
    rows = evaluation.rank_sample(len(data.test["inputs"]), config.eval.rank_examples)
    batch = {name: array[rows] for name, array in data.test.items()}
    [(role, weights)] = evaluation.attention_weights(model, lambda m, b: m(b["inputs"]), batch).items()
    positions = batch["positions"]
    query_rows = jnp.take_along_axis(weights, jnp.asarray(positions)[None, :, None, :, None], axis=3)
    num_examples, num_queries = positions.shape
    query_len = {role: np.full(num_examples, num_queries)}
    key_len = {role: np.full(num_examples, config.dataset.seq_len)}
    tokens = [str(token) for token in batch["inputs"][0]]
    tokens_q = {role: [f"{tokens[p]}@{p}" for p in positions[0]]}
    return evaluation.attention_analysis(config, workdir, model, {role: query_rows}, query_len, key_len, tokens_q,
                                       {role: tokens}, query_positions={role: positions})


def evaluate_model(config, workdir: str, model, data: RecallData) -> evaluation.TaskEvaluation:
    """Query accuracy on the whole `dataset.split` split; query-row ranks and shapes of test examples."""
    dataset = config.dataset
    evaluated = getattr(data, dataset.split)
    totals = evaluation.model_metric_totals(model, metric_sums, evaluated, config.eval.batch_size)
    task_fields = {**{field: dataset[field] for field in ("form", "vocab_size", "seq_len", "num_kv_pairs")},
                   "random_non_queries": dataset.get("random_non_queries", True)}
    return evaluation.TaskEvaluation(dataset.split, len(evaluated["inputs"]), summarize(totals),
                                     dict.fromkeys(roles(config), dataset.seq_len),
                                     {**attention_analysis(config, workdir, model, data), NAME: task_fields})


def report_sections(results: dict, spectra: dict, out_dir: str, head_dim: int | None) -> list[str]:
    from analysis import recall_report  # SciPy and Matplotlib: for a study's report, not for a run's config check

    return recall_report.report_sections(results, spectra, out_dir, head_dim)
