"""The associative-recall task's study report sections (tasks/recall.py binds them as its report_sections):
query accuracy and the ranks of the query rows against the number of key-value pairs N, the feature dim and
the state size.

In a study's `results` (a run name -> its seeds' eval.json dicts) runs are named as configs/recall.py names
them: `<series>_N<pairs>`, the series (kind and width) plotted as a line.
"""
import collections
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib import ticker  # noqa: E402

from analysis import plots, stats, tables  # noqa: E402

RESULT_KEY = "recall"  # eval.json's key of the task's own fields: the task's NAME


PAIRS_PLOT = "accuracy_vs_pairs.png"
STATE_PLOT = "accuracy_vs_state.png"
RANK_PLOT = "rank_vs_pairs.png"
RANK_STATE_PLOT = "rank_vs_state.png"
WIDTH_PLOT = "accuracy_vs_feature_dim.png"


def series_name(run: str) -> str:
    return run.rsplit("_N", 1)[0]


def _state(evals: list[dict]) -> dict:
    (state,) = evals[0]["state"].values()  # the recall model has one attention role
    return state


def _pairs(evals: list[dict]) -> int:
    return evals[0][RESULT_KEY]["num_kv_pairs"]


def _accuracies(evals: list[dict]) -> list[float]:
    return [result["metrics"]["query_accuracy"] for result in evals]


def query_accuracy_table(results: dict[str, list[dict]]) -> str:
    """Per run: its sizes, test query accuracy (mean ± std over seeds, and each seed's), validation accuracy
    and, where the study picks a learning rate on validation, the one selected."""
    lines = ["| run | kind | N | d' | feature dim | state / head | seeds | query accuracy (mean ± std) | "
             "per seed | validation | selected |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|"]
    for name, evals in results.items():
        state = _state(evals)
        validation = [result["validation"].get("query_accuracy") for result in evals if result.get("validation")]
        lines.append(
            f"| {name} | {state['kind']} | {_pairs(evals)} | {state['key_dim']} | "
            f"{tables.dash_if_none(state['feature_dim'], ',')} | {state['per_head']:,} | {len(evals)} | "
            f"{stats.mean_std_text(_accuracies(evals))} | "
            f"{', '.join(f'{a:.3f}' for a in _accuracies(evals))} | "
            f"{f'{np.mean(validation):.4f}' if validation else '-'} | {evals[0].get('selected', '')} |")
    return "\n".join(lines)


def query_rank_table(results: dict[str, list[dict]]) -> str:
    """Ranks and row shapes of the attention rows at the N query positions ([N, L] per head and example), a
    row per run and layer, every run's layers alike (no layer chosen per run): answering N queries takes N
    rows pointing at N different keys, rank N."""
    lines = ["| run | kind | N | feature dim | layer | effective rank | numerical rank | stable rank | "
             f"effective / N | {tables.SHAPE_HEADER}",
             f"|---|---|---:|---:|---:|---:|---:|---:|---:|{tables.SHAPE_ALIGN}"]
    for name, evals in results.items():
        pairs = _pairs(evals)
        for layer, ranks in tables.layer_ranks(evals).items():
            lines.append(
                f"| {name} | {_state(evals)['kind']} | {pairs} | {tables.dash_if_none(_state(evals)['feature_dim'], ',')} | "
                f"{layer} | {ranks['effective_rank']:.2f} | {ranks['numerical_rank']:.2f} | "
                f"{ranks['stable_rank']:.2f} | {ranks['effective_rank'] / pairs:.2f} | "
                f"{tables.shape_cells(tables.shape_rows(evals, layer=layer))}")
    return "\n".join(lines)


def _layers(results: dict[str, list[dict]]) -> list[int]:
    return sorted({layer for evals in results.values() for layer in tables.layer_ranks(evals)})


def _rank_axis(ax, top: float, layer: int) -> None:
    """The whole rank axis, from 0 to the largest N (or rank) plotted."""
    ax.set_ylim(0, 1.08 * top)
    ax.set_ylabel(f"effective rank, query rows\n(layer {layer})")


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


def _seeds(results: dict[str, list[dict]]) -> list[int]:
    return [len(evals) for evals in results.values()]


