"""The studies of configs/<task>.py (studies/catalog.py), analysis/report.py with its tables and plots
(analysis/tables.py, analysis/rank_plots.py) and the study runner (studies/, python -m scripts.compare) on
hand-written eval.json files, no training."""
import dataclasses
import functools
import importlib
import json
import math
import os
import re
import shutil

import jax
import matplotlib.pyplot as plt
import numpy as np
import pytest

import attention
from analysis import plots, rank_plots, recall_report, report, tables
from configs import grids
from scripts import compare
from studies import catalog, jobs, runner
from tasks import mlm, translation
from tasks import listops as listops_task
from tasks import recall as recall_task
from runtime import devices
from training import evaluation, validate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUDY_KEYS = [(task, preset) for task, presets in catalog.presets().items() for preset in presets]


@pytest.fixture(autouse=True)
def jobs_at_test_speed(monkeypatch):
    """The study runner's poll for its first job's data every 10 ms, not every second (FakeTrain prepares
    none), and this process's devices where it would start a process to ask what they are (seconds per
    study; tests/test_devices.py holds that process's answer to this one's)."""
    monkeypatch.setattr(jobs, "DATA_POLL_S", 0.01)
    monkeypatch.setattr(devices, "probe", devices.runtime)


# --- studies ---------------------------------------------------------------------------------------------


def _study_config(study: grids.Study):
    """get_config(presets) of the study's config file, which must exist."""
    path, _, arg = study.config.partition(":")
    assert os.path.exists(os.path.join(ROOT, path)), f"the study's config file {path} does not exist"
    module = importlib.import_module("configs." + os.path.splitext(os.path.basename(path))[0])
    return module.get_config(arg or None)


@pytest.mark.parametrize("task, preset", STUDY_KEYS)
def test_every_run_is_a_valid_config_with_a_unique_name(task, preset):
    study = catalog.get_study(task, preset)
    # A pick's candidates (its values, on its schedule) are runs too: the first run's stand for the others.
    candidates = runner.pick_candidates(study.pick, study.runs[0]) if study.pick else []
    for run in study.runs + candidates:
        config = _study_config(study)
        for key, value in {**study.overrides, **run.overrides}.items():
            *sections, field = key.split(".")
            functools.reduce(lambda node, name: node[name], sections, config)[field] = value
        # The kind is registered (or the RNN's "none"), its options accepted. Abstractly: the modules validate
        # builds then compile nothing (their random initialisation, eagerly, compiles per shape), and a
        # check that needed a concrete value would raise.
        jax.eval_shape(lambda: validate.validate(config))
    names = [run.name for run in study.runs]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("task, preset", STUDY_KEYS)
def test_every_override_is_a_config_field_of_its_type(task, preset):
    study = catalog.get_study(task, preset)
    config = _study_config(study)
    overrides = {**study.overrides, **{key: value for run in study.runs for key, value in run.overrides.items()},
                 **({study.pick.field: study.pick.values[0], **study.pick.overrides} if study.pick else {})}
    for key, value in {**overrides, "wandb.group": "set by compare.py"}.items():
        field = config
        for part in key.split("."):
            assert part in field, f"{study.config}: no field {key}"
            field = field[part]
        assert type(value) is type(field), f"{study.config}: {key}={value!r} against {field!r}"


def test_mlm_kinds_extends_quick_full_scales_standard_and_kinds_covers_every_kind_once():
    quick, every = catalog.get_study("mlm", "quick"), catalog.get_study("mlm", "kinds")
    assert {run.name for run in quick.runs} < {run.name for run in every.runs}
    standard, full = catalog.get_study("mlm", "standard"), catalog.get_study("mlm", "full")
    assert full.runs == standard.runs and full.pick.values == standard.pick.values
    kinds = catalog.get_study("translation", "kinds")
    assert [run.name for run in kinds.runs] == [name for name in attention.names() if name not in (
        "scaled_dot", "softmax_rank", "landmark_softmax", "gla", "deltanet", "gated_deltanet")]


def test_each_preset_reports_in_its_own_directory():
    assert runner.report_dir("reports", "mlm", "quick") == os.path.join("reports", "mlm")
    assert runner.report_dir("reports", "mlm", "full") == os.path.join("reports", "mlm", "full")


def test_unknown_task_or_preset_names_the_allowed_ones():
    with pytest.raises(ValueError, match="tasks: listops, mlm, recall, translation"):
        catalog.get_study("vision", "quick")
    with pytest.raises(ValueError, match="presets: tiny, tiny_sweep, quick, full, default, kinds, splits, forms, rank$"):
        catalog.get_study("translation", "huge")
    with pytest.raises(ValueError, match="presets: tiny, .*, rank; did you mean quick\\?$"):
        catalog.get_study("translation", "quik")


# --- report ----------------------------------------------------------------------------------------------


def _rank_row(role, layer, numerical_rank, bound, over=0):
    """A row of 4 examples' 64 x 64 matrices, `over` of them over the bound; its largest matrix rank is the
    mean rank rounded up, one more where a matrix is over the bound."""
    return {"role": role, "layer": layer, "head": 0, "seq_len": 64, "numerical_rank": numerical_rank,
            "max_numerical_rank": math.ceil(numerical_rank) + (over > 0),
            "effective_rank": numerical_rank / 2, "stable_rank": 1.5, "rank_bound": bound, "matrices": 4,
            "matrices_bindable": None if bound is None else 4 * (bound < 64),
            "matrices_over_bound": None if bound is None else over}


def _shape_row(role, layer, entropy, spread, query_rows="all"):
    """A shape row of one head: its fraction of max is entropy / 5, its top-1 weight 0.6, half its rows above
    0.5."""
    return {"role": role, "layer": layer, "head": 0, "query_rows": query_rows, "rows": 256, "row_entropy": entropy,
            "entropy_fraction": entropy / 5, "top1_weight": 0.6, "top1_above_half": 0.5, "logit_spread": spread}


def _eval(kind, accuracy, loss, perplexity, ranks, bound, over=(0, 0), entropies=None, spread=None):
    """An mlm eval.json: one encoder_self row per layer, `over[layer]` of its matrices over the bound, and a
    decoder_self row the tables must ignore; with `entropies`, a shape row per layer, and rows of a
    selection and of decoder_self the tables must ignore (without: an eval.json written before shapes)."""
    rows = [_rank_row("encoder_self", layer, rank, bound, n) for layer, (rank, n) in enumerate(zip(ranks, over))]
    result = {"step": 100, "task": "mlm", "split": "test", "num_examples": 8,
              "attention": {"encoder_self": kind},
              "metrics": {"masked_accuracy": accuracy, "loss": loss, "perplexity": perplexity},
              "rank": rows + [_rank_row("decoder_self", 0, 99.0, None)]}
    if entropies is not None:
        result["shape"] = ([_shape_row("encoder_self", layer, entropy, spread) for layer, entropy in enumerate(entropies)]
                           + [_shape_row("encoder_self", 0, 9.0, 9.0, "recall"), _shape_row("decoder_self", 0, 9.0, 9.0)])
    return result


