"""Markdown tables of a comparison study, and the numbers they read, from the eval.json of every run's seeds.

`results` maps a run name to the eval.json dicts of its seeds (schema in docs/design.md), in the order the
tables list the runs. No Matplotlib here: the plots are analysis/rank_plots.py's, the report analysis/report.py's.
"""
import numpy as np

from analysis import shape, stats

# The role whose ranks a run reports: the bidirectional self-attention, where a kernelised kind's rank is
# bounded by its features; for a model without one, its cross-attention (the RNN), bounded alike, or its
# causal self-attention (the causal recall model).
ROLES = ("encoder_self", "cross", "decoder_self")


def reported_role(attention: dict) -> str:
    """The first of ROLES in an eval.json's `attention` (role -> kind): the one whose ranks its run reports."""
    return next(role for role in ROLES if role in attention)


def kind_of(evals: list[dict]) -> str:
    return evals[0]["attention"][reported_role(evals[0]["attention"])]


def rank_rows(evals: list[dict], role: str | None = None) -> list[dict]:
    """The rows of `role` (default: the reported one) of every seed: one per (seed, layer, head); none
    without attention."""
    role = role or reported_role(evals[0]["attention"])
    return [row for result in evals for row in result["rank"] if row["role"] == role]


def rank_bound(evals: list[dict]) -> int | None:
    rows = rank_rows(evals)
    return rows[0]["rank_bound"] if rows else None


def rank_mean(evals: list[dict], field: str, role: str | None = None) -> float:
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
    role = role or reported_role(evals[0]["attention"])
    return [row for result in evals for row in result.get("shape", []) if row["role"] == role
            and row["query_rows"] == shape.ALL_ROWS and layer in (None, row["layer"])]


def shape_mean(rows: list[dict], metric: str) -> float | None:
    values = [row[metric] for row in rows if row[metric] is not None]
    return float(np.mean(values)) if values else None


def shape_cells(rows: list[dict]) -> str:
    """The SHAPE_COLUMNS cells of shape `rows`, each a mean over them; "-" where no row has a value."""
    return " | ".join(dash_if_none(None if (mean := shape_mean(rows, metric)) is None else f"{mean:{spec}}")
                      for metric, spec in SHAPE_COLUMNS.values()) + " |"


def signed_rows_table(results: dict[str, list[dict]]) -> str:
    """Per run, where any run records them: the share of its weights' absolute mass below 0 and the mean |row sum
    - 1| over the reported role's query rows, means over layers, heads and seeds ("-": an eval.json written before
    the fields); empty where none records them."""
    signed = {name: [row for row in shape_rows(evals) if "negative_mass" in row] for name, evals in results.items()}
    if not any(signed.values()):
        return ""
    lines = ["| run | kind | negative mass | mean abs(row sum - 1) |", "|---|---|---:|---:|"]
    for name, rows in signed.items():
        cells = [dash_if_none(shape_mean(rows, metric) if rows else None, ".3f")
                 for metric in ("negative_mass", "row_sum_deviation")]
        lines.append(f"| {name} | {kind_of(results[name])} | {' | '.join(cells)} |")
    return "\n".join(lines)


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
    return rank_mean(evals, "numerical_rank") > head_dim


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
            f"| {name} | {kind_of(evals)} | {rank_mean(evals, 'seq_len'):g} | "
            f"{rank_mean(evals, 'numerical_rank'):.2f} | {_max_numerical_rank(evals)} | "
            f"{rank_mean(evals, 'effective_rank'):.2f} | {rank_mean(evals, 'stable_rank'):.2f} | "
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
                mean = {field: rank_mean(evals, field, role) for field in
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
            sentences.append(f"{name}: mean numerical rank {rank_mean(evals, 'numerical_rank'):.2f}, "
                             f"{'above' if _above_head_dim(evals, head_dim) else 'not above'} the head dim {head_dim}.")
    return " ".join(sentences)


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


def term_values(term: str, metric: str, results: dict[str, list[dict]]) -> dict[int, float] | None:
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
        values = [term_values(term, metric, results) for term in contrast.terms]
        cells = "- | not run yet | -"
        if all(values):
            mean, half_width, seeds = stats.paired_combination(list(zip(contrast.terms.values(), values)))
            interval = "-" if half_width is None else f"{100 * (mean - half_width):+.1f} to {100 * (mean + half_width):+.1f}"
            cells = f"{seeds} | {100 * mean:+.1f} | {interval}"
        lines.append(f"| {contrast.question} | {_formula(contrast.terms)} | {cells} |")
    return "\n".join(lines)