def _draw_chance(ax, results: dict[str, list[dict]]) -> None:
    """Chance: a value guessed among the V/2 value tokens."""
    vocab_size = next(iter(results.values()))[0][RESULT_KEY]["vocab_size"]
    plots.reference_line(ax, 2 / vocab_size, f"chance (1/{vocab_size // 2})")


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
    _draw_chance(ax, results)
    ax.set_xlabel("key-value pairs N")
    ax.set_ylabel("query accuracy (test)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(plots.seeds_note(_seeds(results)), fontsize=8)
    plots.legend_outside(ax)
    return plots.save_figure(fig, path)


def plot_accuracy_vs_state(results: dict[str, list[dict]], path: str) -> str:
    """Query accuracy against the state a head keeps (log scale), every run on one chart per N, a colour
    per kind: a fixed-state kind needs more state as N grows; softmax's is its whole cache."""
    pairs = sorted({_pairs(evals) for evals in results.values()})
    fig, axes = plt.subplots(1, len(pairs), figsize=(3.4 * len(pairs) + 1.5, 3.6), squeeze=False, sharey=True,
                             layout="constrained")
    colors = _kind_colors(results)
    for ax, n in zip(axes[0], pairs):
        points = []
        for name, evals in results.items():
            if _pairs(evals) != n:
                continue
            mean, std = stats.mean_std(_accuracies(evals))
            state = _state(evals)
            ax.errorbar(state["per_head"], mean, yerr=std or 0.0, marker="o", capsize=3, color=colors[state["kind"]],
                        alpha=0.85)
            points.append((state["per_head"], mean, series_name(name)))
        plots.label_points(ax, points, log_x=True)
        _draw_chance(ax, results)
        plots.counts_log_x(ax)
        ax.margins(x=0.12)
        ax.set_title(f"N = {n}", fontsize=9)
        ax.set_xlabel("state per head (numbers)")
    fig.suptitle(plots.seeds_note(_seeds(results)), fontsize=8)
    axes[0][0].set_ylabel("query accuracy (test)")
    axes[0][0].set_ylim(-0.02, 1.05)
    _kind_legend(axes[0][-1], colors)
    return plots.save_figure(fig, path)


def _kind_colors(results: dict[str, list[dict]]) -> dict[str, str]:
    return dict(zip(dict.fromkeys(_state(evals)["kind"] for evals in results.values()), plots.COLORS))


def _kind_legend(ax, colors: dict[str, str]) -> None:
    handles = [plt.Line2D([], [], color=color, marker="o", linestyle="") for color in colors.values()]
    ax.legend(handles, list(colors), fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))


def plot_rank_vs_state(results: dict[str, list[dict]], path: str) -> str:
    """Effective (top) and numerical (bottom) rank of the query rows against the state a head keeps, a
    column per layer, a point per run (mean over seeds) coloured by kind; the dotted line is N, the rank
    that pointing N queries at N keys takes. For a study at one N, where rank against N is a single point."""
    layers, colors = _layers(results), _kind_colors(results)
    fig, axes = plt.subplots(2, len(layers), figsize=(4.2 * len(layers) + 2, 6.6), squeeze=False, sharex=True,
                             layout="constrained")
    for row, field in enumerate(("effective_rank", "numerical_rank")):
        for ax, layer in zip(axes[row], layers):
            points = []
            for name, evals in results.items():
                if (ranks := tables.layer_ranks(evals).get(layer)) is not None:
                    state = _state(evals)
                    ax.plot(state["per_head"], ranks[field], marker="o", linestyle="", color=colors[state["kind"]])
                    points.append((state["per_head"], ranks[field], series_name(name)))
            plots.label_points(ax, points, log_x=True)
            for pairs in {_pairs(evals) for evals in results.values()}:
                ax.axhline(pairs, color="gray", linestyle=":", linewidth=1)
            plots.counts_log_x(ax)
            ax.margins(x=0.12)
            ax.set_ylim(0, None)
            ax.set_title(f"layer {layer}", fontsize=9)
        axes[row][0].set_ylabel(f"{field.replace('_', ' ')}, query rows")
    for ax in axes[1]:
        ax.set_xlabel("state per head (numbers)")
    _kind_legend(axes[0][-1], colors)
    return plots.save_figure(fig, path)


def _draw_rank_guide(ax, values) -> None:
    """The rank N that pointing N queries at N keys takes: a wide grey band under the lines, so that a line
    on it (softmax's) leaves it visible."""
    values = sorted(set(values))
    ax.plot(values, values, color="0.8", linewidth=7, solid_capstyle="round", zorder=0, label="rank N")


def plot_rank_vs_pairs(results: dict[str, list[dict]], path: str) -> str:
    """Effective rank of the query rows against N, a panel per layer (every run's), a line per series; the
    grey band is the rank N that pointing N queries at N keys takes."""
    layers = _layers(results)
    fig, axes = plt.subplots(1, len(layers), figsize=(4.2 * len(layers) + 2, 4), squeeze=False, sharey=True,
                             layout="constrained")
    all_pairs = [_pairs(evals) for evals in results.values()]
    for ax, layer in zip(axes[0], layers):
        ax.set_prop_cycle(color=plots.COLORS)
        _draw_rank_guide(ax, all_pairs)
        for series, runs in _by_series(results).items():
            points = sorted((_pairs(evals), tables.layer_ranks(evals)[layer]["effective_rank"]) for _, evals in runs
                            if layer in tables.layer_ranks(evals))
            ax.plot(*zip(*points), marker="o", label=series)
        _log2_x(ax, all_pairs)
        ax.set_xlabel("key-value pairs N")
        ax.set_title(f"layer {layer}", fontsize=9)
        _rank_axis(ax, max(all_pairs), layer)
    plots.legend_outside(axes[0][-1])
    return plots.save_figure(fig, path)