RESULTS = {
    "softmax": [_eval("softmax", 0.5, 1.0, 2.0, [40.0, 44.0], None, entropies=[2.0, 3.0], spread=4.0),
                _eval("softmax", 0.6, 1.2, 3.0, [42.0, 46.0], None, entropies=[2.5, 3.5], spread=4.0)],
    "linear": [_eval("linear", 0.4, 1.5, 4.0, [30.0, 31.0], 32, entropies=[3.0, 3.2]),
               _eval("linear", 0.44, 1.7, 5.0, [31.0, 32.0], 32, entropies=[3.4, 3.6])],
    # One seed, written before shapes, and a max numerical rank of 17 above its bound of 16, in 3 of layer 1's
    # 4 matrices.
    "performer_m16": [_eval("performer", 0.3, 2.0, 7.0, [15.0, 17.0], 16, over=(0, 3))],
}


def test_the_signed_rows_table_gives_each_runs_negative_mass_and_row_sums_where_recorded():
    signed = _eval("softmax_rank", 0.5, 1.0, 2.7, [20.0, 10.0], 32, entropies=[2.0, 3.0])
    for row, (mass, deviation) in zip(signed["shape"][:2], [(0.02, 0.1), (0.04, 0.3)]):
        row.update(negative_mass=mass, row_sum_deviation=deviation)
    older = _eval("softmax", 0.6, 1.0, 2.7, [30.0, 20.0], None, entropies=[2.0, 3.0])  # before the fields
    assert tables.signed_rows_table({"softmax": [older]}) == ""
    assert tables.signed_rows_table({"rank": [signed], "softmax": [older]}).splitlines() == [
        "| run | kind | negative mass | mean abs(row sum - 1) |", "|---|---|---:|---:|",
        "| rank | softmax_rank | 0.030 | 0.200 |", "| softmax | softmax | - | - |"]


def test_accuracy_table_means_and_sample_stds_over_seeds():
    # softmax: std of (0.5, 0.6) = 0.05 sqrt(2) = 0.0707; linear: std of (0.4, 0.44) = 0.02 sqrt(2) = 0.0283.
    assert tables.accuracy_table(mlm.METRICS, RESULTS) == "\n".join([
        "| run | kind | feature dim | seeds | masked_accuracy (mean ± std) | loss | perplexity |",
        "|---|---|---:|---:|---:|---:|---:|",
        "| softmax | softmax | - | 2 | 0.5500 ± 0.0707 | 1.1000 | 2.5000 |",
        "| linear | linear | 32 | 2 | 0.4200 ± 0.0283 | 1.6000 | 4.5000 |",
        "| performer_m16 | performer | 16 | 1 | 0.3000 ± - | 2.0000 | 7.0000 |",
    ])


def test_rank_table_checks_bounds_and_head_dim():
    # softmax: ranks 40, 44, 42, 46 -> mean 43, max 46; linear: 30, 31, 31, 32 -> mean 31, max 32 = bound,
    # 2 seeds x 2 layers x 4 examples = 16 matrices. Row entropy: softmax's 2, 3, 2.5, 3.5 -> 2.75 (fraction
    # 0.55), linear's 3, 3.2, 3.4, 3.6 -> 3.3 without a logit spread; performer's eval.json has no shapes.
    assert tables.rank_table(RESULTS, head_dim=32) == "\n".join([
        "| run | kind | seq len | numerical rank | max numerical rank | effective rank | stable rank | "
        "row entropy | fraction of max | top-1 | top-1 > 0.5 | logit spread | "
        "rank bound | matrices over bound | mean > head dim (32) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        "| softmax | softmax | 64 | 43.00 | 46 | 21.50 | 1.50 | 2.75 | 0.550 | 0.600 | 0.500 | 4.00 | - | - | yes |",
        "| linear | linear | 64 | 31.00 | 32 | 15.50 | 1.50 | 3.30 | 0.660 | 0.600 | 0.500 | - | 32 | 0 / 16 | no |",
        "| performer_m16 | performer | 64 | 16.00 | 18 | 8.00 | 1.50 | - | - | - | - | - | 16 | 3 / 8 | no |",
    ])
    assert "head dim" not in tables.rank_table(RESULTS)


def test_layer_rank_table_gives_every_layer_of_every_run():
    # softmax's layer 0: ranks 40 and 42 over its seeds, row entropies 2 and 2.5; the decoder_self rows are
    # not the reported role, nor the shape rows of a selection the rows over every query.
    assert tables.layer_rank_table(RESULTS).splitlines()[2:] == [
        "| softmax | softmax | 0 | 41.00 | 20.50 | 1.50 | 2.25 | 0.450 | 0.600 | 0.500 | 4.00 |",
        "| softmax | softmax | 1 | 45.00 | 22.50 | 1.50 | 3.25 | 0.650 | 0.600 | 0.500 | 4.00 |",
        "| linear | linear | 0 | 30.50 | 15.25 | 1.50 | 3.20 | 0.640 | 0.600 | 0.500 | - |",
        "| linear | linear | 1 | 31.50 | 15.75 | 1.50 | 3.40 | 0.680 | 0.600 | 0.500 | - |",
        "| performer_m16 | performer | 0 | 15.00 | 7.50 | 1.50 | - | - | - | - | - |",
        "| performer_m16 | performer | 1 | 17.00 | 8.50 | 1.50 | - | - | - | - | - |"]


def test_rewrite_report_writes_a_recall_report_again_from_its_results(tmp_path):
    out = tmp_path / "reports" / "recall" / "kinds"
    report.write_report(recall_task, "kinds", "python -m scripts.compare --task=recall --preset=kinds",
                        RECALL_RESULTS, {}, str(out))
    (out / "report.md").write_text((out / "report.md").read_text().replace("| layer |", "| recall layer |"))
    compare.main(["--task=recall", "--preset=kinds", "--rewrite_report", f"--reports_dir={tmp_path / 'reports'}"])
    text = (out / "report.md").read_text()
    assert "| layer |" in text and "python -m scripts.compare --task=recall --preset=kinds\n" in text


def test_role_rank_table_lists_every_role_of_each_run(tmp_path):
    # RESULTS' runs have an encoder_self row per layer and a decoder_self row of rank 99 without a bound.
    evals = [{**result, "attention": {"encoder_self": "linear", "decoder_self": "linear"}}
             for result in RESULTS["linear"]]
    sections = report.rank_study_sections(mlm.METRICS, {"linear": evals}, {}, str(tmp_path), 32)
    assert any(section.startswith("## Attention rank by role") for section in sections)
    table = tables.role_rank_table({"linear": evals}).splitlines()
    assert table[2:] == [
        "| linear | encoder_self | linear | 64 | 31.00 | 15.50 | 1.50 | 3.30 | 0.660 | 0.600 | 0.500 | - | 32 |",
        "| linear | decoder_self | linear | 64 | 99.00 | 49.50 | 1.50 | 9.00 | 1.800 | 0.600 | 0.500 | 9.00 | - |"]


def test_the_bound_is_checked_on_each_matrix_of_every_seed():
    # Every row's mean rank, 31.75 at most, is within the bound 32, but the first seed's layer 1 has one
    # matrix over it and the second seed's layer 0 two; a bound of 64 on 64 x 64 matrices cannot bind.
    results = {"performer_m32": [_eval("performer", 0.3, 2.0, 7.0, [31.0, 31.75], 32, over=(0, 1)),
                                 _eval("performer", 0.3, 2.0, 7.0, [31.5, 31.0], 32, over=(2, 0))],
               "performer_m64": [_eval("performer", 0.3, 2.0, 7.0, [60.0, 61.0], 64)]}
    assert [line.rstrip(" |").split(" | ")[-2:] for line in tables.rank_table(results).splitlines()[2:]] == [
        ["32", "3 / 16"], ["64", "cannot bind"]]
    note = tables.rank_note(results)
    assert "performer_m32: 3 of 16 matrices above its bound 32." in note
    assert "performer_m64: its bound 64 cannot bind: no matrix has both sides longer." in note


