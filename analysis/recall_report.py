"""The associative-recall study's part of a report: query accuracy and the ranks of the query rows against
the number of key-value pairs N, the feature dim and the state size (analysis/report.py writes the rest).

`results` maps a run name to its seeds' recall eval.json dicts (training/recall.py), named as
configs/studies.py names recall runs: `<series>_N<pairs>`, the series (kind and width) plotted as a line.
"""
import collections
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib import ticker  # noqa: E402

from analysis import plots, stats  # noqa: E402

PAIRS_PLOT = "accuracy_vs_pairs.png"
STATE_PLOT = "accuracy_vs_state.png"
RANK_PLOT = "rank_vs_pairs.png"
WIDTH_PLOT = "accuracy_vs_feature_dim.png"


def series_name(run: str) -> str:
    return run.rsplit("_N", 1)[0]


def _state(evals: list[dict]) -> dict:
    (state,) = evals[0]["state"].values()  # the recall model has one attention role
    return state


def _pairs(evals: list[dict]) -> int:
    return evals[0]["recall"]["num_kv_pairs"]


def _accuracies(evals: list[dict]) -> list[float]:
    return [result["metrics"]["query_accuracy"] for result in evals]


def recall_layer(evals: list[dict]) -> tuple[int, dict]:
    """(layer, its rank metrics averaged over heads and seeds) for the layer whose query rows have the
    highest effective rank: the layer that points the queries at their keys."""
    by_layer = collections.defaultdict(list)
    for result in evals:
        for row in result["rank"]:
            by_layer[row["layer"]].append(row)
    means = {layer: {metric: float(np.mean([row[metric] for row in rows]))
                     for metric in ("numerical_rank", "effective_rank", "stable_rank")}
             for layer, rows in by_layer.items()}
    layer = max(means, key=lambda key: means[key]["effective_rank"])
    return layer, means[layer]


def _dash_if_none(value) -> str:
    return "-" if value is None else f"{value:,}"


def accuracy_table(results: dict[str, list[dict]]) -> str:
    """Per run: its sizes, test query accuracy (mean ± std over seeds, and each seed's), validation accuracy
    and, where a learning rate was selected on validation, the chosen run."""
    lines = ["| run | kind | N | d' | feature dim | state / head | seeds | query accuracy (mean ± std) | "
             "per seed | validation | selected |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|"]
    for name, evals in results.items():
        state = _state(evals)
        mean, std = stats.mean_std(_accuracies(evals))
        validation = [result["validation"].get("query_accuracy") for result in evals if result.get("validation")]
        chosen = evals[0].get("run", name)
        lines.append(
            f"| {name} | {state['kind']} | {_pairs(evals)} | {state['key_dim']} | "
            f"{_dash_if_none(state['feature_dim'])} | {state['per_head']:,} | {len(evals)} | "
            f"{mean:.4f} ± {'-' if std is None else f'{std:.4f}'} | "
            f"{', '.join(f'{a:.3f}' for a in _accuracies(evals))} | "
            f"{f'{np.mean(validation):.4f}' if validation else '-'} | {'' if chosen == name else chosen} |")
    return "\n".join(lines)


