"""A study's contrasts (grids.Contrast): checked against its runs when the study is built, computed seed by
seed in the report, against a t interval written here with numpy and the t quantile of 2 degrees of freedom."""
import numpy as np
import pytest

from analysis import stats, tables
from configs import grids
from configs import mlm

T_975_2DF = 4.302652729911275  # Student's t, 97.5% quantile, 2 degrees of freedom


def _results(accuracies: dict[str, list[float]], curves: dict[str, list[dict[int, float]]] | None = None) -> dict:
    curves = curves or {}
    return {run: [{"config": {"seed": seed}, "metrics": {"masked_accuracy": value},
                   "validation_curve": [{"step": step, "masked_accuracy": at} for step, at in
                                        curves.get(run, [{}] * len(values))[seed].items()]}
                  for seed, value in enumerate(values)]
            for run, values in accuracies.items()}


def _row(table: str, question: str) -> list[str]:
    (line,) = [line for line in table.splitlines() if line.startswith(f"| {question} |")]
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_a_gap_change_pairs_four_runs_by_seed():
    accuracies = {"a": [0.50, 0.52, 0.47], "b": [0.40, 0.45, 0.41], "c": [0.60, 0.61, 0.58], "d": [0.30, 0.36, 0.33]}
    contrast = grids.Contrast("q", {"a": 1.0, "b": -1.0, "c": -1.0, "d": 1.0})
    per_seed = np.array([a - b - c + d for a, b, c, d in zip(*accuracies.values())])
    half_width = T_975_2DF * per_seed.std(ddof=1) / np.sqrt(3)
    mean, computed_half_width, seeds = stats.paired_combination(
        [(weight, {seed: value for seed, value in enumerate(accuracies[term])})
         for term, weight in contrast.terms.items()])
    assert seeds == 3 and mean == pytest.approx(per_seed.mean()) and computed_half_width == pytest.approx(half_width)
    cells = _row(tables.contrast_table("masked_accuracy", (contrast,), _results(accuracies)), "q")
    assert cells[1:] == ["a - b - c + d", "3", f"{100 * per_seed.mean():+.1f}",
                         f"{100 * (per_seed.mean() - half_width):+.1f} to {100 * (per_seed.mean() + half_width):+.1f}"]


def test_step_terms_read_validation_curves_and_missing_runs_are_not_run_yet():
    curves = {"a": [{500: 0.2, 1000: 0.3}, {500: 0.25, 1000: 0.32}], "b": [{500: 0.1, 1000: 0.3}, {500: 0.2, 1000: 0.2}]}
    results = _results({"a": [0.9, 0.9], "b": [0.1, 0.1]}, curves)
    over_steps = grids.Contrast("speed", {"a@1000": 1.0, "b@1000": -1.0, "a@500": -1.0, "b@500": 1.0})
    absent = grids.Contrast("absent", {"a": 1.0, "c": -1.0})
    table = tables.contrast_table("masked_accuracy", (over_steps, absent), results)
    per_seed = [(0.3 - 0.3) - (0.2 - 0.1), (0.32 - 0.2) - (0.25 - 0.2)]
    assert _row(table, "speed")[3] == f"{100 * np.mean(per_seed):+.1f}"
    assert _row(table, "absent")[2:] == ["-", "not run yet", "-"]
    # A seed's curve without the step: the term is missing, not zero.
    results["b"][1]["validation_curve"] = [line for line in results["b"][1]["validation_curve"] if line["step"] != 500]
    assert _row(tables.contrast_table("masked_accuracy", (over_steps,), results), "speed")[3] == "not run yet"


def test_a_study_refuses_contrasts_of_runs_it_does_not_have_or_mixed_terms():
    runs = [grids.Run("softmax", {}), grids.Run("linear", {})]
    with pytest.raises(ValueError, match=r"names lineer, not runs of the study \(linear, softmax\)"):
        grids.Study("c.py", {}, runs, seeds=1, contrasts=(grids.Contrast("q", {"lineer": 1.0}),))
    for terms in ({"linear@500": 1.0, "softmax": -1.0}, {"linear@last": 1.0}):
        with pytest.raises(ValueError, match="all runs or all run@step"):
            grids.Study("c.py", {}, runs, seeds=1, contrasts=(grids.Contrast("q", terms),))


def test_the_rank_or_shape_report_puts_every_prediction_in_a_contrast():
    study = mlm.STUDIES["rank_or_shape"]()
    terms = {term.partition("@")[0] for contrast in study.contrasts for term in contrast.terms}
    assert terms == {run.name for run in study.runs}  # every arm answers some prediction
