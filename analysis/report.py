"""Markdown report and PNG plots of a comparison study, from the eval.json of every run's seeds.

`results` maps a run name to the eval.json dicts of its seeds (schema in docs/design.md), in the order the
tables list the runs; `spectra` maps a run name to one seed's spectra.json,
{role: [[s_i / s_1 of layer 0, descending], [layer 1], ...]}.
"""
import itertools
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from analysis import plots, shape, stats  # noqa: E402

# The role whose ranks a run reports: the bidirectional self-attention, where a kernelised kind's rank is
# bounded by its features; for a model without one, its cross-attention (the RNN), bounded alike, or its
# causal self-attention (the causal recall model).
ROLES = ("encoder_self", "cross", "decoder_self")
FEATURE_DIM_PLOT = "accuracy_vs_feature_dim.png"
EFFECTIVE_RANK_PLOT = "accuracy_vs_effective_rank.png"
ROW_ENTROPY_PLOT = "accuracy_vs_row_entropy.png"
SPECTRA_PLOT = "spectra.png"
RESULTS_JSON = "results.json"


def _headline(metrics: tuple[str, ...], evals: list[dict]) -> tuple[float, float | None]:
    return stats.mean_std([result["metrics"][metrics[0]] for result in evals])


def _role(attention: dict) -> str:
    return next(role for role in ROLES if role in attention)


def kind_of(evals: list[dict]) -> str:
    return evals[0]["attention"][_role(evals[0]["attention"])]


def rank_rows(evals: list[dict], role: str | None = None) -> list[dict]:
    """The rows of `role` (default: the reported one) of every seed: one per (seed, layer, head); none
    without attention."""
    role = role or _role(evals[0]["attention"])
    return [row for result in evals for row in result["rank"] if row["role"] == role]


def rank_bound(evals: list[dict]) -> int | None:
    rows = rank_rows(evals)
    return rows[0]["rank_bound"] if rows else None


def _rank_mean(evals: list[dict], field: str, role: str | None = None) -> float:
    return float(np.mean([row[field] for row in rank_rows(evals, role)]))


def _max_numerical_rank(evals: list[dict]) -> int:
    """The largest numerical rank of a single matrix, over every layer, head, example and seed."""
    return max(row["max_numerical_rank"] for row in rank_rows(evals))


def dash_if_none(value, spec: str = "") -> str:
    """`value` formatted by `spec` ("-" for None): a table's cell for a number a run may lack."""
    return "-" if value is None else format(value, spec)


# The shape columns of the rank tables: eval.json's shape metrics (analysis/shape.py) and their formats.
SHAPE_COLUMNS = {"row entropy": ("row_entropy", ".2f"), "fraction of max": ("entropy_fraction", ".3f"),
                 "top-1": ("top1_weight", ".3f"), "top-1 > 0.5": ("top1_above_half", ".3f"),
                 "logit spread": ("logit_spread", ".2f")}
SHAPE_HEADER = " | ".join(SHAPE_COLUMNS) + " |"
SHAPE_ALIGN = "---:|" * len(SHAPE_COLUMNS)
SHAPE_NOTE = ("Row shape (docs/design.md, eval.json's `shape`) of every query row of the same matrices: its entropy "
              "in nats, as a fraction of log(allowed keys), its largest weight, the share of rows whose largest "
              "weight exceeds 0.5, and, for the softmax family, the std of its logits; \"-\": no value (outside "
              "the softmax family, or an eval.json written before shapes).")


def shape_rows(evals: list[dict], role: str | None = None, layer: int | None = None) -> list[dict]:
    """The shape rows over every query row of `role` (default: the reported one), in `layer` if given, of
    every seed: one per (seed, layer, head); none in an eval.json written before shapes."""
    role = role or _role(evals[0]["attention"])
    return [row for result in evals for row in result.get("shape", []) if row["role"] == role
            and row["query_rows"] == shape.ALL_ROWS and layer in (None, row["layer"])]


def _shape_mean(rows: list[dict], metric: str) -> float | None:
    values = [row[metric] for row in rows if row[metric] is not None]
    return float(np.mean(values)) if values else None