def rank_table(results: dict[str, list[dict]]) -> str:
    """Ranks of the attention rows at the N query positions ([N, L] per head and example) in each run's
    recall layer: answering N queries takes N rows pointing at N different keys, rank N."""
    lines = ["| run | kind | N | feature dim | recall layer | effective rank | numerical rank | stable rank | "
             "effective / N |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, evals in results.items():
        layer, ranks = recall_layer(evals)
        pairs = _pairs(evals)
        lines.append(
            f"| {name} | {_state(evals)['kind']} | {pairs} | {_dash_if_none(_state(evals)['feature_dim'])} | "
            f"{layer} | {ranks['effective_rank']:.2f} | {ranks['numerical_rank']:.2f} | "
            f"{ranks['stable_rank']:.2f} | {ranks['effective_rank'] / pairs:.2f} |")
    return "\n".join(lines)


def _by_series(results: dict[str, list[dict]]) -> dict[str, list[tuple[str, list[dict]]]]:
    series = collections.defaultdict(list)
    for name, evals in results.items():
        series[series_name(name)].append((name, evals))
    return series


def _log2_x(ax, values) -> None:
    """A log-2 x axis labelled at `values` (the N of the runs)."""
    ax.set_xscale("log", base=2)
    axis = ax.xaxis
    axis.set_major_locator(ticker.FixedLocator(sorted(set(values))))
    axis.set_major_formatter(ticker.ScalarFormatter())
    axis.set_minor_locator(ticker.NullLocator())


def plot_accuracy_vs_pairs(results: dict[str, list[dict]], path: str) -> str:
    """Query accuracy against N, one line per series (kind and width), ± std over seeds."""
    fig, ax = plt.subplots(figsize=(7.5, 4), layout="constrained")
    ax.set_prop_cycle(color=plots.COLORS)
    all_pairs = []
    for series, runs in _by_series(results).items():
        points = sorted((_pairs(evals), *stats.mean_std(_accuracies(evals))) for _, evals in runs)
        pairs, means, stds = zip(*points)
        all_pairs += pairs
        ax.errorbar(pairs, means, yerr=[s or 0.0 for s in stds], marker="o", capsize=3, label=series)
    _log2_x(ax, all_pairs)
    ax.set_xlabel("key-value pairs N")
    ax.set_ylabel("query accuracy (test)")
    ax.set_ylim(-0.02, 1.02)
    plots.legend_outside(ax)
    return plots.save_figure(fig, path)


def plot_accuracy_vs_state(results: dict[str, list[dict]], path: str) -> str:
    """Query accuracy against the state a head keeps (log scale), every run on one chart per N, a colour
    per kind: a fixed-state kind needs more state as N grows; softmax's is its whole cache."""
    pairs = sorted({_pairs(evals) for evals in results.values()})
    fig, axes = plt.subplots(1, len(pairs), figsize=(3.4 * len(pairs) + 1.5, 3.6), squeeze=False, sharey=True,
                             layout="constrained")
    kinds = list(dict.fromkeys(_state(evals)["kind"] for evals in results.values()))
    colors = dict(zip(kinds, plots.COLORS))
    for ax, n in zip(axes[0], pairs):
        for name, evals in results.items():
            if _pairs(evals) != n:
                continue
            mean, std = stats.mean_std(_accuracies(evals))
            state = _state(evals)
            ax.errorbar(state["per_head"], mean, yerr=std or 0.0, marker="o", capsize=3, color=colors[state["kind"]])
            ax.annotate(series_name(name), (state["per_head"], mean), textcoords="offset points", xytext=(3, 3),
                        fontsize=6)
        plots.counts_log_x(ax)
        ax.set_title(f"N = {n}", fontsize=9)
        ax.set_xlabel("state per head (numbers)")
    axes[0][0].set_ylabel("query accuracy (test)")
    axes[0][0].set_ylim(-0.02, 1.05)
    handles = [plt.Line2D([], [], color=colors[kind], marker="o", linestyle="") for kind in kinds]
    axes[0][-1].legend(handles, kinds, fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return plots.save_figure(fig, path)


def plot_rank_vs_pairs(results: dict[str, list[dict]], path: str) -> str:
    """Effective rank of the recall layer's query rows against N, one line per series; the dotted diagonal
    is the rank N that pointing N queries at N keys takes."""
    fig, ax = plt.subplots(figsize=(7.5, 4), layout="constrained")
    ax.set_prop_cycle(color=plots.COLORS)
    all_pairs = []
    for series, runs in _by_series(results).items():
        points = sorted((_pairs(evals), recall_layer(evals)[1]["effective_rank"]) for _, evals in runs)
        pairs, ranks = zip(*points)
        all_pairs += pairs
        ax.plot(pairs, ranks, marker="o", label=series)
    ax.plot(sorted(set(all_pairs)), sorted(set(all_pairs)), color="gray", linestyle=":", label="rank N")
    _log2_x(ax, all_pairs)
    ax.set_xlabel("key-value pairs N")
    ax.set_ylabel("effective rank, query rows")
    plots.legend_outside(ax)
    return plots.save_figure(fig, path)


def width_sweeps(results: dict[str, list[dict]]) -> dict[tuple[str, int], list[list[dict]]]:
    """(kernelised kind, N) -> its runs, where the study tried several feature dims for them."""
    groups = collections.defaultdict(list)
    for evals in results.values():
        state = _state(evals)
        if state["feature_dim"] is not None:
            groups[state["kind"], _pairs(evals)].append(evals)
    return {key: runs for key, runs in groups.items() if len({_state(e)["feature_dim"] for e in runs}) > 1}


def plot_accuracy_vs_feature_dim(results: dict[str, list[dict]], path: str) -> str:
    """For each width sweep (kind and N): query accuracy (left) and the effective rank of the query rows
    (right) against the feature dim, a dotted line at each such N."""
    groups = width_sweeps(results)
    fig, (accuracy_ax, rank_ax) = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    accuracy_ax.set_prop_cycle(color=plots.COLORS)
    rank_ax.set_prop_cycle(color=plots.COLORS)
    for (kind, pairs), runs in groups.items():
        points = sorted((_state(evals)["feature_dim"], *stats.mean_std(_accuracies(evals)),
                         recall_layer(evals)[1]["effective_rank"]) for evals in runs)
        dims, means, stds, ranks = zip(*points)
        accuracy_ax.errorbar(dims, means, yerr=[s or 0.0 for s in stds], marker="o", capsize=3,
                             label=f"{kind}, N = {pairs}")
        rank_ax.plot(dims, ranks, marker="o", label=f"{kind}, N = {pairs}")
    for pairs in {pairs for _, pairs in groups}:
        rank_ax.axhline(pairs, color="gray", linestyle=":", linewidth=1)
    for ax, label in ((accuracy_ax, "query accuracy (test)"), (rank_ax, "effective rank, query rows")):
        plots.counts_log_x(ax)
        ax.set_xlabel("feature dim m")
        ax.set_ylabel(label)
    accuracy_ax.set_ylim(-0.02, 1.02)
    plots.legend_outside(rank_ax)
    return plots.save_figure(fig, path)


def sections(results: dict[str, list[dict]], out_dir: str) -> list[str]:
    """The report's recall sections (tables and plots, the PNGs written to out_dir)."""
    images = [("query accuracy against N", PAIRS_PLOT, plot_accuracy_vs_pairs),
              ("query accuracy against the state per head", STATE_PLOT, plot_accuracy_vs_state),
              ("effective rank of the query rows against N", RANK_PLOT, plot_rank_vs_pairs)]
    if width_sweeps(results):
        images.append(("accuracy and rank against the feature dim", WIDTH_PLOT, plot_accuracy_vs_feature_dim))
    for _, file, plot in images:
        plot(results, os.path.join(out_dir, file))
    return [
        "## Query accuracy\n\nTest accuracy at the N query positions (3,000 test sequences unless the config "
        "says otherwise). d': the width of a head's queries and keys; feature dim: m of a kernelised kind "
        "(\"-\": softmax family); state / head: the numbers a head keeps to attend over the sequence (m x "
        "d_v for a kernelised kind, every key and value for softmax). Std over seeds with ddof=1; "
        "\"validation\": the last periodic evaluation's accuracy; \"selected\": the run a learning rate was "
        "chosen from, on validation.",
        accuracy_table(results),
        "## Rank of the query rows\n\nThe attention rows at the N query positions of 16 test sequences, an "
        "N x L matrix per head; means over examples, heads and seeds, in the layer whose rows have the "
        "highest effective rank (\"recall layer\"). Answering N queries takes N rows pointing at N different "
        "keys: effective rank near N.",
        rank_table(results),
        "## Plots",
        *(f"![{title}]({file})" for title, file, _ in images),
    ]
