"""PNG figures: attention heat maps of one example, mean singular-value spectra, and training curves."""

import itertools
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402
import numpy as np  # noqa: E402

MAX_LABELLED_TOKENS = 40
PANEL_INCHES = 2.6
# tab10's colours, then their light shades: a study's plot can draw more than 10 series.
COLORS = plt.cm.tab20.colors[::2] + plt.cm.tab20.colors[1::2]
CURVES_PLOT = "curves.png"
ATTENTION_PLOT = "attention_maps.png"  # a study's runs side by side (plot_attention_by_run)
# The fields of a metrics.jsonl line that are no metric (training/metrics.py, MetricsWriter.write).
RECORD_FIELDS = ("step", "split", "elapsed_s")
SPLIT_LABELS = {"train": "train", "eval": "validation"}  # "eval" lines evaluate the validation split
Curve = tuple[np.ndarray, np.ndarray]  # (steps, values)


def save_figure(fig, path: str) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def counts_log_x(ax) -> None:
    """A log x axis labelled with plain numbers at 1, 2, 5 x 10^k: feature dims and state sizes read as
    counts, not as powers of ten."""
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(ticker.LogLocator(subs=(1, 2, 5)))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:,.0f}"))
    ax.minorticks_off()


def legend_outside(ax) -> None:
    """Right of the axes: with a dozen runs, a legend inside hides data."""
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))


def reference_line(ax, value: float, label: str) -> None:
    """A grey dotted level across the axes (chance, a baseline), labelled at the right edge."""
    ax.axhline(value, color="0.55", linestyle=":", linewidth=1, zorder=0)
    ax.annotate(label, (1.0, value), xycoords=("axes fraction", "data"), xytext=(-2, 2),
                textcoords="offset points", fontsize=7, color="0.4", ha="right")


def seeds_note(seed_counts, what: str = "error bars") -> str:
    """What an error bar is: "error bars: ± std over 3 seeds (ddof=1)", "2-3 seeds" where runs differ;
    a run of one seed has none."""
    low, high = min(seed_counts), max(seed_counts)
    if high == 1:
        return f"one seed per run: no {what}"
    return f"{what}: ± std over {low if low == high else f'{low}-{high}'} seeds (ddof=1)"


LABEL_CHAR_WIDTH = 0.018  # a 6-point character, as a fraction of a panel about 3 inches wide


def label_points(ax, points: list[tuple[float, float, str]], log_x: bool = False) -> None:
    """Labels each (x, y, text) beside its point, right of it (left of it near the right edge); a label
    that would overlap an earlier one (its span of the panel's width, a line of its height) moves down a
    line, clear of its own marker."""
    xs = [np.log10(x) if log_x else x for x, _, _ in points]
    ys = [y for _, y, _ in points]
    low_x, low_y = min(xs), min(ys)
    span_x, span_y = (max(xs) - low_x) or 1.0, (max(ys) - low_y) or 1.0
    placed = []  # (x from, x to, y) of each label, in fractions of the points' extent
    for (x, y, text), fx, fy in sorted(zip(points, xs, ys), key=lambda item: (-item[2], item[1])):
        fx, fy = (fx - low_x) / span_x, (fy - low_y) / span_y
        width = LABEL_CHAR_WIDTH * len(text) + 0.04
        right = fx > 0.75
        span = (fx - width, fx) if right else (fx, fx + width)
        line = 0
        while any(a < span[1] and span[0] < b and abs(level - (fy - 0.07 * line)) < 0.06 for a, b, level in placed):
            line += 1
        placed.append((*span, fy - 0.07 * line))
        # A label moved off its point keeps a thin line to it.
        ax.annotate(text, (x, y), textcoords="offset points", xytext=(-5 if right else 5, 3 if line == 0 else -3 - 8 * line),
                    ha="right" if right else "left", fontsize=6,
                    arrowprops=dict(arrowstyle="-", color="0.65", linewidth=0.5, shrinkA=0, shrinkB=3) if line else None)


def _tick_labels(tokens: list[str], size: int, role: str, axis: str) -> list[str] | None:
    if len(tokens) != size:
        raise ValueError(f"{role}: {len(tokens)} {axis} tokens for a matrix dimension of {size}")
    return tokens if size <= MAX_LABELLED_TOKENS else None


def run_title(workdir: str, kinds: dict[str, str], step: int) -> str:
    """A run's figures' title: its workdir, its attention kind (per role where they differ) and the step."""
    kind = (next(iter(kinds.values())) if len(set(kinds.values())) == 1 else
            ", ".join(f"{role} {kind}" for role, kind in kinds.items()) or "no attention")
    return f"{os.path.normpath(workdir)} | {kind} | step {step}"