def shape_cells(rows: list[dict]) -> str:
    """The SHAPE_COLUMNS cells of shape `rows`, each a mean over them; "-" where no row has a value."""
    return " | ".join(dash_if_none(None if (mean := _shape_mean(rows, metric)) is None else f"{mean:{spec}}")
                      for metric, spec in SHAPE_COLUMNS.values()) + " |"


def accuracy_table(metrics: tuple[str, ...], results: dict[str, list[dict]]) -> str:
    """Test metrics per run (a task's METRICS): the headline as mean ± std over seeds ("-": one seed), the
    others as means; and the value each run picked on validation, where a study picks one."""
    headline, *others = metrics
    picked = any("selected" in evals[0] for evals in results.values())
    lines = [
        f"| run | kind | feature dim | seeds | {headline} (mean ± std) | " + " | ".join(others) + " |"
        + (" selected |" if picked else ""),
        "|---|---|---:|---:|---:|" + "---:|" * len(others) + ("---|" if picked else ""),
    ]
    for name, evals in results.items():
        means = " | ".join(f"{np.mean([result['metrics'][metric] for result in evals]):.4f}" for metric in others)
        lines.append(
            f"| {name} | {kind_of(evals)} | {dash_if_none(rank_bound(evals))} | {len(evals)} | "
            f"{stats.mean_std_text([result['metrics'][metrics[0]] for result in evals])} | {means} |"
            + (f" {evals[0].get('selected', '-')} |" if picked else "")
        )
    return "\n".join(lines)


def pick_table(metric: str, picks: dict[str, dict]) -> str:
    """Each run's candidates (runner.pick_record): the last validation `metric` of each value, on the pick's
    schedule, and the value chosen."""
    fields = {pick["field"] for pick in picks.values()}
    values = list(dict.fromkeys(value for pick in picks.values() for value in pick["validation"]))
    lines = [f"| run | " + " | ".join(f"{'/'.join(fields)}={value}" for value in values) + " | selected |",
             "|---|" + "---:|" * len(values) + "---|"]
    for name, pick in picks.items():
        scores = [pick["validation"].get(value, "") for value in values]
        cells = " | ".join("diverged" if score is None else "" if score == "" else f"{score:.4f}" for score in scores)
        lines.append(f"| {name} | {cells} | {pick['chosen']} |")
    return "\n".join(lines)


def _bound_counts(name: str, evals: list[dict]) -> tuple[int, int, int] | None:
    """(matrices over the rank bound, matrices it can bind on, matrices) of run `name`'s reported role, over
    every layer, head, example and seed; None without a bound."""
    if rank_bound(evals) is None:
        return None
    rows = rank_rows(evals)
    if not all("matrices_over_bound" in row for row in rows):
        raise ValueError(f"{name}: eval.json without per-matrix bound counts (written before they existed); "
                         "evaluate its seeds again with eval.py")
    return tuple(sum(row[field] for row in rows) for field in ("matrices_over_bound", "matrices_bindable", "matrices"))


def _over_bound(counts: tuple[int, int, int] | None) -> str:
    if counts is None:
        return "-"
    over, bindable, matrices = counts
    return "cannot bind" if bindable == 0 else f"{over} / {matrices}"


