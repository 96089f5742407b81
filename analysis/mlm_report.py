"""The masked-language-modelling task's study report sections (tasks/mlm.py binds them to its metrics as its
report_sections): the rank study's, then the predictors without attention, the recall slice against the
rest, each run's gap to the softmax run trained alike (paired by seed) and that gap over training."""
import os

import numpy as np

from analysis import plots, report, stats, tables


def _parts(evals: list[dict]) -> tuple[str, ...]:
    """The parts of the test positions eval.json's recall_slice splits them into: the recall slice, the rest."""
    return tuple(evals[0]["recall_slice"])


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
                 if tables.kind_of(other) == "softmax" and _setting(other[0]) == _setting(evals[0])), None)
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
        cells = [stats.mean_std_text([_slice_accuracy(part)(result) for result in evals]) for part in _parts(evals)]
        lines.append(f"| {name} | {tables.kind_of(evals)} | {tables.dash_if_none(tables.rank_bound(evals))} | {len(evals)} | "
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


def gap_reading(results: dict[str, list[dict]]) -> str:
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
        parts = (first["recall_slice"][part]["baselines"][name] for part in _parts([first]))
        lines.append(f"| {name} | {accuracy:.4f} | " + " | ".join(f"{value:.4f}" for value in parts) + " |")
    return "\n".join(lines)


def report_sections(metrics: tuple[str, ...], results: dict[str, list[dict]], spectra: dict, out_dir: str,
                    head_dim: int | None) -> list[str]:
    """The rank study's sections of the task's `metrics` (its accuracy plots draw the baselines), then the
    baselines and the recall slice (of runs whose eval.json has them: written before them, none)."""
    sections = report.rank_study_sections(metrics, results, spectra, out_dir, head_dim)
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
        gap_reading(results),
        *_fixed_share_sections(results),
        *_gap_sections(results, out_dir),
    ]


def _fixed_share_sections(results: dict[str, list[dict]]) -> list[str]:
    if not (rows := fixed_share_rows(results)):
        return []
    return ["## Across lengths, at fixed slice shares\n\nA longer sequence holds more repeats, so its test positions "
            "hold more of the recall slice, where softmax leads most: part of a gap's change with the length is a "
            "changed test set. Each seed's accuracy is also given with its recall slice and rest weighed by the "
            "shortest length's shares; gaps and their change from the run of the same kind at the shortest length, "
            "paired by seed (95% t-intervals), in points.", fixed_share_table(rows)]


def _at_shares(shares: dict[str, float]):
    """A seed's masked accuracy with its parts weighed by `shares` instead of its own test set's."""
    return lambda result: sum(share * result["recall_slice"][part]["masked_accuracy"] for part, share in shares.items())


def _counterpart(name: str, results: dict[str, list[dict]], length: int) -> str | None:
    """The run of the same kind and convolution as `name` at sequence length `length`."""
    kind, (_, *convolution) = tables.kind_of(results[name]), _setting(results[name][0])
    return next((other for other, evals in results.items() if tables.kind_of(evals) == kind
                 and _setting(evals[0]) == (length, *convolution)), None)


def fixed_share_rows(results: dict[str, list[dict]]) -> list[dict]:
    """For each run at a longer sequence than the study's shortest, with a softmax reference at its length and a
    counterpart at the shortest: its gap to softmax as measured and with every seed's parts weighed by the
    shortest length's recall-slice shares (a longer sequence holds more repeats: its test set is another mix),
    and the change of the gap from the counterpart's, each paired by seed (mean, 95% half-width)."""
    lengths = {_setting(evals[0])[0] for evals in results.values()} - {None}
    if len(lengths) < 2:
        return []
    short = min(lengths)
    base = [result for evals in results.values() if _setting(evals[0])[0] == short for result in evals]
    shares = {part: float(np.mean([result["recall_slice"][part]["share"] for result in base])) for part in _parts(base)}
    rows = []
    for name, evals in results.items():
        reference, counterpart = _reference_name(evals, results), _counterpart(name, results, short)
        if _setting(evals[0])[0] == short or reference is None or counterpart is None:
            continue
        base_reference = _reference_name(results[counterpart], results)
        row = {"run": name, "length": _setting(evals[0])[0], "short": short,
               "share": float(np.mean([result["recall_slice"]["recall"]["share"] for result in evals])),
               "base_share": shares["recall"]}
        for label, value in (("measured", _overall), ("at_shares", _at_shares(shares))):
            terms = [(1.0, _by_seed(evals, value)), (-1.0, _by_seed(results[reference], value)),
                     (-1.0, _by_seed(results[counterpart], _overall)),
                     (1.0, _by_seed(results[base_reference], _overall))]
            row[label] = stats.paired_combination(terms[:2])[:2]
            row[f"{label}_change"] = stats.paired_combination(terms)[:2]
        rows.append(row)
    return rows


def fixed_share_table(rows: list[dict]) -> str:
    lines = ["| run | L | recall share (at the shortest L) | gap to softmax, measured | gap at the shortest L's "
             "shares | change from the shortest L, measured | change at its shares |", "|---|---:|---|---|---|---|---|"]
    for row in rows:
        cells = [_gap_text(*row[key]) for key in ("measured", "at_shares", "measured_change", "at_shares_change")]
        lines.append(f"| {row['run']} | {row['length']} | {row['share']:.3f} ({row['base_share']:.3f} at "
                     f"{row['short']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


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