def plot_attention_heatmaps(
    weights: dict[str, np.ndarray],
    query_tokens: dict[str, list[str]],
    key_tokens: dict[str, list[str]],
    path: str,
    title: str,
) -> str:
    """Grid of one example's attention: a row per (role, layer), a column per head, under `title`.

    weights[role] is [num_layers, num_heads, Lq, Lk], already unpadded; query_tokens[role] and
    key_tokens[role] label the axes when there are at most MAX_LABELLED_TOKENS of them.
    """
    panels = [(role, layer) for role, w in weights.items() for layer in range(w.shape[0])]
    num_cols = max(w.shape[1] for w in weights.values())
    # One colour scale for every panel, so that heads and layers can be compared by eye.
    vmax = max(float(np.max(w)) for w in weights.values())
    fig, axes = plt.subplots(
        len(panels),
        num_cols,
        figsize=(PANEL_INCHES * num_cols + 1, PANEL_INCHES * len(panels)),
        squeeze=False,
        layout="constrained",
    )
    for row, (role, layer) in enumerate(panels):
        w = np.asarray(weights[role][layer])
        y_labels = _tick_labels(query_tokens[role], w.shape[1], role, "query")
        x_labels = _tick_labels(key_tokens[role], w.shape[2], role, "key")
        for head in range(num_cols):
            ax = axes[row, head]
            if head >= w.shape[0]:
                ax.axis("off")
                continue
            image = ax.imshow(w[head], cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto")
            ax.set_title(f"{role} L{layer} H{head}", fontsize=8)
            _label_axis(ax.set_xticks, x_labels, w.shape[2], rotation=90)
            _label_axis(ax.set_yticks, y_labels if head == 0 else None, w.shape[1])
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, path)


def plot_attention_by_run(examples: dict[str, dict[str, dict]], head: int, path: str) -> str:
    """Every run's attention to one example side by side: a row per run, a column per (role, layer), head
    `head` of each. examples[run] is training.evaluation.read_attention_example's dict. Each panel has its
    own colour scale (its maximum in the title): a diffuse kind drawn on a peaked kind's scale would show
    nothing."""
    panels = list(dict.fromkeys((role, layer) for example in examples.values()
                                for role, entry in example.items() for layer in range(len(entry["weights"]))))
    fig, axes = plt.subplots(len(examples), len(panels), figsize=(1.9 * len(panels) + 0.8, 1.9 * len(examples)),
                             squeeze=False, layout="constrained")
    for row, (run, example) in enumerate(examples.items()):
        for column, (role, layer) in enumerate(panels):
            ax = axes[row, column]
            entry = example.get(role)
            if entry is None or layer >= len(entry["weights"]):
                ax.axis("off")
                continue
            w = entry["weights"][layer, head]
            # Nearest: each weight a block of pixels, not a blend of neighbours (and a PNG about half the size).
            ax.imshow(w, cmap="viridis", vmin=0.0, vmax=float(w.max()) or 1.0, aspect="auto",
                      interpolation="nearest")
            ax.set_title(f"{role} L{layer} (max {w.max():.2f})", fontsize=7)
            last_row, first_column = row == len(examples) - 1, column == 0
            _label_axis(ax.set_xticks, entry["key_tokens"] if last_row and len(w[0]) <= MAX_LABELLED_TOKENS
                        else None, w.shape[1], rotation=90)
            _label_axis(ax.set_yticks, entry["query_tokens"] if first_column and len(w) <= MAX_LABELLED_TOKENS
                        else None, w.shape[0])
            if first_column:
                ax.set_ylabel(run, fontsize=8)
    fig.suptitle(f"one example, head {head} of seed 0 of each run\nrows: queries, columns: keys; "
                 "each panel on its own colour scale", fontsize=8)
    return save_figure(fig, path)


def _label_axis(set_ticks, labels: list[str] | None, size: int, rotation: int = 0) -> None:
    if labels is None:
        set_ticks([])
    else:
        set_ticks(range(size), labels, fontsize=5, rotation=rotation)


def plot_spectra(spectra: dict[str, np.ndarray], rank_bounds: dict[str, int | None], path: str,
                 title: str) -> str:
    """One panel per role with a line per layer: singular values divided by the largest, log scale, under
    `title`.

    spectra[role] is [num_layers, max_len] from analysis.rank.mean_spectrum; a dashed vertical line
    marks rank_bounds[role] where it is not None.
    """
    fig, axes = plt.subplots(
        1, len(spectra), figsize=(4.5 * len(spectra), 3.5), squeeze=False, layout="constrained"
    )
    for ax, (role, spectrum) in zip(axes[0], spectra.items()):
        index = np.arange(1, spectrum.shape[1] + 1)
        for layer, values in enumerate(spectrum):
            # Exact zeros (padding beyond every matrix's length) have no place on a log axis.
            ax.plot(index, np.where(values > 0, values, np.nan), label=f"layer {layer}")
        bound = rank_bounds.get(role)
        if bound is not None:
            ax.axvline(bound, color="black", linestyle="--", linewidth=1, label=f"rank bound {bound}")
        ax.set_yscale("log")
        ax.set_title(role)
        ax.set_xlabel("singular value index")
        ax.set_ylabel(r"$\sigma_i / \sigma_1$")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, path)