def test_a_bounded_run_without_per_matrix_counts_names_the_run():
    old = _eval("linear", 0.4, 1.5, 4.0, [30.0, 31.0], 32)
    old["rank"] = [{key: value for key, value in row.items() if not key.startswith("matrices")} for row in old["rank"]]
    with pytest.raises(ValueError, match="linear: eval.json without per-matrix bound counts"):
        tables.rank_table({"linear": [old]})
    assert "| - |" in tables.rank_table({"softmax": [_eval("softmax", 0.5, 1.0, 2.0, [40.0, 44.0], None)]})


def test_rank_note_states_each_bound_and_softmax_against_the_head_dim():
    note = tables.rank_note(RESULTS, head_dim=32)
    assert "linear: 0 of 16 matrices above its bound 32." in note
    assert "performer_m16: 3 of 8 matrices above its bound 16." in note
    assert "softmax: mean numerical rank 43.00, above the head dim 32." in note
    assert "softmax" not in tables.rank_note(RESULTS)


def _rnn_eval(kind, exact_match, ranks, bound):
    """A translation eval.json of the RNN: a cross role only (or no attention at all)."""
    return {"step": 100, "task": "translation", "split": "test", "num_examples": 8, "attention": {"cross": kind},
            "metrics": {"exact_match": exact_match, "token_accuracy": 0.9, "bleu": 90.0, "loss": 0.1},
            "rank": [_rank_row("cross", layer, rank, bound) for layer, rank in enumerate(ranks)]}


def test_rnn_rows_report_their_cross_attention_and_dashes_without_attention(tmp_path):
    results = {"rnn_none": [_rnn_eval("none", 0.2, [], None)],
               "rnn_additive": [_rnn_eval("additive", 0.9, [7.0], None)]}
    assert tables.accuracy_table(translation.METRICS, results).splitlines()[2:] == [
        "| rnn_none | none | - | 1 | 0.2000 ± - | 0.9000 | 90.0000 | 0.1000 |",
        "| rnn_additive | additive | - | 1 | 0.9000 ± - | 0.9000 | 90.0000 | 0.1000 |"]
    assert tables.rank_table(results).splitlines()[2:] == [
        "| rnn_none | none |" + " - |" * 12,
        "| rnn_additive | additive | 64 | 7.00 | 7 | 3.50 | 1.50 | - | - | - | - | - | - | - |"]
    spectra = {"rnn_additive": {"cross": [[1.0, 0.5, 0.1]]}}
    path = report.write_report(translation, "quick", "cmd", results, spectra, str(tmp_path))
    assert os.path.exists(path) and os.path.exists(tmp_path / rank_plots.SPECTRA_PLOT)


def test_write_report_embeds_tables_and_plots(tmp_path):
    spectra = {"softmax": {"encoder_self": [[1.0, 0.5, 0.1, 0.0]]}, "linear": {"encoder_self": [[1.0, 0.2, 0.0, 0.0]]}}
    path = report.write_report(mlm, "quick", "python -m scripts.compare --task=mlm", RESULTS, spectra,
                               str(tmp_path / "out"), head_dim=32)
    text = open(path).read()
    assert path == str(tmp_path / "out" / "report.md")
    assert tables.accuracy_table(mlm.METRICS, RESULTS) in text and tables.rank_table(RESULTS, 32) in text
    assert "python -m scripts.compare --task=mlm" in text
    for image in ("accuracy_vs_feature_dim.png", "accuracy_vs_effective_rank.png", "accuracy_vs_row_entropy.png",
                  "spectra.png"):
        assert f"]({image})" in text
        assert (tmp_path / "out" / image).stat().st_size > 0


def test_write_report_without_bounded_runs_or_spectra(tmp_path):
    path = report.write_report(mlm, "quick", "cmd", {"softmax": RESULTS["softmax"]}, {}, str(tmp_path))
    assert "spectra.png" not in open(path).read()
    assert (tmp_path / "accuracy_vs_feature_dim.png").exists() and not (tmp_path / "spectra.png").exists()


def test_a_report_with_contrasts_puts_them_before_the_tasks_sections(tmp_path):
    contrast = grids.Contrast("softmax above performer", {"softmax": 1.0, "performer_m16": -1.0})
    seeded = {name: [{**result, "config": {"seed": seed}} for seed, result in enumerate(evals)]
              for name, evals in RESULTS.items()}
    text = open(report.write_report(mlm, "quick", "cmd", seeded, {}, str(tmp_path), contrasts=(contrast,),
                                    verdict="softmax led.")).read()
    section = text.index("## Predictions against results")
    assert section == text.index("## ") and "| softmax above performer | softmax - performer_m16 |" in text
    table_end = text.index("\n\n", text.index("| softmax above performer |"))
    assert text[table_end:].startswith("\n\nWhich held, written once every contrast was in: softmax led.\n\n## ")


def test_a_verdict_without_contrasts_opens_the_report(tmp_path):
    text = open(report.write_report(mlm, "quick", "cmd", RESULTS, {}, str(tmp_path), verdict="softmax led.")).read()
    assert text.index("## Which prediction held\n\nWritten once every run was in: softmax led.\n") == text.index("## ")


def test_a_report_of_eval_json_written_before_shapes_has_dashes_and_no_entropy_plot(tmp_path):
    old = {"performer_m16": RESULTS["performer_m16"]}
    text = open(report.write_report(mlm, "quick", "cmd", old, {}, str(tmp_path))).read()
    assert "| performer_m16 | performer | 64 | 16.00 | 18 | 8.00 | 1.50 | - | - | - | - | - | 16 | 3 / 8 |" in text
    assert rank_plots.ROW_ENTROPY_PLOT not in text and not (tmp_path / rank_plots.ROW_ENTROPY_PLOT).exists()


def test_the_row_entropy_plot_draws_a_point_per_seed_at_layer_0_and_over_layers(monkeypatch, tmp_path):
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    rank_plots.plot_accuracy_vs_row_entropy(mlm.METRICS, RESULTS, str(tmp_path / "entropy.png"))
    monkeypatch.undo()
    (figure,) = figures
    layer_0, over_layers = ({line.get_label(): list(zip(*line.get_data())) for line in ax.get_lines()
                             if not line.get_label().startswith("_")} for ax in figure.axes)
    # (row entropy, masked accuracy) per seed; performer_m16, written before shapes, has no point.
    assert layer_0 == {"softmax": [(2.0, 0.5), (2.5, 0.6)], "linear": [(3.0, 0.4), (3.4, 0.44)]}
    assert over_layers == {"softmax": [(2.5, 0.5), (3.0, 0.6)], "linear": [(3.1, 0.4), (3.5, 0.44)]}
    plt.close(figure)


# --- the runner --------------------------------------------------------------------------------------------


def test_train_command_orders_study_run_and_extra_overrides():
    study = grids.Study("configs/mlm.py:quick", {"num_train_steps": 5}, [], seeds=1)
    run = grids.Run("performer_m8", {"attention.name": "performer", "attention.num_features": 8})
    command = jobs.train_command(study, run, 1, "/runs/p/seed1", "mlm-quick", ["--config.wandb.mode=disabled"])
    assert command[1:] == [
        os.path.join(ROOT, "train.py"),
        f"--config={os.path.join(ROOT, 'configs', 'mlm.py')}:quick",
        "--workdir=/runs/p/seed1",
        "--config.seed=1",
        "--config.num_train_steps=5",
        "--config.attention.name=performer",
        "--config.attention.num_features=8",
        "--config.wandb.group=mlm-quick",
        "--config.wandb.mode=disabled",
    ]


