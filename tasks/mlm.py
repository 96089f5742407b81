"""The masked-language-modelling task (tasks/interface.py): its config checks, the data of
data/mlm_corpus.py (text, SentencePiece tokens packed into fixed-length sequences) with BERT masking, the
encoder-only model, and the evaluation behind eval.json."""
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from analysis import plots, report, stats
from data import mlm, mlm_baselines, mlm_corpus, text_corpus, tokenizer
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


def _setting(result: dict) -> tuple:
    """What a run shares with its softmax reference: the sequence length and the convolution (None and the
    defaults where its eval.json does not say)."""
    config = result.get("config", {})
    model = config.get("model", {})
    return config.get("dataset", {}).get("seq_len"), model.get("conv_kernel", 0), model.get("conv_centered", False)


def _reference_name(evals: list[dict], results: dict[str, list[dict]]) -> str | None:
    """The softmax run trained as `evals` was, at its sequence length and with its convolution; None where
    the study has none, or `evals` is it."""
    name = next((name for name, other in results.items()
                 if report.kind_of(other) == "softmax" and _setting(other[0]) == _setting(evals[0])), None)
    return None if name is None or results[name] is evals else name


def _reference(evals: list[dict], results: dict[str, list[dict]]) -> list[dict] | None:
    name = _reference_name(evals, results)
    return None if name is None else results[name]


# Each part of the validation positions: the metric its periodic evaluations record (summarize).
CURVE_METRICS = {"all": "masked_accuracy", "recall slice": "recall_masked_accuracy"}


def _curve_gaps(evals: list[dict], reference: list[dict], metric: str) -> list[tuple[int, float, float | None]]:
    """(step, mean, half-width) of the paired difference to the reference's validation `metric` at each step
    that every seed of both evaluated."""
    def at(result: dict) -> dict[int, float]:
        return {line["step"]: line[metric] for line in result.get("validation_curve", []) if metric in line}

    curves, reference_curves = _by_seed(evals, at), _by_seed(reference, at)
    steps = sorted(set.intersection(*(set(curve) for curve in [*curves.values(), *reference_curves.values()])))
    return [(step, *stats.paired_difference({seed: curve[step] for seed, curve in curves.items()},
                                            {seed: curve[step] for seed, curve in reference_curves.items()}))
            for step in steps]


def gaps_over_steps(results: dict[str, list[dict]]) -> dict[str, dict[str, list]]:
    """part -> run -> _curve_gaps against its softmax reference, for the runs that have one and curves."""
    gaps = {part: {} for part in CURVE_METRICS}
    for name, evals in results.items():
        reference = _reference(evals, results)
        for part, metric in CURVE_METRICS.items():
            if reference is not None and (points := _curve_gaps(evals, reference, metric)):
                gaps[part][name] = points
    return {part: runs for part, runs in gaps.items() if runs}


def gaps_over_steps_table(gaps: dict[str, dict[str, list]]) -> str:
    steps = sorted({step for runs in gaps.values() for points in runs.values() for step, _, _ in points})
    lines = ["| run | positions | " + " | ".join(f"step {step:,}" for step in steps) + " |",
             "|---|---|" + "---:|" * len(steps)]
    for part, runs in gaps.items():
        for name, points in runs.items():
            cells = {step: f"{100 * mean:+.1f}" + ("" if half is None else f" ± {100 * half:.1f}")
                     for step, mean, half in points}
            lines.append(f"| {name} | {part} | " + " | ".join(cells.get(step, "-") for step in steps) + " |")
    return "\n".join(lines)


def recall_slice_table(results: dict[str, list[dict]]) -> str:
    """Per run: the model's masked accuracy on the recall slice and on the rest (mean ± std over seeds), its
    difference to softmax's, overall and on the slice, mean and 95% interval over seeds paired, and the
    seeds above every predictor without attention."""
    lines = ["| run | kind | feature dim | seeds | recall share | recall slice | rest | vs softmax, all "
             "(95% CI) | vs softmax, recall slice (95% CI) | seeds above every baseline |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, evals in results.items():
        reference = _reference(evals, results)
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
    lines = []
    for name, evals in results.items():
        if (reference := _reference_name(evals, results)) is not None:
            lines.append(f"- {name} against {reference}: "
                         f"{_gap_text(*_difference(evals, results[reference], _overall))} overall; "
                         f"{_gap_text(*_difference(evals, results[reference], _slice_accuracy('recall')))} "
                         "on the recall slice.")
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
        "mean ± std over seeds (ddof=1); differences to the softmax run trained alike (the same sequence "
        "length and convolution) paired by seed, mean ± the half-width of the 95% t-interval.",
        recall_slice_table(results),
        reading(results),
        *_gap_sections(results, out_dir),
    ]


GAPS_PLOT = "gap_vs_steps.png"


def _gap_sections(results: dict[str, list[dict]], out_dir: str) -> list[str]:
    """The gap to softmax at every periodic evaluation (runs whose results hold their curves), and its plot."""
    gaps = gaps_over_steps(results)
    if not gaps:
        return []
    plots.plot_gaps_over_steps(gaps, os.path.join(out_dir, GAPS_PLOT))
    return ["## The gap to softmax over training\n\nValidation masked accuracy minus that of the softmax run "
            "trained alike (same sequence length and convolution), in points, paired by seed: mean ± the "
            "half-width of the 95% t-interval, at every periodic evaluation. Picture: "
            f"[{GAPS_PLOT}]({GAPS_PLOT}).", gaps_over_steps_table(gaps)]
