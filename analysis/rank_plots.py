"""PNG plots of a rank study: its headline metric against feature dim, effective rank and row entropy, and
its runs' singular-value spectra, from the eval.json of every run's seeds.

`results` maps a run name to the eval.json dicts of its seeds (schema in docs/design.md); `spectra` maps a
run name to one seed's spectra.json, {role: [[s_i / s_1 of layer 0, descending], [layer 1], ...]}.
"""
import itertools

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from analysis import plots, stats, tables  # noqa: E402

FEATURE_DIM_PLOT = "accuracy_vs_feature_dim.png"
EFFECTIVE_RANK_PLOT = "accuracy_vs_effective_rank.png"
ROW_ENTROPY_PLOT = "accuracy_vs_row_entropy.png"
SPECTRA_PLOT = "spectra.png"


def _headline(metrics: tuple[str, ...], evals: list[dict]) -> tuple[float, float | None]:
    return stats.mean_std([result["metrics"][metrics[0]] for result in evals])


def draw_baselines(ax, results: dict[str, list[dict]], levels: dict[str, float] | None = None) -> None:
    """The predictors without attention that a run's eval.json carries (`baselines`, MLM's) and the task's
    fixed `levels` (chance) as grey levels, each labelled at the right edge."""
    baselines = {**next(iter(results.values()))[0].get("baselines", {}), **(levels or {})}
    for name, accuracy in baselines.items():
        plots.reference_line(ax, accuracy, name)


def plot_accuracy_vs_feature_dim(metrics: tuple[str, ...], results: dict[str, list[dict]], path: str,
                                 levels: dict[str, float] | None = None) -> str:
    """Headline metric against feature dim, one line per bounded kind; unbounded runs as dashed levels."""
    fig, ax = plt.subplots(figsize=(7.5, 4), layout="constrained")
    by_kind: dict[str, list[tuple[int, float, float]]] = {}
    colors = itertools.cycle(plots.COLORS)  # explicit: axhline does not advance the axes' colour cycle
    for name, evals in results.items():
        mean, std = _headline(metrics, evals)
        bound = tables.rank_bound(evals)
        if bound is None:
            color = next(colors)
            ax.axhline(mean, color=color, linestyle="--", linewidth=1, label=name)
            if std is not None:
                ax.axhspan(mean - std, mean + std, color=color, alpha=0.15)
        else:
            by_kind.setdefault(tables.kind_of(evals), []).append((bound, mean, std or 0.0))
    for kind, points in by_kind.items():
        dims, means, stds = zip(*sorted(points))
        ax.errorbar(dims, means, yerr=stds, color=next(colors), marker="o", capsize=3, label=kind)
    if by_kind:  # a log axis needs positive data to place its limits
        plots.counts_log_x(ax)
    draw_baselines(ax, results, levels)
    ax.set_xlabel("feature dim (rank bound)")
    ax.set_ylabel(metrics[0])
    plots.legend_outside(ax)
    ax.set_title(plots.seeds_note([len(evals) for evals in results.values()], "error bars and bands"), fontsize=8)
    return plots.save_figure(fig, path)


def plot_accuracy_vs_effective_rank(metrics: tuple[str, ...], results: dict[str, list[dict]], path: str,
                                    levels: dict[str, float] | None = None) -> str:
    """Headline metric against the mean effective rank of the reported role, one labelled point per run."""
    fig, ax = plt.subplots(figsize=(7.5, 4), layout="constrained")
    ax.set_prop_cycle(color=plots.COLORS)
    points = []
    for name, evals in results.items():
        if not tables.rank_rows(evals):
            continue
        mean, std = _headline(metrics, evals)
        effective_rank = tables.rank_mean(evals, "effective_rank")
        ax.errorbar(effective_rank, mean, yerr=std or 0.0, marker="o", capsize=3)
        points.append((effective_rank, mean, name))
    if points:
        plots.label_points(ax, points)
    draw_baselines(ax, results, levels)
    ax.set_xlabel("effective rank (mean over layers, heads, seeds)")
    ax.set_ylabel(metrics[0])
    ax.set_title(plots.seeds_note([len(evals) for evals in results.values()]), fontsize=8)
    return plots.save_figure(fig, path)


def _seed_entropy(result: dict, role: str, layer: int | None) -> float | None:
    """One seed's mean row entropy of `role` over the heads of `layer` (None: of every layer)."""
    return tables.shape_mean(tables.shape_rows([result], role, layer), "row_entropy")


def plot_accuracy_vs_row_entropy(metrics: tuple[str, ...], results: dict[str, list[dict]], path: str,
                                 levels: dict[str, float] | None = None) -> str:
    """Headline metric against the mean row entropy of the reported role, in layer 0 (left) and over every
    layer (right): a point per seed, a colour per run; runs whose eval.json has no shape rows are left out."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True, layout="constrained")
    for ax, layer in zip(axes, (0, None)):
        ax.set_prop_cycle(color=plots.COLORS)
        for name, evals in results.items():
            role = tables.reported_role(evals[0]["attention"])
            points = [(entropy, result["metrics"][metrics[0]]) for result in evals
                      if (entropy := _seed_entropy(result, role, layer)) is not None]
            if points:
                ax.plot(*zip(*points), marker="o", linestyle="none", label=name)
        draw_baselines(ax, results, levels)
        ax.set_xlabel(f"row entropy, nats ({'layer 0' if layer == 0 else 'mean over layers'}, heads)")
    axes[0].set_ylabel(metrics[0])
    plots.legend_outside(axes[1])
    fig.suptitle("one point per seed", fontsize=8)
    return plots.save_figure(fig, path)


def plot_spectra_by_run(results: dict[str, list[dict]], spectra: dict[str, dict], path: str) -> str:
    """Layer-0 spectrum of the reported role of every run in `spectra`, log scale, a dotted line at each
    rank bound below the spectra's length (a bound at or above the sequence length cannot bind)."""
    fig, ax = plt.subplots(figsize=(7.5, 4), layout="constrained")
    ax.set_prop_cycle(color=plots.COLORS)
    length = 0
    for name, spectrum in spectra.items():
        values = np.asarray(spectrum[tables.reported_role(spectrum)][0])
        length = max(length, len(values))
        # Exact zeros (beyond every matrix's length) have no place on a log axis.
        ax.plot(np.arange(1, len(values) + 1), np.where(values > 0, values, np.nan), label=name)
    bounds = {tables.rank_bound(results[name]) for name in spectra if name in results}
    for bound in sorted(bound for bound in bounds if bound is not None and bound < length):
        ax.axvline(bound, color="gray", linestyle=":", linewidth=1)
        ax.annotate(f"m={bound}", (bound, 1.0), xytext=(2, -10), textcoords="offset points", fontsize=7)
    ax.set_yscale("log")
    ax.set_xlabel("singular value index")
    ax.set_ylabel(r"$\sigma_i / \sigma_1$ (layer 0)")
    plots.legend_outside(ax)
    return plots.save_figure(fig, path)
