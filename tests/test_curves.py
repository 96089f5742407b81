"""metrics.jsonl as pictures: a run's train and validation curves, and a study's validation curves overlaid."""
import json
import os

import numpy as np
import pytest

from analysis import plots
from configs import translation as translation_config
from scripts import compare
from studies import jobs, runner
from training import loop, metrics

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CONFIG = translation_config.get_config("tiny")  # what the writer records besides the lines


def _write_metrics(workdir, lines, resume_step=0) -> None:
    """Through the writer itself, so that the tests read what a run writes (W&B is off in the tests)."""
    os.makedirs(workdir, exist_ok=True)
    writer = metrics.MetricsWriter(str(workdir), _CONFIG, resume_step)
    for step, split, values in lines:
        writer.write(step, split, 0.5 * step, values)


def _translation_lines(loss_at_10=2.0):
    """Train lines every 5 steps and evaluations every 10, as the tiny translation config logs them."""
    train = [(step, "train", {"loss": 3.0 - 0.1 * step, "token_accuracy": 0.01 * step, "exact_match": 0.0,
                              "learning_rate": 1e-3, "grad_norm": 1.0, "steps_per_sec": 9.0})
             for step in (5, 10, 15, 20)]
    evals = [(10, "eval", {"loss": loss_at_10, "token_accuracy": 0.3, "exact_match": 0.1}),
             (20, "eval", {"loss": 1.5, "token_accuracy": 0.6, "exact_match": 0.4})]
    return sorted(train + evals, key=lambda line: line[0])


def _assert_curve(curve, steps, values) -> None:
    np.testing.assert_array_equal(curve[0], steps)
    np.testing.assert_allclose(curve[1], values)


def test_run_curves_are_the_loss_then_the_evaluations_metrics_per_split(tmp_path):
    _write_metrics(tmp_path, _translation_lines())
    curves = plots.run_curves(metrics.read_metrics(str(tmp_path)))
    assert list(curves) == ["loss", "token_accuracy", "exact_match"]  # no learning_rate, grad_norm, ...
    assert all(list(splits) == ["train", "eval"] for splits in curves.values())
    _assert_curve(curves["loss"]["train"], [5, 10, 15, 20], [2.5, 2.0, 1.5, 1.0])
    _assert_curve(curves["loss"]["eval"], [10, 20], [2.0, 1.5])
    _assert_curve(curves["token_accuracy"]["train"], [5, 10, 15, 20], [0.05, 0.1, 0.15, 0.2])
    _assert_curve(curves["exact_match"]["eval"], [10, 20], [0.1, 0.4])


def test_a_run_without_evaluation_lines_has_its_train_loss_only(tmp_path):
    _write_metrics(tmp_path, [line for line in _translation_lines() if line[1] == "train"])
    curves = plots.run_curves(metrics.read_metrics(str(tmp_path)))
    assert list(curves) == ["loss"] and list(curves["loss"]) == ["train"]
    path = plots.plot_run_curves(metrics.read_metrics(str(tmp_path)), str(tmp_path / "plots" / "curves.png"), "x")
    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE


def test_plot_run_curves_writes_a_small_png_titled_with_the_loss_on_a_log_axis(tmp_path, monkeypatch):
    _write_metrics(tmp_path, _translation_lines())
    figures = []
    save = plots.save_figure
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig) or save(fig, path))
    path = plots.plot_run_curves(metrics.read_metrics(str(tmp_path)), str(tmp_path / "plots" / plots.CURVES_PLOT),
                                 "runs/x | linear | step 20")
    assert path == str(tmp_path / "plots" / "curves.png")
    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE
    assert os.path.getsize(path) < 60_000
    [figure] = figures
    assert figure.get_suptitle() == "runs/x | linear | step 20"
    scales = {ax.get_title(): ax.get_yscale() for ax in figure.axes}
    assert scales == {"loss": "log", "token_accuracy": "linear", "exact_match": "linear"}


def test_a_runs_title_names_its_workdir_its_kinds_and_the_step():
    assert plots.run_title("runs/x/", {"encoder_self": "linear"}, 20) == "runs/x | linear | step 20"
    assert (plots.run_title("runs/y", {"encoder_self": "softmax", "cross": "linear"}, 5) ==
            "runs/y | encoder_self softmax, cross linear | step 5")
    assert plots.run_title("runs/rnn", {}, 7) == "runs/rnn | no attention | step 7"


def test_no_file_reads_as_no_lines_and_a_resume_drops_the_lines_after_its_step(tmp_path):
    assert metrics.read_metrics(str(tmp_path)) == []
    _write_metrics(tmp_path, _translation_lines())
    written = metrics.read_metrics(str(tmp_path))
    metrics.MetricsWriter(str(tmp_path), _CONFIG, 10)
    assert metrics.read_metrics(str(tmp_path)) == [record for record in written if record["step"] <= 10]


def test_mean_curve_averages_seeds_over_the_steps_they_share():
    full = (np.array([10, 20, 30]), np.array([3.0, 2.0, 1.0]))
    cut_short = (np.array([10, 20]), np.array([1.0, 1.0]))
    no_point = (np.array([], int), np.array([]))
    _assert_curve(plots.mean_curve([full, cut_short, no_point]), [10, 20], [2.0, 1.5])
    _assert_curve(plots.mean_curve([full]), [10, 20, 30], [3.0, 2.0, 1.0])
    _assert_curve(plots.mean_curve([no_point]), [], [])