def width_sweeps(results: dict[str, list[dict]]) -> dict[tuple[str, int], list[list[dict]]]:
    """(kernelised kind, N) -> its runs, where the study tried several feature dims for them."""
    groups = collections.defaultdict(list)
    for evals in results.values():
        state = _state(evals)
        if state["feature_dim"] is not None:
            groups[state["kind"], _pairs(evals)].append(evals)
    return {key: runs for key, runs in groups.items() if len({_state(e)["feature_dim"] for e in runs}) > 1}


def plot_width_sweeps(results: dict[str, list[dict]], path: str) -> str:
    """For each width sweep (kind and N): query accuracy (left, ± std over seeds) and the effective rank of
    the query rows in each layer (a panel per layer) against the feature dim, a dotted line at each such N."""
    groups, layers = width_sweeps(results), _layers(results)
    fig, axes = plt.subplots(1, 1 + len(layers), figsize=(4.2 * (1 + len(layers)) + 2, 3.8), squeeze=False,
                             layout="constrained")
    accuracy_ax, *rank_axes = axes[0]
    for ax in axes[0]:
        ax.set_prop_cycle(color=plots.COLORS)
    for (kind, pairs), runs in groups.items():
        label = f"{kind}, N = {pairs}"
        points = sorted((_state(evals)["feature_dim"], *stats.mean_std(_accuracies(evals))) for evals in runs)
        dims, means, stds = zip(*points)
        seeds = min(len(evals) for evals in runs)
        accuracy_ax.errorbar(dims, means, yerr=[s or 0.0 for s in stds], marker="o", capsize=3,
                             label=f"{label} (± std, {seeds} seeds)")
        for ax, layer in zip(rank_axes, layers):
            points = sorted((_state(evals)["feature_dim"], tables.layer_ranks(evals)[layer]["effective_rank"])
                            for evals in runs if layer in tables.layer_ranks(evals))
            ax.plot(*zip(*points), marker="o", label=label)
    top = max([pairs for _, pairs in groups] + [1])
    for ax, layer in zip(rank_axes, layers):
        for pairs in {pairs for _, pairs in groups}:
            ax.axhline(pairs, color="gray", linestyle=":", linewidth=1)
        ax.set_title(f"layer {layer}", fontsize=9)
        _rank_axis(ax, top, layer)
    for ax in axes[0]:
        plots.counts_log_x(ax)
        ax.set_xlabel("feature dim m")
    accuracy_ax.set_ylabel("query accuracy (test)")
    accuracy_ax.set_ylim(-0.02, 1.02)
    _draw_chance(accuracy_ax, results)
    accuracy_ax.legend(fontsize=7, loc="lower right")
    plots.legend_outside(rank_axes[-1])
    return plots.save_figure(fig, path)


def report_sections(results: dict[str, list[dict]], spectra: dict, out_dir: str, head_dim: int | None) -> list[str]:
    """The recall sections of a study's report (tables and plots, the PNGs written to out_dir); the spectra
    and head dim of the rank-bound grids play no part."""
    del spectra, head_dim
    against_state = [("query accuracy against the state per head", STATE_PLOT, plot_accuracy_vs_state)]
    if len({_pairs(evals) for evals in results.values()}) == 1:  # against N, a column of points
        images = against_state + [("effective and numerical rank of the query rows against the state per head",
                                   RANK_STATE_PLOT, plot_rank_vs_state)]
    else:
        images = [("query accuracy against N", PAIRS_PLOT, plot_accuracy_vs_pairs), *against_state,
                  ("effective rank of the query rows against N", RANK_PLOT, plot_rank_vs_pairs)]
    if width_sweeps(results):
        images.append(("accuracy and rank against the feature dim", WIDTH_PLOT, plot_width_sweeps))
    for _, file, plot in images:
        plot(results, os.path.join(out_dir, file))
    return [
        "## Query accuracy\n\nTest accuracy at the N query positions (3,000 test sequences unless the config "
        "says otherwise). d': the width of a head's queries and keys; feature dim: m of a kernelised kind "
        "(\"-\": softmax family); state / head: the numbers a head keeps to attend over the sequence (m x "
        "d_v for a kernelised kind, every key and value for softmax). Std over seeds with ddof=1; "
        "\"validation\": the last periodic evaluation's accuracy; \"selected\": the learning rate picked on "
        "validation, where the study picks one.",
        query_accuracy_table(results),
        "## Rank of the query rows\n\nThe attention rows at the N query positions of 16 test sequences, an "
        "N x L matrix per head; means over examples, heads and seeds, every layer of every run (no layer "
        "chosen per run). Answering N queries takes N rows pointing at N different keys: effective rank "
        "near N, in the layer that does the lookup. " + tables.SHAPE_NOTE,
        query_rank_table(results),
        "## Plots",
        *(f"![{title}]({file})" for title, file, _ in images),
    ]
