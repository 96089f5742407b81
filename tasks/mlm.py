"""The masked-language-modelling task (tasks/interface.py): its config checks, the data of
data/mlm_corpus.py (text, SentencePiece tokens packed into fixed-length sequences) with BERT masking, the
encoder-only model, and the evaluation behind eval.json."""
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from data import device_stream, mlm, mlm_baselines, mlm_corpus, text_corpus, tokenizer
from models import MaskedLanguageModel
from training import evaluation, model_config
from training.config_checks import ConfigError, check_fields_read, check_file, check_int, choice
from training.losses import prediction_loss_and_accuracy, weighted_sums

NAME = "mlm"
METRICS = ("masked_accuracy", "loss", "perplexity")
PROGRESS_METRIC = "masked_accuracy"
allowed_kinds = model_config.registered_kinds
# The test positions whose answer the sequence holds (mlm_baselines.recall_slice), and the others.
PARTS = ("recall", "rest")


def roles(config) -> tuple[str, ...]:
    del config
    return ("encoder_self",)


def check_config(config) -> None:
    """MLM's own fields: its text, tokenizer and masking rates."""
    dataset, rates = config.dataset, config.mlm
    choice("dataset.name", dataset.name, mlm_corpus.DATASETS)
    check_fields_read(config, mlm_corpus.DATASET_FIELDS, mlm_corpus.DATASET_DEFAULTS)
    if dataset.name == "tfds" and not dataset.tfds_name:
        raise ConfigError("config.dataset.tfds_name is empty; dataset.name='tfds' needs a TFDS text dataset")
    choice("dataset.corpus", dataset.corpus, text_corpus.CORPORA)
    if dataset.name == "text_files":
        for field in ("train_file", "test_file"):
            check_file(config, field)
    choice("dataset.tokenizer", dataset.tokenizer, tokenizer.MODEL_TYPES)
    choice("dataset.stream", dataset.stream, STREAMS)
    for field, low in (("seq_len", 2), ("vocab_size", 8)):
        check_int(config, f"dataset.{field}", low)
    for field in ("mask_rate", "mask_token_rate", "random_token_rate"):
        if not 0.0 <= rates[field] <= 1.0:
            raise ConfigError(f"config.mlm.{field}={rates[field]!r} must be in [0, 1]")
    if rates.mask_rate == 0.0:
        raise ConfigError("config.mlm.mask_rate=0.0 leaves nothing to predict")
    if rates.mask_token_rate + rates.random_token_rate > 1.0:
        raise ConfigError(f"config.mlm.mask_token_rate + random_token_rate = "
                          f"{rates.mask_token_rate + rates.random_token_rate} exceeds 1")


def prepare_data(config, workdir: str) -> mlm_corpus.MlmData:
    """The data, its validation split carrying the weights of each part (PARTS): so every periodic
    evaluation reports the recall slice and the rest beside the whole."""
    del workdir  # the tokenizer lives with the dataset, shared by every run on it
    data = mlm_corpus.prepare(config.dataset, config.mlm)
    data.validation = _with_part_weights(data.validation)
    return data


def create_model(config, data: mlm_corpus.MlmData) -> MaskedLanguageModel:
    spec = model_config.transformer_spec(config, config.dataset.seq_len, roles(config))
    params_key, dropout_key = jax.random.split(jax.random.key(config.seed))
    return MaskedLanguageModel(data.tokenizer.vocab_size, spec,
                               rngs=nnx.Rngs(params=params_key, dropout=dropout_key), pad_id=tokenizer.PAD)


def train_batch(config, data: mlm_corpus.MlmData, batch_size: int, step: int) -> dict:
    return mlm.batch_at_step(data.train, batch_size, config.seed, step, **data.masking)


STREAMS = ("host", "device")  # config.dataset.stream


def device_batches(config, data: mlm_corpus.MlmData, batch_size: int, placement):
    """step -> batch of the device stream (data/device_stream.py), its arrays placed by `placement`, where
    config.dataset.stream is "device"; None for the host stream (train_batch)."""
    if config.dataset.stream != "device":
        return None
    return device_stream.DeviceBatches(data.train, batch_size, config.seed, placement, **data.masking)


def input_tokens(batch):
    """The non-padding tokens the model reads: throughput's unit."""
    return (batch["inputs"] != tokenizer.PAD).sum(dtype=jnp.float32)