def _finished_run(workdir, lines, steps=20) -> None:
    """What jobs.is_finished reads, and the run's metrics.jsonl."""
    _write_metrics(workdir, lines)
    for name, content in (("config.json", {"num_train_steps": steps}), ("eval.json", {"step": steps})):
        with open(os.path.join(workdir, name), "w") as f:
            json.dump(content, f)


def test_overlay_of_two_runs_takes_each_runs_finished_seeds(tmp_path):
    workdirs = {run: [str(tmp_path / run / f"seed{seed}") for seed in range(2)] for run in ("softmax", "linear")}
    _finished_run(workdirs["softmax"][0], _translation_lines(loss_at_10=2.0))
    _finished_run(workdirs["softmax"][1], _translation_lines(loss_at_10=3.0))
    _finished_run(workdirs["linear"][0], [line for line in _translation_lines() if line[1] == "train"])
    _write_metrics(workdirs["linear"][1], _translation_lines())  # unfinished: no eval.json, left out
    records = {run: runner.run_record(seed_workdirs)["curves"] for run, seed_workdirs in workdirs.items()}
    assert [len(seeds) for seeds in records.values()] == [2, 1]
    softmax = [plots.metric_curve(seed, "eval", "loss") for seed in records["softmax"]]
    _assert_curve(plots.mean_curve(softmax), [10, 20], [2.5, 1.5])
    assert len(plots.metric_curve(records["linear"][0], "eval", "loss")[0]) == 0  # no evaluation line

    path = plots.plot_validation_curves(records, "exact_match", str(tmp_path / "report" / plots.CURVES_PLOT))
    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE
    assert os.path.getsize(path) < 100_000


_RANK_ROW = {"role": "encoder_self", "layer": 0, "head": 0, "seq_len": 128, "numerical_rank": 30.0,
             "max_numerical_rank": 31,
             "effective_rank": 20.0, "stable_rank": 3.0, "rank_bound": None}


def _fake_train(command, workdir, env, evals=2):
    """Stands in for jobs.train: an MLM run of 20 steps without attention analysis, with `evals` periodic
    evaluations (the last at step 10 when there is one)."""
    kind = next(arg.split("=")[1] for arg in command if arg.startswith("--config.attention.name="))
    _write_metrics(workdir, [(20, "train", {"masked_accuracy": 0.2, "loss": 3.0, "perplexity": 20.0}),
                             (10, "eval", {"masked_accuracy": 0.2, "loss": 2.9, "perplexity": 18.2}),
                             (20, "eval", {"masked_accuracy": 0.3, "loss": 2.5, "perplexity": 12.2})][:evals + 1])
    for name, content in (("config.json", {"num_train_steps": 20, "model": {"d_model": 64, "num_heads": 2}}),
                          ("eval.json", {"step": 20, "attention": {"encoder_self": kind}, "rank": [_RANK_ROW],
                                         "config": {"seed": 0, "model": {"d_model": 64, "num_heads": 2}},
                                         "metrics": {"masked_accuracy": 0.3, "loss": 2.5, "perplexity": 12.2}})):
        with open(os.path.join(workdir, name), "w") as f:
            json.dump(content, f)
    return True


def test_compare_writes_the_overlay_into_the_report_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(jobs, "train", _fake_train)
    compare.main(["--task=mlm", "--only=softmax,linear", "--seeds=1", "--jobs=1",
                  f"--runs_dir={tmp_path / 'runs'}", f"--reports_dir={tmp_path / 'reports'}"])
    with open(tmp_path / "reports" / "mlm" / plots.CURVES_PLOT, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE
    assert "## Validation curves" in (tmp_path / "reports" / "mlm" / "report.md").read_text()


def test_one_evaluation_per_run_draws_no_curves_and_the_report_links_none(tmp_path, monkeypatch):
    test_compare_writes_the_overlay_into_the_report_directory(tmp_path, monkeypatch)  # an earlier curves.png
    # Trained again, elsewhere: without the earlier runs.json, whose recorded seeds would not train again.
    os.remove(tmp_path / "reports" / "mlm" / runner.RUNS_JSON)
    monkeypatch.setattr(jobs, "train", lambda command, workdir, env: _fake_train(command, workdir, env, evals=1))
    compare.main(["--task=mlm", "--only=softmax,linear", "--seeds=1", "--jobs=1",
                  f"--runs_dir={tmp_path / 'runs2'}", f"--reports_dir={tmp_path / 'reports'}"])
    assert not (tmp_path / "reports" / "mlm" / plots.CURVES_PLOT).exists()
    assert "curves" not in (tmp_path / "reports" / "mlm" / "report.md").read_text()


@pytest.mark.parametrize("draw", [True, False])
def test_a_run_draws_its_curves_when_config_eval_plots(tiny_config, tmp_path, monkeypatch, draw):
    config = tiny_config()
    config.eval.plots = draw
    # The curves are drawn before the final evaluation, which these tests do not need.
    monkeypatch.setattr(loop.evaluation, "evaluate_and_write", lambda *args: {"metrics": {}, "rank": []})
    loop.train_and_evaluate(config, str(tmp_path))
    assert os.path.exists(tmp_path / "plots" / "curves.png") == draw
