"""The masked-language-modelling task (tasks/interface.py): its config checks, the data of
data/mlm_corpus.py (text, SentencePiece tokens packed into fixed-length sequences) with BERT masking, the
encoder-only model, and the evaluation behind eval.json."""
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from analysis import report, stats
from data import mlm, mlm_baselines, mlm_corpus, text_corpus, tokenizer
from models import MaskedLanguageModel
from training import evaluation, model_config
from training.config_checks import ConfigError, check_fields_read, check_file, check_int, choice
from training.losses import prediction_loss_and_accuracy, prediction_sums, weighted_sums

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
    del workdir  # the tokenizer lives with the dataset, shared by every run on it
    return mlm_corpus.prepare(config.dataset, config.mlm)


def create_model(config, data: mlm_corpus.MlmData) -> MaskedLanguageModel:
    spec = model_config.transformer_spec(config, config.dataset.seq_len, roles(config))
    params_key, dropout_key = jax.random.split(jax.random.key(config.seed))
    return MaskedLanguageModel(data.tokenizer.vocab_size, spec,
                               rngs=nnx.Rngs(params=params_key, dropout=dropout_key), pad_id=tokenizer.PAD)


def train_batch(config, data: mlm_corpus.MlmData, batch_size: int, step: int) -> dict:
    return mlm.batch_at_step(data.train, batch_size, config.seed, step, **data.masking)


def input_tokens(batch):
    """The non-padding tokens the model reads: throughput's unit."""
    return (batch["inputs"] != tokenizer.PAD).sum(dtype=jnp.float32)


def metric_sums(model, batch, label_smoothing: float = 0.0):
    """(mean loss over the predicted positions, sums over them)."""
    return prediction_sums(model, batch, input_tokens(batch), label_smoothing)


def summarize(sums: dict) -> dict:
    loss, accuracy = prediction_loss_and_accuracy(sums)
    return {"masked_accuracy": accuracy, "loss": loss,
            "perplexity": math.exp(min(loss, 700.0))}  # exp overflows a float beyond ~709


def _accuracy(hits: np.ndarray, weights: np.ndarray) -> float:
    return float((hits * weights).sum() / max(weights.sum(), 1.0))


def _baselines(hits: dict, weights: np.ndarray) -> dict:
    return {name: _accuracy(hit, weights) for name, hit in hits.items()}


def _sums_by_part(model, batch):
    """metric_sums, and under each part of the test positions (batch["<part>_weights"]) the same sums over
    its positions, from one forward pass."""
    logits = model(batch["inputs"], batch["positions"])
    sums = {**weighted_sums(logits, batch["targets"], batch["weights"]), "input_tokens": input_tokens(batch)}
    sums.update({part: weighted_sums(logits, batch["targets"], batch[f"{part}_weights"]) for part in PARTS})
    return sums["loss"] / jnp.maximum(sums["predictions"], 1.0), sums


def _slice_weights(test: dict) -> dict[str, np.ndarray]:
    """The test positions split by mlm_baselines.recall_slice: part -> its weights."""
    recall = mlm_baselines.recall_slice(test["inputs"], test["positions"], test["targets"]) * test["weights"]
    return dict(zip(PARTS, (recall, test["weights"] - recall)))


def _part_metrics(totals: dict, parts: dict[str, np.ndarray], hits: dict) -> dict:
    """Each part's share of the test positions, the model's masked accuracy and loss on it (its sums in
    `totals`) and every baseline's accuracy (from their `hits`)."""
    whole = max(float(sum(weights.sum() for weights in parts.values())), 1.0)
    return {part: {"share": float(weights.sum()) / whole,
                   **{key: summarize(totals[part])[key] for key in ("masked_accuracy", "loss")},
                   "baselines": _baselines(hits, weights)}
            for part, weights in parts.items()}


def evaluate_model(config, workdir: str, model, data: mlm_corpus.MlmData, step: int) -> dict:
    """Masked-token metrics on the whole test split (fixed masking), the same for the no-attention baselines
    and on the recall slice, and attention ranks -> eval.json."""
    parts = _slice_weights(data.test)
    totals = evaluation.model_metric_totals(
        model, _sums_by_part, {**data.test, **{f"{part}_weights": weights for part, weights in parts.items()}},
        config.eval.batch_size)
    hits = mlm_baselines.hits(data.train, data.test, data.tokenizer.vocab_size)
    return evaluation.write_eval_json(config, workdir, {
        "step": int(step),
        "task": NAME,
        "split": config.dataset.split,
        "num_examples": int(len(data.test["inputs"])),
        "vocab_size": data.tokenizer.vocab_size,
        "attention": model_config.role_kinds(config, roles(config)),
        "metrics": summarize(totals),
        "baselines": _baselines(hits, data.test["weights"]),
        "recall_slice": _part_metrics(totals, parts, hits),
        "rank": evaluation.encoder_analysis(config, workdir, model, data.test["inputs"], tokenizer.PAD,
                                          lambda ids: [data.tokenizer.piece(int(i)) for i in ids]),
        "state": evaluation.attention_state(model, {"encoder_self": config.dataset.seq_len}),
    })


def _by_seed(evals: list[dict], value) -> dict[int, float]:
    return {result["config"]["seed"]: value(result) for result in evals}