def _write_json(path, content):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(content, f)


def test_a_run_is_finished_when_eval_json_is_at_the_configs_last_step(tmp_path):
    workdir = str(tmp_path)
    assert not jobs.is_finished(workdir)
    _write_json(os.path.join(workdir, "config.json"), {"num_train_steps": 100})
    assert not jobs.is_finished(workdir)
    _write_json(os.path.join(workdir, "eval.json"), {"step": 50})  # e.g. eval.py on a checkpoint mid-run
    assert not jobs.is_finished(workdir)
    _write_json(os.path.join(workdir, "eval.json"), {"step": 100})
    assert jobs.is_finished(workdir)


def test_a_run_stopped_early_is_finished_at_the_validation_that_stopped_it(tmp_path):
    workdir = str(tmp_path)
    _write_json(os.path.join(workdir, "config.json"),
                {"num_train_steps": 100, "eval": {"stop_metric": "query_accuracy", "stop_at": 0.99}})
    _write_json(os.path.join(workdir, "eval.json"), {"step": 40})
    with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
        for step, accuracy in ((20, 0.5), (40, 0.995)):
            f.write(json.dumps({"step": step, "split": "eval", "query_accuracy": accuracy}) + "\n")
    assert jobs.is_finished(workdir)
    _write_json(os.path.join(workdir, "eval.json"), {"step": 20})  # a validation below the stop: mid-run
    assert not jobs.is_finished(workdir)


def test_only_selects_runs_and_rejects_unknown_names():
    study = catalog.get_study("translation", "quick")
    assert [run.name for run in runner.select_runs(study, "taylor,softmax")] == ["softmax", "taylor"]
    with pytest.raises(ValueError, match="unknown runs nope; this study's runs: softmax, linear"):
        runner.select_runs(study, "softmax,nope")


def test_a_borrowed_run_is_read_from_the_lenders_published_record_and_never_trained(tmp_path):
    """The controls study borrows softmax_centred and linear_centred from rank_or_shape: trained as rank_or_shape
    trains them, so their records come from its published runs.json, marked; --only naming one is refused. A study
    that would train a borrowed run otherwise (another pick) is refused before anything is read."""
    study = catalog.get_study("mlm", "rank_or_shape_controls")
    assert "softmax_centred" not in [run.name for run in runner.select_runs(study, "")]
    with pytest.raises(ValueError, match="^runs linear_centred are borrowed from another study's published runs"):
        runner.select_runs(study, "mala,linear_centred")
    records = runner.borrowed_records(study, "mlm")
    with open(os.path.join("reports", "mlm", "rank_or_shape", runner.RUNS_JSON)) as f:
        lent = json.load(f)
    assert records["linear_centred"] == {**lent["linear_centred"], "borrowed_from": "rank_or_shape"}
    merged = runner.recorded_runs({}, {}, str(tmp_path), study, "mlm", "rank_or_shape_controls")
    assert set(merged) == {"softmax_centred", "linear_centred"}
    other_pick = grids.Pick("learning_rate", (1e-3,), study.pick.overrides)
    otherwise = grids.Study(study.config, study.overrides, study.runs, study.seeds, pick=other_pick,
                            borrowed=study.borrowed)
    with pytest.raises(runner.StudyError, match="^run softmax_centred is borrowed from mlm/rank_or_shape, which "
                                                "trains no run of that name as this study would"):
        runner.borrowed_records(otherwise, "mlm")


def test_the_head_dim_is_reported_only_where_every_run_shares_it():
    def results(d_model, num_heads):
        return [{"config": {"model": {"d_model": d_model, "num_heads": num_heads}}}]

    assert runner.head_dim({"transformer": results(64, 4)}) == 16
    assert runner.head_dim({"transformer": results(64, 4), "rnn": results(64, 1)}) is None


@pytest.mark.parametrize("preset", ["quick", "bidirectional"])
def test_recall_quick_studies_pick_each_runs_learning_rate_on_half_the_schedule(preset):
    study = catalog.get_study("recall", preset)
    assert (len(study.runs), study.seeds) == (13, 3)
    assert study.pick.field == "learning_rate" and study.pick.values == (1e-3, 3e-3, 1e-2)
    assert study.pick.overrides["num_train_steps"] == _study_config(study).num_train_steps // 2


def test_recall_anchors_has_zoologys_arm_and_the_convolution_arm_and_lists_what_differs(tmp_path):
    study = catalog.get_study("recall", "anchors")
    arms = {run.name: run.overrides["model.conv_kernel"] for run in study.runs}
    assert arms == {f"softmax_{arm}_N{n}": conv for arm, conv in (("zoology", 0), ("conv3", 3)) for n in (4, 8, 16)}
    assert study.overrides["dataset.random_non_queries"] is False and study.overrides["model.dropout_rate"] == 0.1
    assert len(study.pick.values) == 4 and study.seeds == 3
    assert "Differences that remain" in study.notes
    path = report.write_report(recall_task, "anchors", "cmd", RECALL_RESULTS, {}, str(tmp_path), notes=study.notes)
    assert "Differences that remain" in open(path).read()


def test_parts_cover_the_runs_once_in_about_equal_slices():
    study = catalog.get_study("recall", "full")
    parts = [runner.part_runs(study.runs, f"{k}/4") for k in (1, 2, 3, 4)]
    assert [run for part in parts for run in part] == study.runs
    assert all(abs(len(part) - len(study.runs) / 4) <= 1 for part in parts)
    for part in ("4/3", "0/4", "x", "1/2/3", "-1/4"):
        with pytest.raises(ValueError, match=f"^--part={part}: not of the form k/n, the k-th of n parts with 1 <= k <= n"):
            runner.part_runs(study.runs, part)


def test_a_part_without_runs_is_an_error_with_the_studys_size(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(jobs, "train", FakeTrain())
    with pytest.raises(SystemExit) as exit:  # two runs in three parts: runs [0:0.67], [0.67:1.33], [1.33:2]
        _main(tmp_path, "--only=softmax,linear", "--part=2/3")
    assert exit.value.code == 2 and capsys.readouterr().err == (
        "error: --part=2/3: this part has no runs: the study has 2 runs (after any --only), fewer than its 3 "
        "parts; split it into at most 2 parts\n")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "reports").exists()


def _rewrite(tmp_path, capsys, task="mlm") -> str:
    """The one error line of --rewrite_report of (task, quick) in tmp_path/reports; status 2."""
    with pytest.raises(SystemExit) as exit:
        compare.main([f"--task={task}", "--rewrite_report", f"--reports_dir={tmp_path / 'reports'}"])
    error = capsys.readouterr().err
    assert exit.value.code == 2 and error.count("\n") == 1, error
    return error


def test_a_rewrite_of_a_study_that_never_reported_says_so(tmp_path, capsys):
    assert _rewrite(tmp_path, capsys) == (
        f"error: {tmp_path / 'reports' / 'mlm'}: no report.md: the study mlm/quick has not reported there; run it "
        f"first (python -m scripts.compare --task=mlm --preset=quick), or name its --reports_dir\n")