def metric_sums(model, batch, label_smoothing: float = 0.0):
    """(mean loss over the predicted positions, sums over them), and where the batch carries each part's
    weights (batch["<part>_weights"]: the evaluation splits) the same sums over its positions, from the
    one forward pass."""
    logits = model(batch["inputs"], batch["positions"])
    sums = {**weighted_sums(logits, batch["targets"], batch["weights"], label_smoothing),
            "input_tokens": input_tokens(batch)}
    sums.update({part: weighted_sums(logits, batch["targets"], batch[f"{part}_weights"])
                 for part in PARTS if f"{part}_weights" in batch})
    return sums["loss"] / jnp.maximum(sums["predictions"], 1.0), sums


def summarize(sums: dict) -> dict:
    """METRICS, and each part's masked accuracy where the sums hold it (`recall_masked_accuracy`, ...)."""
    loss, accuracy = prediction_loss_and_accuracy(sums)
    parts = {f"{part}_masked_accuracy": prediction_loss_and_accuracy(sums[part])[1] for part in PARTS if part in sums}
    return {"masked_accuracy": accuracy, "loss": loss,
            "perplexity": math.exp(min(loss, 700.0)), **parts}  # exp overflows a float beyond ~709


def _accuracy(hits: np.ndarray, weights: np.ndarray) -> float:
    return float((hits * weights).sum() / max(weights.sum(), 1.0))


def _baselines(hits: dict, weights: np.ndarray) -> dict:
    return {name: _accuracy(hit, weights) for name, hit in hits.items()}


def _slice_weights(split: dict) -> dict[str, np.ndarray]:
    """The positions of an evaluation split split by mlm_baselines.recall_slice: part -> its weights."""
    recall = mlm_baselines.recall_slice(split["inputs"], split["positions"], split["targets"]) * split["weights"]
    return dict(zip(PARTS, (recall, split["weights"] - recall)))


def _with_part_weights(split: dict) -> dict:
    return {**split, **{f"{part}_weights": weights for part, weights in _slice_weights(split).items()}}


def _query_rows(test: dict, parts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each part's test positions as rows of the attention matrices: part -> bool [N, L]."""
    rows = {}
    for part, weights in parts.items():
        examples, slots = np.nonzero(weights)
        rows[part] = np.zeros(test["inputs"].shape, bool)
        rows[part][examples, test["positions"][examples, slots]] = True
    return rows


def _part_metrics(totals: dict, parts: dict[str, np.ndarray], hits: dict) -> dict:
    """Each part's share of the test positions, the model's masked accuracy and loss on it (its sums in
    `totals`) and every baseline's accuracy (from their `hits`)."""
    whole = max(float(sum(weights.sum() for weights in parts.values())), 1.0)
    return {part: {"share": float(weights.sum()) / whole,
                   **{key: summarize(totals[part])[key] for key in ("masked_accuracy", "loss")},
                   "baselines": _baselines(hits, weights)}
            for part, weights in parts.items()}


def evaluate_model(config, workdir: str, model, data: mlm_corpus.MlmData) -> evaluation.TaskEvaluation:
    """Masked-token metrics on the whole test split (fixed masking), the same for the no-attention baselines
    and on the recall slice, and attention ranks and row shapes (every row, and the rows of each part)."""
    parts = _slice_weights(data.test)
    totals = evaluation.model_metric_totals(model, metric_sums, _with_part_weights(data.test),
                                            config.eval.batch_size)
    hits = mlm_baselines.hits(data.train, data.test, data.tokenizer.vocab_size)
    analysis = evaluation.encoder_analysis(config, workdir, model, data.test["inputs"], tokenizer.PAD,
                                           lambda ids: [data.tokenizer.piece(int(i)) for i in ids],
                                           selections=_query_rows(data.test, parts))
    return evaluation.TaskEvaluation(
        config.dataset.split, len(data.test["inputs"]), {name: summarize(totals)[name] for name in METRICS},
        {"encoder_self": config.dataset.seq_len},
        {"vocab_size": data.tokenizer.vocab_size, "baselines": _baselines(hits, data.test["weights"]),
         "recall_slice": _part_metrics(totals, parts, hits), **analysis})


def report_sections(results: dict, spectra: dict, out_dir: str, head_dim: int | None) -> list[str]:
    from analysis import mlm_report  # SciPy and Matplotlib: for a study's report, not for a run's config check

    return mlm_report.report_sections(METRICS, results, spectra, out_dir, head_dim)