def _above_head_dim(evals: list[dict], head_dim: int) -> bool:
    return _rank_mean(evals, "numerical_rank") > head_dim


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def rank_table(results: dict[str, list[dict]], head_dim: int | None = None) -> str:
    """Ranks and row shapes of each run's reported role (see ROLES) per run, means over layers, heads and
    seeds.

    With `head_dim`, a last column says whether the mean numerical rank exceeds it: a linear attention
    whose features are as wide as the head could not reach such a rank.
    """
    with_head_dim = head_dim is not None
    lines = [
        "| run | kind | seq len | numerical rank | max numerical rank | effective rank | stable rank | "
        f"{SHAPE_HEADER} rank bound | matrices over bound |"
        + (f" mean > head dim ({head_dim}) |" if with_head_dim else ""),
        f"|---|---|---:|---:|---:|---:|---:|{SHAPE_ALIGN}---:|---:|" + ("---|" if with_head_dim else ""),
    ]
    for name, evals in results.items():
        if not rank_rows(evals):  # no attention, no matrix
            lines.append(f"| {name} | {kind_of(evals)} |" + " - |" * (7 + len(SHAPE_COLUMNS) + with_head_dim))
            continue
        lines.append(
            f"| {name} | {kind_of(evals)} | {_rank_mean(evals, 'seq_len'):g} | "
            f"{_rank_mean(evals, 'numerical_rank'):.2f} | {_max_numerical_rank(evals)} | "
            f"{_rank_mean(evals, 'effective_rank'):.2f} | {_rank_mean(evals, 'stable_rank'):.2f} | "
            f"{shape_cells(shape_rows(evals))} {dash_if_none(rank_bound(evals))} | "
            f"{_over_bound(_bound_counts(name, evals))} |"
            + (f" {_yes_no(_above_head_dim(evals, head_dim))} |" if with_head_dim else "")
        )
    return "\n".join(lines)


def role_rank_table(results: dict[str, list[dict]]) -> str:
    """Every attention role's ranks and row shapes per run (an encoder-decoder has three), means over layers,
    heads, analysed examples and seeds."""
    lines = [f"| run | role | kind | seq len | numerical rank | effective rank | stable rank | {SHAPE_HEADER} "
             "rank bound |", f"|---|---|---|---:|---:|---:|---:|{SHAPE_ALIGN}---:|"]
    for name, evals in results.items():
        for role in (role for role in ROLES if role in evals[0]["attention"]):
            rows = rank_rows(evals, role)
            if rows:
                mean = {field: _rank_mean(evals, field, role) for field in
                        ("seq_len", "numerical_rank", "effective_rank", "stable_rank")}
                lines.append(f"| {name} | {role} | {evals[0]['attention'][role]} | {mean['seq_len']:g} | "
                             f"{mean['numerical_rank']:.2f} | {mean['effective_rank']:.2f} | "
                             f"{mean['stable_rank']:.2f} | {shape_cells(shape_rows(evals, role))} "
                             f"{dash_if_none(rows[0]['rank_bound'])} |")
    return "\n".join(lines)


def layer_ranks(evals: list[dict]) -> dict[int, dict]:
    """Layer -> the rank metrics of the reported role's rows in it, means over heads, examples and seeds."""
    rows = rank_rows(evals)
    return {layer: {field: float(np.mean([row[field] for row in rows if row["layer"] == layer]))
                    for field in ("numerical_rank", "effective_rank", "stable_rank")}
            for layer in sorted({row["layer"] for row in rows})}


def layer_rank_table(results: dict[str, list[dict]]) -> str:
    """Each layer's ranks and row shapes of each run's reported role (see ROLES), means over heads, analysed
    examples and seeds: every layer of every run, none chosen per run."""
    lines = [f"| run | kind | layer | numerical rank | effective rank | stable rank | {SHAPE_HEADER}",
             f"|---|---|---:|---:|---:|---:|{SHAPE_ALIGN}"]
    for name, evals in results.items():
        for layer, mean in layer_ranks(evals).items():
            lines.append(f"| {name} | {kind_of(evals)} | {layer} | {mean['numerical_rank']:.2f} | "
                         f"{mean['effective_rank']:.2f} | {mean['stable_rank']:.2f} | "
                         f"{shape_cells(shape_rows(evals, layer=layer))}")
    return "\n".join(lines)


