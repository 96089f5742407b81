"""Markdown report of a comparison study (report.md, its plots and results.json), from the eval.json of every
run's seeds: the tables of analysis/tables.py, the plots of analysis/rank_plots.py.

`results` maps a run name to the eval.json dicts of its seeds (schema in docs/design.md), in the order the
tables list the runs; `spectra` maps a run name to one seed's spectra.json,
{role: [[s_i / s_1 of layer 0, descending], [layer 1], ...]}.
"""
import json
import os

from analysis import plots, rank_plots, tables

RESULTS_JSON = "results.json"


def rank_study_sections(metrics: tuple[str, ...], results: dict[str, list[dict]], spectra: dict[str, dict],
                        out_dir: str, head_dim: int | None, levels: dict[str, float] | None = None) -> list[str]:
    """Tables and plots of a study of accuracy (a task's METRICS) against feature dim and rank: what a task's
    report_sections returns, called with its metrics (and its accuracy plots' fixed `levels`, chance)."""
    rank_plots.plot_accuracy_vs_feature_dim(metrics, results, os.path.join(out_dir, rank_plots.FEATURE_DIM_PLOT),
                                            levels)
    rank_plots.plot_accuracy_vs_effective_rank(metrics, results,
                                               os.path.join(out_dir, rank_plots.EFFECTIVE_RANK_PLOT), levels)
    images = [(f"{metrics[0]} against feature dim", rank_plots.FEATURE_DIM_PLOT),
              (f"{metrics[0]} against effective rank", rank_plots.EFFECTIVE_RANK_PLOT)]
    if any(tables.shape_rows(evals) for evals in results.values()):  # eval.json written before shapes has none
        rank_plots.plot_accuracy_vs_row_entropy(metrics, results, os.path.join(out_dir, rank_plots.ROW_ENTROPY_PLOT),
                                                levels)
        images.append((f"{metrics[0]} against row entropy", rank_plots.ROW_ENTROPY_PLOT))
    if spectra:
        rank_plots.plot_spectra_by_run(results, spectra, os.path.join(out_dir, rank_plots.SPECTRA_PLOT))
        images.append(("layer-0 singular values", rank_plots.SPECTRA_PLOT))
    signed = tables.signed_rows_table(results)
    return [
        "## Test metrics\n\nFeature dim: the rank bound of the encoder self-attention (of the cross-attention "
        "for a model without one, the RNN; \"-\": none). "
        "Std over seeds with ddof=1 (\"-\": one seed); the other metrics are means over seeds.",
        tables.accuracy_table(metrics, results),
        "## Attention rank (encoder self-attention; cross-attention for the RNN)\n\nMeans over layers, "
        "heads and seeds of each run; each matrix's ranks are means over the analysed examples (docs/design.md). "
        "\"matrices over bound\": of the matrices of every layer, head, analysed example and seed, those whose "
        "numerical rank exceeds the kind's rank bound; \"cannot bind\": the bound is at least the shorter side "
        "of every matrix. " + tables.SHAPE_NOTE,
        tables.rank_table(results, head_dim),
        tables.rank_note(results, head_dim),
        "## Attention rank by layer\n\nThe reported role's ranks and row shapes in each layer (the table above "
        "averages them, the same for every run), means over heads, analysed examples and seeds.",
        tables.layer_rank_table(results),
        *(["## Attention rank by role\n\nEvery role of each run, means over layers, heads, analysed examples "
           "and seeds; a causal role has no bound (its triangular mask lifts it).", tables.role_rank_table(results)]
          if any(len(evals[0]["attention"]) > 1 for evals in results.values()) else []),
        *(["## Signed rows\n\nThe reported role's weights, all of its query rows: the share of their absolute mass "
           "below 0 and how far each row sums from 1 (both 0 for rows that are distributions), means over layers, "
           "heads and seeds.", signed] if signed else []),
        "## Plots",
        *(f"![{title}]({file})" for title, file in images),
    ]


def _prediction_sections(metric: str, results: dict[str, list[dict]], contrasts: tuple, verdict: str) -> list[str]:
    """The report's opening sections: the study's contrasts, with its verdict under them, or the verdict alone."""
    if not contrasts:
        return [f"## Which prediction held\n\nWritten once every run was in: {verdict}"] if verdict else []
    return [f"## Predictions against results\n\nEach prediction above as one number: a weighted sum of runs' {metric}, "
            f"seed by seed over the seeds every term has (a run's test value, or run@step: its validation value at "
            f"that step), in points (100 x the metric), with its 95% interval (Student's t, n - 1 degrees of freedom).",
            tables.contrast_table(metric, contrasts, results),
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
    if stopping := tables.stopping_table(results):
        body += ["## Early stopping\n\nRuns that stop at the first periodic validation reaching a value "
                 "(config.eval.stop_metric, stop_at): the step each seed stopped at, in passes over the training "
                 "set, its last validation value, and the seeds whose last validation reached the value.",
                 stopping]
    if picks:
        body += [f"## Picked on validation\n\nEach run's {task.METRICS[0]} on the validation split at the end of "
                 "each candidate's schedule (seed 0; \"diverged\": it did not finish); the seeds above trained "
                 "at the selected value.", tables.pick_table(task.METRICS[0], picks)]
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