@pytest.mark.parametrize("cut", [runner.RUNS_JSON, report.RESULTS_JSON])
def test_a_cut_study_file_is_named_with_the_command_that_rebuilds_it(tmp_path, monkeypatch, capsys, cut):
    monkeypatch.setattr(jobs, "train", FakeTrain())
    _main(tmp_path, "--only=softmax")
    out = tmp_path / "reports" / "mlm"
    if cut == report.RESULTS_JSON:  # read only where there is no runs.json, and without spectra to plot
        (out / runner.RUNS_JSON).unlink()
        (out / rank_plots.SPECTRA_PLOT).unlink()
    text = (out / cut).read_text()
    (out / cut).write_text(text[: len(text) // 2])
    capsys.readouterr()
    rebuild = (f"; restore it (git checkout -- {out / cut}, where it is committed), or move it away and rebuild it "
               f"where the study's workdirs are: `python -m scripts.compare --task=mlm --preset=quick` (and each "
               f"part's --part) reads the finished runs again instead of training them\n")
    error = _rewrite(tmp_path, capsys)
    assert error.startswith(f"error: {out / cut}: not readable as JSON (") and error.endswith(rebuild), error
    if cut == runner.RUNS_JSON:  # the study itself names it before it trains anything
        monkeypatch.setattr(jobs, "train", lambda *args: pytest.fail("trained beside a cut runs.json"))
        with pytest.raises(SystemExit):
            _main(tmp_path, "--only=linear")
        assert capsys.readouterr().err.endswith(rebuild)
    (out / cut).unlink()  # moved away: the study's command rebuilds it from the finished workdirs
    monkeypatch.setattr(jobs, "train", FakeTrain())
    _main(tmp_path, "--only=softmax")
    assert json.loads((out / cut).read_text())


RANK_BOUNDS = {"linear": 32, "performer_m32": 32, "performer_m128": 128, "performer_m512": 512, "taylor": 561,
               "exp_limit": 561}


class FakeTrain:
    """Stands in for jobs.train: writes what train.py would, or fails for the labels in `fail`."""

    def __init__(self, fail=(), validation=lambda rate: 0.4, examples=False):
        self.fail, self.commands, self.validation, self.examples = set(fail), [], validation, examples
        self.environments = []

    def __call__(self, command, workdir, env):
        if members := [arg for arg in command if arg.startswith(jobs.PACK_FLAG)]:
            # Each unfinished packed run as if trained alone (train_packed skips the finished ones).
            shared = [arg for arg in command if arg not in members]
            alone = [(member_dir, [*shared[:3], f"--workdir={member_dir}",
                                   *(f"--config.{value}" for value in values.split(",")), *shared[3:]])
                     for member_dir, _, values in (arg[len(jobs.PACK_FLAG):].rpartition(":") for arg in members)]
            return all([self(single, member_dir, env) for member_dir, single in alone
                        if not jobs.is_finished(member_dir)])
        self.commands.append(command)
        self.environments.append(env)
        run, seed = workdir.split(os.sep)[-2:]
        if f"{run} {seed}" in self.fail:
            return False
        kind = next(arg.split("=")[1] for arg in command if arg.startswith("--config.attention.name="))
        accuracy = 0.5 + 0.01 * int(seed.removeprefix("seed"))
        _write_json(os.path.join(workdir, "config.json"),
                    {"num_train_steps": 1000, "model": {"d_model": 64, "num_heads": 2}})
        _write_json(os.path.join(workdir, "eval.json"), {
            "step": 1000, "task": "mlm", "split": "test", "num_examples": 8, "attention": {"encoder_self": kind},
            "config": {"seed": int(seed.removeprefix("seed")), "model": {"d_model": 64, "num_heads": 2}},
            "metrics": {"masked_accuracy": accuracy, "loss": 1.0, "perplexity": 2.7},
            "rank": [_rank_row("encoder_self", 0, 20.0, RANK_BOUNDS.get(run))]})
        _write_json(os.path.join(workdir, "spectra.json"), {"encoder_self": [[1.0, 0.3, 0.01]]})
        if self.examples:  # what evaluation writes for attention.png: a study's attention_maps.png draws it
            weights = np.random.default_rng(len(run)).random((2, 2, 5, 5))  # [layers, heads, Lq, Lk]
            os.makedirs(os.path.join(workdir, "plots"), exist_ok=True)
            evaluation.write_attention_example(os.path.join(workdir, "plots", evaluation.ATTENTION_EXAMPLE),
                                               {"encoder_self": weights}, {"encoder_self": list("abcde")},
                                               {"encoder_self": list("abcde")})
        rate = next((float(arg.split("=")[1]) for arg in command if arg.startswith("--config.learning_rate=")), 0.0)
        with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
            f.write(json.dumps({"step": 1000, "split": "eval", "masked_accuracy": self.validation(rate)}) + "\n")
        return True


def _main(tmp_path, *args):
    compare.main(["--task=mlm", f"--runs_dir={tmp_path / 'runs'}", f"--reports_dir={tmp_path / 'reports'}",
                  "--jobs=2", *args])


def test_a_study_stopped_while_its_seeds_train_reports_the_runs_that_finished(tmp_path, monkeypatch):
    """A time limit's SIGTERM ends run_jobs with SystemExit (studies/children.py): the runs that finished
    before it are recorded and reported, then the study stops with the signal's status."""
    fake = FakeTrain()

    def stopped_after_softmax(jobs_to_run, workers, compilation_cache):
        for label, command, workdir in jobs_to_run:
            if label.startswith("softmax "):
                os.makedirs(workdir, exist_ok=True)
                fake(command, workdir, None)
        raise SystemExit(128 + 15)

    monkeypatch.setattr(runner, "run_jobs", stopped_after_softmax)
    with pytest.raises(SystemExit) as stopped:
        _main(tmp_path, "--only=softmax,linear", "--seeds=1")
    assert stopped.value.code == 143
    with open(tmp_path / "reports" / "mlm" / "report.md") as f:
        text = f.read()
    assert "| softmax | softmax |" in text and "| linear |" not in text
    with open(tmp_path / "reports" / "mlm" / runner.RUNS_JSON) as f:
        assert list(json.load(f)) == ["softmax"]


def test_a_report_goes_under_runs_unless_published_to_the_committed_tree(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(jobs, "train", FakeTrain())
    monkeypatch.chdir(tmp_path)
    compare.main(["--task=mlm", "--only=softmax,linear", "--seeds=1", "--jobs=2"])
    assert (tmp_path / "runs" / "reports" / "mlm" / "report.md").exists() and not (tmp_path / "reports").exists()
    compare.main(["--task=mlm", "--only=softmax,linear", "--seeds=1", "--jobs=2", "--publish"])
    text = (tmp_path / "reports" / "mlm" / "report.md").read_text()
    assert ("Produced by\n\n```\npython -m scripts.compare --task=mlm --only=softmax,linear --seeds=1 --jobs=2 "
            "--publish\n```") in text
    with pytest.raises(SystemExit) as refused:
        compare.main(["--task=mlm", "--publish", "--reports_dir=elsewhere"])
    assert refused.value.code == 2
    assert capsys.readouterr().err.startswith("error: --publish writes to reports/; give it or --reports_dir")


def test_main_trains_every_run_and_seed_then_reports_and_skips_them_next_time(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(jobs.COMPILATION_CACHE_VARIABLE, raising=False)  # the suite's own (conftest.py) would win
    fake = FakeTrain()
    monkeypatch.setattr(jobs, "train", fake)
    _main(tmp_path, "--pack=on", "--", "--config.wandb.mode=disabled")
    study = catalog.get_study("mlm", "quick")
    assert len(fake.commands) == len(study.runs) * study.seeds
    assert all(command[-1] == "--config.wandb.mode=disabled" for command in fake.commands)
    # Every training process of the study shares one compilation cache: a run's seeds compile their program once.
    assert {env[jobs.COMPILATION_CACHE_VARIABLE] for env in fake.environments} == {
        str(tmp_path / "runs" / "compilation_cache")}
    output = capsys.readouterr().out
    # Packed by default: one job a run, its seeds' workdirs in one train.py --pack each.
    assert f"[{len(study.runs)}/{len(study.runs)}]" in output and "FAILED" not in output
    assert "softmax seeds 0-1 (packed): done" in output
    assert "packed: each run's seeds train as one program" in output
    text = (tmp_path / "reports" / "mlm" / "report.md").read_text()
    for run in study.runs:
        assert f"| {run.name} | {run.overrides['attention.name']} |" in text
    assert "mean > head dim (32)" in text and (tmp_path / "reports" / "mlm" / "spectra.png").exists()

    again = FakeTrain()
    monkeypatch.setattr(jobs, "train", again)
    _main(tmp_path, "--pack=on")
    assert again.commands == []
    assert capsys.readouterr().out.count("finished earlier, skipped") == len(study.runs)


def test_a_study_in_parts_reports_the_union_of_what_each_part_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(jobs, "train", FakeTrain())
    study = catalog.get_study("mlm", "quick")
    for part in ("1/2", "2/2"):  # each part on a machine of its own: the first part's workdirs are gone
        _main(tmp_path, f"--part={part}")
        shutil.rmtree(tmp_path / "runs")
    text = (tmp_path / "reports" / "mlm" / "report.md").read_text()
    assert all(f"| {run.name} | {run.overrides['attention.name']} |" in text for run in study.runs)
    recorded = json.loads((tmp_path / "reports" / "mlm" / runner.RUNS_JSON).read_text())
    assert list(recorded) == [run.name for run in study.runs]
    assert all(len(record["results"]) == study.seeds for record in recorded.values())


def test_attention_maps_draw_head_0_of_every_run_side_by_side_and_name_the_runs_without_an_example(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(jobs, "train", FakeTrain(examples=True))
    _main(tmp_path, "--only=linear")
    shutil.rmtree(tmp_path / "runs")  # that part trained on another machine
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    _main(tmp_path, "--only=softmax")
    assert "attention_maps.png: no attention example of linear on this machine" in capsys.readouterr().out
    text = (tmp_path / "reports" / "mlm" / "report.md").read_text()
    assert "![attention maps](attention_maps.png)" in text
    (figure,) = [fig for fig in figures if fig._suptitle is not None and "head 0" in fig._suptitle.get_text()]
    expected = np.random.default_rng(len("softmax")).random((2, 2, 5, 5))
    panels = [ax for ax in figure.axes if ax.images]
    assert [ax.get_title() for ax in panels] == [f"encoder_self L{layer} (max {expected[layer, 0].max():.2f})"
                                                 for layer in range(2)]
    for layer, ax in enumerate(panels):
        np.testing.assert_allclose(ax.images[0].get_array(), expected[layer, 0], atol=1e-3)  # float16 on disk
    assert panels[0].get_ylabel() == "softmax" and [t.get_text() for t in panels[0].get_yticklabels()] == list("abcde")
    monkeypatch.undo()
    for fig in figures:
        plt.close(fig)


def test_failed_runs_are_named_and_left_out_of_the_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(jobs, "train", FakeTrain(fail=["taylor seed1", "local seed0", "local seed1"]))
    with pytest.raises(SystemExit) as exit:
        _main(tmp_path, "--only=softmax,taylor,local")
    output = capsys.readouterr()
    assert exit.value.code == 1 and re.match("error: failed runs: .*taylor seed1", output.err)
    assert f"FAILED (see {tmp_path / 'runs' / 'mlm' / 'quick' / 'taylor' / 'seed1' / 'train.log'})" in output.out
    text = (tmp_path / "reports" / "mlm" / "report.md").read_text()
    assert "| taylor | taylor | 561 | 1 |" in text and "| softmax | softmax | - | 2 |" in text
    assert "| local |" not in text


# --- the recall study's report -----------------------------------------------------------------------------


def _recall_eval(kind, pairs, accuracy, feature_dim, per_head, effective_ranks, validation, entropies=()):
    """A causal recall eval.json with one head and a rank row per layer, a shape row per one of `entropies`,
    plus the runner's "validation"."""
    rows = [{"role": "decoder_self", "layer": layer, "head": 0, "seq_len": 64, "numerical_rank": rank + 1,
             "effective_rank": rank, "stable_rank": 1.5, "rank_bound": None}
            for layer, rank in enumerate(effective_ranks)]
    return {"step": 800, "task": "recall", "split": "test", "num_examples": 3000, "attention": {"decoder_self": kind},
            "metrics": {"query_accuracy": accuracy, "loss": 0.1}, "rank": rows,
            "shape": [_shape_row("decoder_self", layer, entropy, None) for layer, entropy in enumerate(entropies)],
            "state": {"decoder_self": {"kind": kind, "feature_dim": feature_dim, "key_dim": feature_dim or 64,
                                       "value_dim": 64, "seq_len": 64, "per_head": per_head, "total": 2 * per_head}},
            "recall": {"form": "causal", "vocab_size": 256, "seq_len": 64, "num_kv_pairs": pairs},
            "validation": {"query_accuracy": validation}}


RECALL_RESULTS = {
    "linear_d4_N16": [_recall_eval("linear", 16, 0.1, 4, 256, [4.0], 0.1)],  # a width sweep with d' = 16
    "softmax_N16": [_recall_eval("softmax", 16, 1.0, None, 8192, [16.0, 7.0], 1.0),
                    _recall_eval("softmax", 16, 0.98, None, 8192, [15.0, 8.0], 0.99)],
    # Layer 1 recalls in one seed, layer 0 in the other: each layer's mean is reported, none chosen.
    "linear_d16_N16": [_recall_eval("linear", 16, 0.4, 16, 1024, [10.0, 6.0], 0.41),
                       _recall_eval("linear", 16, 0.5, 16, 1024, [4.0, 9.0], 0.52)],
    "linear_d16_N4": [_recall_eval("linear", 4, 0.9, 16, 1024, [3.0, 2.0], 0.9, entropies=[1.5, 2.5])],
}


def test_recall_tables_give_sizes_seeds_and_every_layer():
    # softmax: std of (1.0, 0.98) = 0.0141; linear N16: std of (0.4, 0.5) = 0.0707; layer means 7 and 7.5.
    assert recall_report.query_accuracy_table(RECALL_RESULTS).splitlines()[3:] == [
        "| softmax_N16 | softmax | 16 | 64 | - | 8,192 | 2 | 0.9900 ± 0.0141 | 1.000, 0.980 | 0.9950 |  |",
        "| linear_d16_N16 | linear | 16 | 16 | 16 | 1,024 | 2 | 0.4500 ± 0.0707 | 0.400, 0.500 | 0.4650 |  |",
        "| linear_d16_N4 | linear | 4 | 16 | 16 | 1,024 | 1 | 0.9000 ± - | 0.900 | 0.9000 |  |",
    ]
    no_shape = " - | - | - | - | - |"
    assert recall_report.query_rank_table(RECALL_RESULTS).splitlines()[3:] == [
        "| softmax_N16 | softmax | 16 | - | 0 | 15.50 | 16.50 | 1.50 | 0.97 |" + no_shape,
        "| softmax_N16 | softmax | 16 | - | 1 | 7.50 | 8.50 | 1.50 | 0.47 |" + no_shape,
        "| linear_d16_N16 | linear | 16 | 16 | 0 | 7.00 | 8.00 | 1.50 | 0.44 |" + no_shape,
        "| linear_d16_N16 | linear | 16 | 16 | 1 | 7.50 | 8.50 | 1.50 | 0.47 |" + no_shape,
        "| linear_d16_N4 | linear | 4 | 16 | 0 | 3.00 | 4.00 | 1.50 | 0.75 | 1.50 | 0.300 | 0.600 | 0.500 | - |",
        "| linear_d16_N4 | linear | 4 | 16 | 1 | 2.00 | 3.00 | 1.50 | 0.50 | 2.50 | 0.500 | 0.600 | 0.500 | - |",
    ]


@pytest.mark.parametrize("pack", ["off", "on"])
def test_a_pick_trains_each_value_once_then_the_seeds_at_the_best_on_validation(pack, tmp_path, monkeypatch, capsys):
    """Packed (train.py --pack, which FakeTrain splits into its runs as train_packed trains them), each run's
    candidates train in one process, then its seeds in another; the same runs either way."""
    pick = grids.Pick("learning_rate", (0.001, 0.003, 0.01), {"num_train_steps": 30})
    study = grids.Study("configs/mlm.py:tiny", {}, [grids.kind_run("softmax"), grids.kind_run("linear")], seeds=2,
                        pick=pick)
    monkeypatch.setattr(runner, "get_study", lambda task, preset: study)
    # Validation peaks at 0.003; test accuracy (FakeTrain's, by seed) never depends on the rate.
    fake = FakeTrain(fail=["learning_rate=0.01 seed0"], validation=lambda rate: {0.001: 0.3, 0.003: 0.5}.get(rate, 0.4))
    monkeypatch.setattr(jobs, "train", fake)
    _main(tmp_path, f"--pack={pack}")
    output = capsys.readouterr()
    assert ("softmax learning_rate pick (packed): " in output.out and "linear seeds 0-1 (packed): done" in
            output.out) == (pack == "on")
    candidates, seeds = fake.commands[:6], fake.commands[6:]
    assert all("--config.num_train_steps=30" in command and "--config.seed=0" in command for command in candidates)
    assert len(seeds) == 4 and all("--config.learning_rate=0.003" in command for command in seeds)
    assert not any("--config.num_train_steps=30" in command for command in seeds)
    text = (tmp_path / "reports" / "mlm" / "report.md").read_text()
    assert "| softmax | softmax | - | 2 | 0.5050 ± 0.0071 | 1.0000 | 2.7000 | learning_rate=0.003 |" in text
    assert "| softmax | 0.3000 | 0.5000 | diverged | 0.003 |" in text
    recorded = json.loads((tmp_path / "reports" / "mlm" / runner.RUNS_JSON).read_text())
    assert recorded["linear"]["pick"] == {"field": "learning_rate", "chosen": 0.003,
                                          "validation": {"0.001": 0.3, "0.003": 0.5, "0.01": None}}
    assert output.err == ""  # a diverged candidate is an outcome of the pick, not a failed run

    again = FakeTrain(fail=["learning_rate=0.01 seed0"])
    monkeypatch.setattr(jobs, "train", again)
    _main(tmp_path, f"--pack={pack}")
    assert [command for command in again.commands if "learning_rate=0.01" not in " ".join(command)] == []


def test_more_seeds_of_a_run_join_those_trained_elsewhere_without_picking_again(tmp_path, monkeypatch, capsys):
    """Where a prediction's interval straddles its threshold, its runs get more seeds (Run.seeds): seeds and the
    pick that runs.json records, trained on another machine, stay; only the new seeds train, at the recorded rate."""
    runs = [grids.kind_run("softmax"), grids.kind_run("linear")]
    study = grids.Study("configs/mlm.py:tiny", {}, runs, seeds=2,
                        pick=grids.Pick("learning_rate", (0.001, 0.003), {"num_train_steps": 30}))
    monkeypatch.setattr(runner, "get_study", lambda task, preset: study)
    monkeypatch.setattr(jobs, "train", FakeTrain(validation=lambda rate: {0.003: 0.5}.get(rate, 0.4)))
    _main(tmp_path, "--pack=off")
    shutil.rmtree(tmp_path / "runs")  # that machine's workdirs are not here
    capsys.readouterr()
    more = grids.Study(study.config, {}, [runs[0], dataclasses.replace(runs[1], seeds=4)], seeds=2, pick=study.pick)
    monkeypatch.setattr(runner, "get_study", lambda task, preset: more)
    fake = FakeTrain()
    monkeypatch.setattr(jobs, "train", fake)
    _main(tmp_path, "--pack=on")
    assert [sorted(arg for arg in command if arg.startswith(("--workdir=", "--config.seed=", "--config.learning_rate=")))
            for command in fake.commands] == [
        ["--config.learning_rate=0.003", f"--config.seed={seed}",
         f"--workdir={tmp_path / 'runs' / 'mlm' / 'quick' / 'linear' / f'seed{seed}'}"] for seed in (2, 3)]
    output = capsys.readouterr().out
    assert "linear: learning_rate=0.003, picked earlier (runs.json), not picked again" in output
    assert "linear: seeds 0, 1 recorded in runs.json, not trained again" in output
    assert "linear seeds 2-3 (packed): done" in output
    recorded = json.loads((tmp_path / "reports" / "mlm" / runner.RUNS_JSON).read_text())
    assert [result["config"]["seed"] for result in recorded["linear"]["results"]] == [0, 1, 2, 3]
    assert len(recorded["linear"]["curves"]) == 4 and recorded["linear"]["pick"]["chosen"] == 0.003
    assert [result["config"]["seed"] for result in recorded["softmax"]["results"]] == [0, 1]
    text = (tmp_path / "reports" / "mlm" / "report.md").read_text()
    assert "| linear | linear | 32 | 4 | 0.5150 ± 0.0129 |" in text

    # Another machine (a GPU) with neither these workdirs nor this report folder starts from the published report.
    monkeypatch.setattr(runner, "REPOSITORY", str(tmp_path))
    more = grids.Study(study.config, {}, [dataclasses.replace(runs[0], seeds=3), runs[1]], seeds=2, pick=study.pick)
    elsewhere = FakeTrain()
    monkeypatch.setattr(jobs, "train", elsewhere)
    compare.main(["--task=mlm", f"--runs_dir={tmp_path / 'gpu'}", f"--reports_dir={tmp_path / 'gpu'}",
                  "--from_published", "--jobs=1"])
    assert [next(arg for arg in command if arg.startswith("--workdir=")) for command in elsewhere.commands] == [
        f"--workdir={tmp_path / 'gpu' / 'mlm' / 'quick' / 'softmax' / 'seed2'}"]
    recorded = json.loads((tmp_path / "gpu" / "mlm" / runner.RUNS_JSON).read_text())
    assert [len(recorded[name]["results"]) for name in ("softmax", "linear")] == [3, 4]


def test_a_run_with_seeds_of_its_own_cannot_be_in_a_sweep():
    with pytest.raises(ValueError, match="runs linear set their own seeds"):
        grids.Study("configs/mlm.py", {}, [grids.Run("linear", {}, seeds=5)], seeds=3, sweep=True)


def test_a_study_that_picks_cannot_be_a_sweep():
    with pytest.raises(ValueError, match="cannot be a W&B sweep"):
        grids.Study("configs/mlm.py", {}, [], seeds=1, sweep=True, pick=grids.Pick("learning_rate", (0.001,), {}))


def test_a_run_none_of_whose_candidates_finished_is_a_failed_run(tmp_path, monkeypatch, capsys):
    study = grids.Study("configs/mlm.py:tiny", {}, [grids.kind_run("softmax")], seeds=1,
                        pick=grids.Pick("learning_rate", (0.001,), {}))
    monkeypatch.setattr(runner, "get_study", lambda task, preset: study)
    monkeypatch.setattr(jobs, "train", FakeTrain(fail=["learning_rate=0.001 seed0"]))
    with pytest.raises(SystemExit):
        _main(tmp_path)
    assert "softmax (every candidate of the pick)" in capsys.readouterr().err


def test_write_report_for_recall_writes_its_tables_plots_and_results(tmp_path):
    path = report.write_report(recall_task, "quick", "python -m scripts.compare --task=recall", RECALL_RESULTS, {},
                               str(tmp_path))
    text = open(path).read()
    assert recall_report.query_accuracy_table(RECALL_RESULTS) in text and recall_report.query_rank_table(RECALL_RESULTS) in text
    for image in (recall_report.PAIRS_PLOT, recall_report.STATE_PLOT, recall_report.RANK_PLOT,
                  recall_report.WIDTH_PLOT):
        assert f"]({image})" in text and (tmp_path / image).stat().st_size > 0
    with open(tmp_path / report.RESULTS_JSON) as f:
        assert json.load(f) == RECALL_RESULTS
    without_sweep = {name: evals for name, evals in RECALL_RESULTS.items() if name != "linear_d4_N16"}
    text = open(report.write_report(recall_task, "quick", "cmd", without_sweep, {}, str(tmp_path / "other"))).read()
    assert recall_report.WIDTH_PLOT not in text and not (tmp_path / "other" / recall_report.WIDTH_PLOT).exists()


def test_a_recall_study_at_one_n_plots_ranks_against_state_not_against_n(tmp_path, monkeypatch):
    one_n = {name: evals for name, evals in RECALL_RESULTS.items() if name.endswith("_N16")}
    text = open(report.write_report(recall_task, "state", "cmd", one_n, {}, str(tmp_path))).read()
    assert f"]({recall_report.RANK_STATE_PLOT})" in text and f"]({recall_report.STATE_PLOT})" in text
    assert recall_report.PAIRS_PLOT not in text and recall_report.RANK_PLOT not in text
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    recall_report.plot_rank_vs_state(one_n, str(tmp_path / "rank.png"))
    monkeypatch.undo()
    (figure,) = figures
    # Rows: effective then numerical rank; columns: layers 0 and 1; a point per run at its state per head.
    effective_0, effective_1, _, numerical_1 = figure.axes[:4]
    assert [ax.get_title() for ax in figure.axes[:4]] == ["layer 0", "layer 1"] * 2
    def points(ax):
        return {tuple(line.get_xydata()[0]) for line in ax.lines if line.get_marker() == "o"}

    # Means over seeds (softmax's layer-0 effective ranks 16 and 15); linear_d4 has no layer 1.
    assert points(effective_0) == {(8192, 15.5), (1024, 7.0), (256, 4.0)}
    assert points(numerical_1) == {(8192, 8.5), (1024, 8.5)} and points(effective_1) == {(8192, 7.5), (1024, 7.5)}
    plt.close(figure)


def test_runs_that_stop_early_report_their_steps_in_epochs_and_whether_they_reached_the_value(tmp_path):
    def stopping(seed, step, validation):
        config = {"seed": seed, "num_train_steps": 1_000, "per_device_batch_size": 512,
                  "dataset": {"train_size": 100_000}, "eval": {"stop_metric": "query_accuracy", "stop_at": 0.99}}
        return {**RECALL_RESULTS["softmax_N16"][0], "step": step, "config": config,
                "runtime": {"device_count": 2}, "validation": {"query_accuracy": validation}}

    results = {"softmax_N16": [stopping(0, 392, 0.995), stopping(1, 1_000, 0.97)],
               "linear_d16_N16": RECALL_RESULTS["linear_d16_N16"]}  # no stop_metric: not in the table
    # 392 steps of 2 x 512 over 100,000 sequences: 4.0 epochs.
    assert tables.stopping_table(results).splitlines()[2:] == [
        "| softmax_N16 | query_accuracy >= 0.99 | 392, 1,000 | 4.0, 10.2 | 0.9950, 0.9700 | 1/2 |"]
    text = open(report.write_report(recall_task, "zoology", "cmd", results, {}, str(tmp_path))).read()
    assert "## Early stopping" in text and tables.stopping_table(results) in text
    assert tables.stopping_table(RECALL_RESULTS) == ""


def test_error_bars_say_what_they_are_and_labels_of_near_points_do_not_overlap():
    assert plots.seeds_note([3, 3]) == "error bars: ± std over 3 seeds (ddof=1)"
    assert plots.seeds_note([2, 3], "bands") == "bands: ± std over 2-3 seeds (ddof=1)"
    assert plots.seeds_note([1]) == "one seed per run: no error bars"
    fig, ax = plt.subplots()
    plots.label_points(ax, [(8192, 1.0, "softmax"), (9792, 1.0, "taylor_d16"), (9792, 1.0, "exp_limit_d16"),
                            (64, 0.1, "local")], log_x=True)
    offsets = [text.xyann for text in ax.texts]
    assert len(set(offsets)) == 4 and offsets[-1] == (5, 3)  # the three at one point on three lines
    plt.close(fig)


def test_listops_accuracy_plots_draw_chance(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    results = {name: [{**result, "metrics": {"accuracy": result["metrics"]["masked_accuracy"], "loss": 1.0}}
                      for result in evals] for name, evals in RESULTS.items()}
    listops_task.report_sections(results, {}, str(tmp_path), 32)
    assert len(figures) == 3  # against feature dim, effective rank and row entropy
    for figure in figures:
        (level,) = [text for text in figure.axes[0].texts if text.get_text().startswith("chance")]
        assert level.get_text() == "chance (1 in 10)" and level.xy[1] == 0.1
    monkeypatch.undo()
    for figure in figures:
        plt.close(figure)


def test_recall_plots_draw_chance_and_a_rank_panel_per_layer(tmp_path):
    figures = []
    original = plt.close
    try:
        plt.close = lambda fig=None: figures.append(fig)
        recall_report.plot_rank_vs_pairs(RECALL_RESULTS, str(tmp_path / "rank.png"))
        recall_report.plot_accuracy_vs_pairs(RECALL_RESULTS, str(tmp_path / "pairs.png"))
    finally:
        plt.close = original
    rank, pairs = figures
    assert [ax.get_title() for ax in rank.axes] == ["layer 0", "layer 1"]
    assert all(ax.get_ylim()[0] == 0 and ax.get_ylim()[1] >= 16 for ax in rank.axes)
    assert any(text.get_text() == "chance (1/128)" for text in pairs.axes[0].texts)
    for fig in figures:
        original(fig)