def _difference(evals: list[dict], reference: list[dict], value) -> tuple[float, float | None]:
    return stats.paired_difference(_by_seed(evals, value), _by_seed(reference, value))


def _difference_text(evals: list[dict], reference: list[dict] | None, value) -> str:
    if reference is None:
        return "-"
    mean, half_width = _difference(evals, reference, value)
    return f"{mean:+.4f}" + ("" if half_width is None else f" ± {half_width:.4f}")


def _overall(result: dict) -> float:
    return result["metrics"]["masked_accuracy"]


def _slice_accuracy(part: str):
    return lambda result: result["recall_slice"][part]["masked_accuracy"]


def _seeds_above_baselines(evals: list[dict]) -> str:
    """The seeds whose test accuracy beats every predictor without attention, of all the run's seeds."""
    above = sum(_overall(result) > max(result["baselines"].values()) for result in evals)
    return f"{above}/{len(evals)}"


def _reference(results: dict[str, list[dict]]) -> list[dict] | None:
    return next((evals for evals in results.values() if report.kind_of(evals) == "softmax"), None)


def recall_slice_table(results: dict[str, list[dict]]) -> str:
    """Per run: the model's masked accuracy on the recall slice and on the rest (mean ± std over seeds), its
    difference to softmax's, overall and on the slice, mean and 95% interval over seeds paired, and the
    seeds above every predictor without attention."""
    reference = _reference(results)
    lines = ["| run | kind | feature dim | seeds | recall share | recall slice | rest | vs softmax, all "
             "(95% CI) | vs softmax, recall slice (95% CI) | seeds above every baseline |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, evals in results.items():
        share = np.mean([result["recall_slice"]["recall"]["share"] for result in evals])
        cells = [stats.mean_std_text([_slice_accuracy(part)(result) for result in evals]) for part in PARTS]
        lines.append(f"| {name} | {report.kind_of(evals)} | {report.dash_if_none(report.rank_bound(evals))} | {len(evals)} | "
                     f"{share:.3f} | {' | '.join(cells)} | {_difference_text(evals, reference, _overall)} | "
                     f"{_difference_text(evals, reference, _slice_accuracy('recall'))} | "
                     f"{_seeds_above_baselines(evals)} |")
    return "\n".join(lines)


def _gap_text(mean: float, half_width: float | None) -> str:
    """A difference in points: a gap where its 95% interval excludes 0, else the largest gap it leaves open."""
    if half_width is None:
        return f"{100 * mean:+.1f} points (one seed: no interval)"
    low, high = 100 * (mean - half_width), 100 * (mean + half_width)
    if low > 0 or high < 0:
        return f"{100 * mean:+.1f} points (95% CI {low:+.1f} to {high:+.1f})"
    return f"no gap larger than {max(-low, high):.1f} points detectable ({100 * mean:+.1f}, 95% CI {low:+.1f} to {high:+.1f})"


def reading(results: dict[str, list[dict]]) -> str:
    """Each run against softmax, overall and on the recall slice, in words a reviewer can check against the
    recall-slice table."""
    reference = _reference(results)
    if reference is None:
        return ""
    lines = [f"- {name} against softmax: {_gap_text(*_difference(evals, reference, _overall))} overall; "
             f"{_gap_text(*_difference(evals, reference, _slice_accuracy('recall')))} on the recall slice."
             for name, evals in results.items() if evals is not reference]
    return "Paired by seed, in masked-accuracy points:\n\n" + "\n".join(lines) if lines else ""


def baseline_table(results: dict[str, list[dict]]) -> str:
    """The predictors without attention on the study's test positions (the same for every run)."""
    first = next(iter(results.values()))[0]
    lines = ["| predictor | all positions | recall slice | rest |", "|---|---:|---:|---:|"]
    for name, accuracy in first["baselines"].items():
        parts = (first["recall_slice"][part]["baselines"][name] for part in PARTS)
        lines.append(f"| {name} | {accuracy:.4f} | " + " | ".join(f"{value:.4f}" for value in parts) + " |")
    return "\n".join(lines)


def report_sections(results: dict[str, list[dict]], spectra: dict, out_dir: str, head_dim: int | None) -> list[str]:
    """The rank study's sections (its accuracy plots draw the baselines), then the baselines and the recall
    slice (of runs whose eval.json has them: written before them, none)."""
    sections = report.rank_study_sections(METRICS, results, spectra, out_dir, head_dim)
    if not all("recall_slice" in result for evals in results.values() for result in evals):
        return sections
    return sections + [
        "## Predictors without attention\n\nMasked accuracy on the same test positions (mlm_baselines.py): the "
        "most frequent piece; the visible token, or the most frequent where it is [MASK]; a guess drawn from "
        "the training frequencies (expected accuracy); the two visible neighbours (naive Bayes of training "
        "pair counts). Drawn as dotted levels on the accuracy plots.",
        baseline_table(results),
        "## The recall slice\n\nThe test positions whose target follows the same left neighbour elsewhere in "
        "its sequence (its share of the positions), where attention can recall it, and the rest. Accuracy "
        "mean ± std over seeds (ddof=1); differences to softmax paired by seed, mean ± the half-width of "
        "the 95% t-interval.",
        recall_slice_table(results),
        reading(results),
    ]