def rank_note(results: dict[str, list[dict]], head_dim: int | None = None) -> str:
    """One paragraph of facts read off the rank table: bounds kept or broken, softmax against head_dim."""
    sentences = []
    for name, evals in results.items():
        counts = _bound_counts(name, evals)
        if counts is not None and counts[1] == 0:
            sentences.append(f"{name}: its bound {rank_bound(evals)} cannot bind: no matrix has both sides longer.")
        elif counts is not None:
            sentences.append(f"{name}: {counts[0]} of {counts[2]} matrices above its bound {rank_bound(evals)}.")
        elif kind_of(evals) == "softmax" and head_dim is not None:
            sentences.append(f"{name}: mean numerical rank {_rank_mean(evals, 'numerical_rank'):.2f}, "
                             f"{'above' if _above_head_dim(evals, head_dim) else 'not above'} the head dim {head_dim}.")
    return " ".join(sentences)


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
        bound = rank_bound(evals)
        if bound is None:
            color = next(colors)
            ax.axhline(mean, color=color, linestyle="--", linewidth=1, label=name)
            if std is not None:
                ax.axhspan(mean - std, mean + std, color=color, alpha=0.15)
        else:
            by_kind.setdefault(kind_of(evals), []).append((bound, mean, std or 0.0))
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
        if not rank_rows(evals):
            continue
        mean, std = _headline(metrics, evals)
        effective_rank = _rank_mean(evals, "effective_rank")
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
    return _shape_mean(shape_rows([result], role, layer), "row_entropy")