def metric_curve(records: list[dict], split: str, metric: str) -> Curve:
    """`metric` against step over the `split` lines of a run's metrics.jsonl (training.metrics.read_metrics)
    that carry it."""
    points = [(record["step"], record[metric]) for record in records
              if record["split"] == split and metric in record]
    steps, values = zip(*points) if points else ((), ())
    return np.asarray(steps, int), np.asarray(values, float)


def run_curves(records: list[dict]) -> dict[str, dict[str, Curve]]:
    """metric -> split -> curve, for the loss and every metric of the evaluation lines (the task's), over
    the splits that log it: without evaluation lines, only the train loss."""
    metrics = dict.fromkeys(["loss", *(key for record in records if record["split"] == "eval"
                                       for key in record if key not in RECORD_FIELDS)])
    return {metric: {split: curve for split in SPLIT_LABELS
                     if len((curve := metric_curve(records, split, metric))[0])}
            for metric in metrics}


def plot_run_curves(records: list[dict], path: str, title: str) -> str:
    """A panel per metric of `run_curves` against step, its train and validation curves, under `title`; the
    loss on a log axis, where its later steps are not a flat line."""
    curves = run_curves(records)
    colors = dict(zip(SPLIT_LABELS, COLORS))  # a split keeps its colour in panels that lack the other
    fig, axes = plt.subplots(1, len(curves), figsize=(2.8 * len(curves), 2.4), squeeze=False,
                             layout="constrained")
    for ax, (metric, splits) in zip(axes[0], curves.items()):
        for split, (steps, values) in splits.items():
            # Evaluations are few: dots show where each one is.
            ax.plot(steps, values, color=colors[split], linewidth=1, marker="." if split == "eval" else None,
                    markersize=4, label=SPLIT_LABELS[split])
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        if metric == "loss":
            ax.set_yscale("log")
        ax.tick_params(labelsize=7)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, path)


def mean_curve(curves: list[Curve]) -> Curve:
    """The mean of seeds' curves at the steps that all of those with a point share (a seed cut short ends
    the mean); empty when none has one."""
    seeds = [dict(zip(steps.tolist(), values.tolist())) for steps, values in curves if len(steps)]
    steps = sorted(set.intersection(*map(set, seeds))) if seeds else []
    return np.asarray(steps, int), np.asarray([np.mean([seed[step] for seed in seeds]) for step in steps], float)


def plot_validation_curves(records_by_run: dict[str, list[list[dict]]], metric: str, path: str) -> str:
    """Validation loss and `metric` against step, a line per run: the mean over its seeds' metrics.jsonl
    records (`mean_curve`)."""
    fig, axes = plt.subplots(1, 2, figsize=(8, 3), layout="constrained")
    for ax, name in zip(axes, ("loss", metric)):
        # Explicit colours: a run keeps its colour in both panels, also where it has no point in one.
        for color, (run, seeds) in zip(itertools.cycle(COLORS), records_by_run.items()):
            ax.plot(*mean_curve([metric_curve(records, "eval", name) for records in seeds]), color=color,
                    linewidth=1, marker=".", markersize=4, label=run)
        ax.set_title(f"validation {name}", fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    legend_outside(axes[1])
    return save_figure(fig, path)


def plot_gaps_over_steps(gaps: dict[str, dict[str, list[tuple[int, float, float | None]]]], path: str) -> str:
    """One panel per part (`gaps`: part -> run -> [(step, mean, half-width of its 95% interval)]): each
    run's difference to its reference against step, in points, with its interval as error bars."""
    fig, axes = plt.subplots(1, len(gaps), figsize=(4 * len(gaps), 3), layout="constrained", squeeze=False)
    for ax, (part, runs) in zip(axes[0], gaps.items()):
        for color, (run, points) in zip(itertools.cycle(COLORS), runs.items()):
            steps, means, halves = zip(*points)
            errors = [0.0 if half is None else 100 * half for half in halves]
            ax.errorbar(steps, [100 * mean for mean in means], yerr=errors, color=color, linewidth=1, marker=".",
                        markersize=4, capsize=2, label=run)
        ax.axhline(0.0, color="0.5", linewidth=0.8)
        ax.set_title(f"validation accuracy - reference's, {part} (points)", fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    legend_outside(axes[0][-1])
    return save_figure(fig, path)