def plot_accuracy_vs_row_entropy(metrics: tuple[str, ...], results: dict[str, list[dict]], path: str,
                                 levels: dict[str, float] | None = None) -> str:
    """Headline metric against the mean row entropy of the reported role, in layer 0 (left) and over every
    layer (right): a point per seed, a colour per run; runs whose eval.json has no shape rows are left out."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True, layout="constrained")
    for ax, layer in zip(axes, (0, None)):
        ax.set_prop_cycle(color=plots.COLORS)
        for name, evals in results.items():
            role = _role(evals[0]["attention"])
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
        values = np.asarray(spectrum[_role(spectrum)][0])
        length = max(length, len(values))
        # Exact zeros (beyond every matrix's length) have no place on a log axis.
        ax.plot(np.arange(1, len(values) + 1), np.where(values > 0, values, np.nan), label=name)
    bounds = {rank_bound(results[name]) for name in spectra if name in results}
    for bound in sorted(bound for bound in bounds if bound is not None and bound < length):
        ax.axvline(bound, color="gray", linestyle=":", linewidth=1)
        ax.annotate(f"m={bound}", (bound, 1.0), xytext=(2, -10), textcoords="offset points", fontsize=7)
    ax.set_yscale("log")
    ax.set_xlabel("singular value index")
    ax.set_ylabel(r"$\sigma_i / \sigma_1$ (layer 0)")
    plots.legend_outside(ax)
    return plots.save_figure(fig, path)


def rank_study_sections(metrics: tuple[str, ...], results: dict[str, list[dict]], spectra: dict[str, dict],
                        out_dir: str, head_dim: int | None, levels: dict[str, float] | None = None) -> list[str]:
    """Tables and plots of a study of accuracy (a task's METRICS) against feature dim and rank: what a task's
    report_sections returns, called with its metrics (and its accuracy plots' fixed `levels`, chance)."""
    plot_accuracy_vs_feature_dim(metrics, results, os.path.join(out_dir, FEATURE_DIM_PLOT), levels)
    plot_accuracy_vs_effective_rank(metrics, results, os.path.join(out_dir, EFFECTIVE_RANK_PLOT), levels)
    images = [(f"{metrics[0]} against feature dim", FEATURE_DIM_PLOT),
              (f"{metrics[0]} against effective rank", EFFECTIVE_RANK_PLOT)]
    if any(shape_rows(evals) for evals in results.values()):  # eval.json written before shapes has none
        plot_accuracy_vs_row_entropy(metrics, results, os.path.join(out_dir, ROW_ENTROPY_PLOT), levels)
        images.append((f"{metrics[0]} against row entropy", ROW_ENTROPY_PLOT))
    if spectra:
        plot_spectra_by_run(results, spectra, os.path.join(out_dir, SPECTRA_PLOT))
        images.append(("layer-0 singular values", SPECTRA_PLOT))
    return [
        "## Test metrics\n\nFeature dim: the rank bound of the encoder self-attention (of the cross-attention "
        "for a model without one, the RNN; \"-\": none). "
        "Std over seeds with ddof=1 (\"-\": one seed); the other metrics are means over seeds.",
        accuracy_table(metrics, results),
        "## Attention rank (encoder self-attention; cross-attention for the RNN)\n\nMeans over layers, "
        "heads and seeds of each run; each matrix's ranks are means over the analysed examples (docs/design.md). "
        "\"matrices over bound\": of the matrices of every layer, head, analysed example and seed, those whose "
        "numerical rank exceeds the kind's rank bound; \"cannot bind\": the bound is at least the shorter side "
        "of every matrix. " + SHAPE_NOTE,
        rank_table(results, head_dim),
        rank_note(results, head_dim),
        "## Attention rank by layer\n\nThe reported role's ranks and row shapes in each layer (the table above "
        "averages them, the same for every run), means over heads, analysed examples and seeds.",
        layer_rank_table(results),
        *(["## Attention rank by role\n\nEvery role of each run, means over layers, heads, analysed examples "
           "and seeds; a causal role has no bound (its triangular mask lifts it).", role_rank_table(results)]
          if any(len(evals[0]["attention"]) > 1 for evals in results.values()) else []),
        "## Plots",
        *(f"![{title}]({file})" for title, file in images),
    ]


def _epochs(result: dict) -> str:
    """The passes over the training set a seed made ("-" where its config gives no dataset.train_size)."""
    config = result["config"]
    size = config.get("dataset", {}).get("train_size")
    if not size:
        return "-"
    batch = config["per_device_batch_size"] * result.get("runtime", {}).get("device_count", 1)
    return f"{result['step'] * batch / size:.1f}"


def stopping_table(results: dict[str, list[dict]]) -> str:
    """The runs that stop at a validation value (config.eval.stop_metric, stop_at): per seed, the step it
    stopped at (its eval.json's), in passes over the training set, its last validation value, and the seeds
    whose last validation reached the value (a stopped seed's last is the one that stopped it)."""
    lines = ["| run | stops at | steps (per seed) | epochs (per seed) | validation at the end | reached |",
             "|---|---|---|---|---|---:|"]
    for name, evals in results.items():
        stop = evals[0].get("config", {}).get("eval", {})
        if not stop.get("stop_metric"):
            continue
        last = [result.get("validation", {}).get(stop["stop_metric"]) for result in evals]
        reached = sum(value is not None and value >= stop["stop_at"] for value in last)
        lines.append(f"| {name} | {stop['stop_metric']} >= {stop['stop_at']:g} | "
                     f"{', '.join(f'{result['step']:,}' for result in evals)} | "
                     f"{', '.join(_epochs(result) for result in evals)} | "
                     f"{', '.join(dash_if_none(value, '.4f') for value in last)} | {reached}/{len(evals)} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def _term_values(term: str, metric: str, results: dict[str, list[dict]]) -> dict[int, float] | None:
    """Seed -> the term's value (grids.Contrast): the run's test `metric`, or at "run@step" its validation
    `metric` at that step; None where the run, or a seed's evaluation at that step, is not in `results`."""
    run, _, step = term.partition("@")
    values = {}
    for result in results.get(run, []):
        if not step:
            values[result["config"]["seed"]] = result["metrics"][metric]
            continue
        lines = [line for line in result.get("validation_curve", []) if line["step"] == int(step) and metric in line]
        if not lines:
            return None
        values[result["config"]["seed"]] = lines[-1][metric]
    return values or None


def _formula(terms: dict[str, float]) -> str:
    signed = (f"{'-' if weight < 0 else '+'} {'' if abs(weight) == 1 else f'{abs(weight):g} x '}{term}"
              for term, weight in terms.items())
    return " ".join(signed).removeprefix("+ ")


def contrast_table(metric: str, contrasts: tuple, results: dict[str, list[dict]]) -> str:
    """A row per contrast (grids.Contrast) of the study: its formula, the seeds every term has, the mean in
    points (100 x `metric`) and its 95% interval over those seeds; "not run yet" where a term is missing."""
    lines = ["| question | contrast | seeds | mean (points) | 95% CI (points) |", "|---|---|---:|---:|---|"]
    for contrast in contrasts:
        values = [_term_values(term, metric, results) for term in contrast.terms]
        cells = "- | not run yet | -"
        if all(values):
            mean, half_width, seeds = stats.paired_combination(list(zip(contrast.terms.values(), values)))
            interval = "-" if half_width is None else f"{100 * (mean - half_width):+.1f} to {100 * (mean + half_width):+.1f}"
            cells = f"{seeds} | {100 * mean:+.1f} | {interval}"
        lines.append(f"| {contrast.question} | {_formula(contrast.terms)} | {cells} |")
    return "\n".join(lines)


def _prediction_sections(metric: str, results: dict[str, list[dict]], contrasts: tuple, verdict: str) -> list[str]:
    """The report's opening sections: the study's contrasts, with its verdict under them, or the verdict alone."""
    if not contrasts:
        return [f"## Which prediction held\n\nWritten once every run was in: {verdict}"] if verdict else []
    return [f"## Predictions against results\n\nEach prediction above as one number: a weighted sum of runs' {metric}, "
            f"seed by seed over the seeds every term has (a run's test value, or run@step: its validation value at "
            f"that step), in points (100 x the metric), with its 95% interval (Student's t, n - 1 degrees of freedom).",
            contrast_table(metric, contrasts, results),
            f"Which held, written once every contrast was in: {verdict}" if verdict else ""]


def write_report(
    task,
    preset: str,
    command: str,
    results: dict[str, list[dict]],
    spectra: dict[str, dict],
    out_dir: str,
    head_dim: int | None = None,
    picks: dict[str, dict] | None = None,
    notes: str = "",
    contrasts: tuple = (),
    verdict: str = "",
) -> str:
    """Writes out_dir/report.md of `task` (tasks/interface.py), its PNG plots and results.json (every run's
    per-seed results, the numbers behind the tables); returns the report's path. `picks`: each run's
    candidates where the study picks a field on validation (runner.pick_record); `notes`: the study's own
    text (grids.Study.notes), under the command; `contrasts`: its predictions as numbers (grids.Contrast);
    `verdict`: which of them held (grids.Study.verdict), under their table."""
    os.makedirs(out_dir, exist_ok=True)
    body = task.report_sections(results, spectra, out_dir, head_dim)
    body[:0] = _prediction_sections(task.METRICS[0], results, contrasts, verdict)
    if stopping := stopping_table(results):
        body += ["## Early stopping\n\nRuns that stop at the first periodic validation reaching a value "
                 "(config.eval.stop_metric, stop_at): the step each seed stopped at, in passes over the training "
                 "set, its last validation value, and the seeds whose last validation reached the value.",
                 stopping]
    if picks:
        body += [f"## Picked on validation\n\nEach run's {task.METRICS[0]} on the validation split at the end of "
                 "each candidate's schedule (seed 0; \"diverged\": it did not finish); the seeds above trained "
                 "at the selected value.", pick_table(task.METRICS[0], picks)]
    if os.path.exists(os.path.join(out_dir, plots.CURVES_PLOT)):  # compare.py draws it from metrics.jsonl
        body.append(f"## Validation curves\n\n![validation loss and {task.METRICS[0]} against step, mean over "
                    f"seeds]({plots.CURVES_PLOT})")
    if os.path.exists(os.path.join(out_dir, plots.ATTENTION_PLOT)):  # compare.py draws it from the workdirs
        body.append(f"## Attention maps\n\nOne test example (the first of the rank sample: the same one for runs that "
                    f"share their data), seed 0 of each run, every layer, one head: ![attention maps]({plots.ATTENTION_PLOT})")
    sections = [f"# {task.NAME} comparison, preset {preset}", f"Produced by\n\n```\n{command}\n```", notes, *body]
    with open(os.path.join(out_dir, RESULTS_JSON), "w") as f:
        json.dump(results, f, indent=1)
    path = os.path.join(out_dir, "report.md")
    with open(path, "w") as f:
        f.write("\n\n".join(section for section in sections if section) + "\n")
    return path
