"""The MLM task end to end on tiny text files: loss going down, eval.json, ranks, restore, config errors."""
import json
import math
import os

import jax.numpy as jnp
import numpy as np
import pytest

from configs import mlm as mlm_config
from data import mlm_baselines, mlm_corpus, tokenizer
from data.files import DatasetNotPreparedError
from analysis import mlm_report
from tasks import mlm
from training import evaluation, loop, validate
from training.loop import evaluate
from training.metrics import read_metrics


@pytest.fixture(scope="module")
def text_files(tmp_path_factory):
    """Sentences from a small grammar: enough structure for a tiny model to learn from in seconds."""
    rng = np.random.default_rng(0)
    subjects, verbs = ["the cat", "a dog", "the bird", "my friend"], ["sees", "likes", "follows", "finds"]
    objects, places = ["the ball", "a stick", "the mouse", "some food"], ["garden", "house", "park"]

    def sentences(count):
        return "".join(f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(objects)} in the "
                       f"{rng.choice(places)} .\n" for _ in range(count))

    directory = tmp_path_factory.mktemp("text")
    (directory / "train.txt").write_text(sentences(600))
    (directory / "test.txt").write_text(sentences(60))
    return str(directory / "train.txt"), str(directory / "test.txt"), str(directory / "datasets")


def _config(text_files, arg="tiny"):
    config = mlm_config.get_config(arg)
    config.dataset.name = "text_files"
    config.dataset.train_file, config.dataset.test_file, config.dataset.data_dir = text_files
    return config


@pytest.fixture(scope="module")
def trained(text_files, tmp_path_factory):
    config = _config(text_files)
    config.num_train_steps, config.learning_rate = 40, 3e-3
    workdir = str(tmp_path_factory.mktemp("mlm_run"))
    return config, workdir, loop.train_and_evaluate(config, workdir)


def test_a_tiny_run_lowers_its_loss(trained):
    _, workdir, _ = trained
    losses = [line["loss"] for line in read_metrics(workdir) if line["split"] == "train"]
    assert losses[-1] < losses[0] - 0.5, losses


def test_eval_json_follows_the_contract(trained):
    config, workdir, result = trained
    with open(os.path.join(workdir, "eval.json")) as f:
        written = json.load(f)
    assert written == json.loads(json.dumps(result))
    assert (written["step"], written["task"], written["split"]) == (40, "mlm", "test")
    assert written["attention"] == {"encoder_self": "softmax"}
    metrics = written["metrics"]
    assert set(metrics) == {"masked_accuracy", "loss", "perplexity"}
    assert 0.0 <= metrics["masked_accuracy"] <= 1.0
    assert metrics["perplexity"] == pytest.approx(math.exp(metrics["loss"]))
    layers, heads = config.model.num_layers, config.model.num_heads
    assert {(r["role"], r["layer"], r["head"]) for r in written["rank"]} == {
        ("encoder_self", layer, head) for layer in range(layers) for head in range(heads)}
    with open(os.path.join(workdir, "spectra.json")) as f:
        spectra = json.load(f)
    assert list(spectra) == ["encoder_self"] and len(spectra["encoder_self"]) == layers
    assert spectra["encoder_self"][0][0] == pytest.approx(1.0)  # normalised by the largest


def test_eval_json_splits_the_test_positions_into_the_recall_slice_and_the_rest(trained):
    """The two parts add up to the whole: shares to 1, the model's and every baseline's accuracy as the
    share-weighted mean of the parts."""
    _, _, result = trained
    parts = result["recall_slice"]
    assert set(parts) == {"recall", "rest"} and sum(part["share"] for part in parts.values()) == pytest.approx(1)
    assert 0 < parts["recall"]["share"] < 1
    assert set(result["baselines"]) == set(mlm_baselines.BASELINES)
    whole = {"model": result["metrics"]["masked_accuracy"], **result["baselines"]}
    for name, accuracy in whole.items():
        by_part = [part["masked_accuracy"] if name == "model" else part["baselines"][name] for part in parts.values()]
        assert accuracy == pytest.approx(sum(part["share"] * value for part, value in zip(parts.values(), by_part)))


def test_every_validation_reports_the_recall_slice_and_the_rest(trained):
    """text_files validates on its test file, masked the same way: the last validation equals the final
    evaluation, part by part; training windows carry no parts."""
    _, workdir, result = trained
    lines = read_metrics(workdir)
    last = [line for line in lines if line["split"] == "eval"][-1]
    assert last["masked_accuracy"] == pytest.approx(result["metrics"]["masked_accuracy"])
    for part in ("recall", "rest"):
        assert last[f"{part}_masked_accuracy"] == pytest.approx(result["recall_slice"][part]["masked_accuracy"])
    assert not any(key.startswith(("recall_", "rest_")) for line in lines if line["split"] == "train" for key in line)


def test_shape_rows_cover_every_row_and_the_masked_rows_of_each_part(trained, tmp_path):
    """`all` averages every unpadded row of the analysed examples; `recall` and `rest` the rows at their masked
    positions, which together are every masked position of those examples."""
    config, _, result = trained
    test = mlm.prepare_data(config, str(tmp_path)).test
    sample = evaluation.rank_sample(len(test["inputs"]), config.eval.rank_examples)
    recall = mlm_baselines.recall_slice(test["inputs"], test["positions"], test["targets"])[sample]
    masked = test["weights"][sample] > 0
    expected = {"all": int((test["inputs"][sample] != tokenizer.PAD).sum()),
                "recall": int((recall & masked).sum()), "rest": int((~recall & masked).sum())}
    assert 0 < expected["recall"] and 0 < expected["rest"]
    layers, heads = config.model.num_layers, config.model.num_heads
    for name, count in expected.items():
        rows = [row for row in result["shape"] if row["query_rows"] == name]
        assert [(row["layer"], row["head"]) for row in rows] == [(l, h) for l in range(layers) for h in range(heads)]
        assert all(row["rows"] == count and row["role"] == "encoder_self" for row in rows)
        assert all(0 < row["row_entropy"] <= math.log(config.dataset.seq_len) and row["logit_spread"] > 0
                   for row in rows)  # softmax: a spread of its logits


def test_eval_py_restores_the_trained_parameters(trained):
    config, workdir, result = trained
    restored = evaluate(config, workdir)
    for name, value in result["metrics"].items():
        assert restored["metrics"][name] == pytest.approx(value, rel=1e-5)


def test_linear_attention_ranks_stay_within_the_feature_dim(text_files, tmp_path):
    config = _config(text_files)
    config.attention.name = "linear"
    data = mlm.prepare_data(config, str(tmp_path))
    result = evaluation.evaluate_and_write(mlm, config, str(tmp_path), mlm.create_model(config, data), data, 0)
    head_dim = config.model.d_model // config.model.num_heads
    assert all(row["rank_bound"] == head_dim for row in result["rank"])
    assert result["rank"][0]["seq_len"] > head_dim  # so that the bound is not trivially met
    assert all(row["numerical_rank"] <= head_dim for row in result["rank"])


def test_eval_json_gives_each_control_its_negative_mass_and_row_sum_deviation(text_files, tmp_path):
    """eval.json's shape rows of a tiny MLM model: rank-4 softmax's projected rows (by subspace iteration) hold
    negative weight and sums away from 1; the landmark control's rows and softmax's are distributions."""
    config = _config(text_files)
    means = {}
    for kind, options in (("softmax_rank", {"rank": 4, "basis_iterations": 3}), ("landmark_softmax", {"rank": 4}),
                          ("softmax", {})):
        config.attention.name = kind
        for option, value in options.items():
            config.attention[option] = value
        (tmp_path / kind).mkdir()
        data = mlm.prepare_data(config, str(tmp_path))
        result = evaluation.evaluate_and_write(mlm, config, str(tmp_path / kind), mlm.create_model(config, data),
                                               data, 0)
        with open(tmp_path / kind / "eval.json") as f:
            rows = [row for row in json.load(f)["shape"] if row["query_rows"] == "all"]
        assert rows == [row for row in result["shape"] if row["query_rows"] == "all"]
        means[kind] = {name: np.mean([row[name] for row in rows]) for name in ("negative_mass", "row_sum_deviation")}
    assert means["softmax_rank"]["negative_mass"] > 1e-3 and means["softmax_rank"]["row_sum_deviation"] > 1e-3
    for kind in ("landmark_softmax", "softmax"):
        assert means[kind] == {"negative_mass": 0.0, "row_sum_deviation": pytest.approx(0.0, abs=1e-5)}


def test_the_head_on_chosen_positions_equals_the_full_head_gathered(text_files, tmp_path):
    config = _config(text_files)
    data = mlm.prepare_data(config, str(tmp_path))
    model = mlm.create_model(config, data)
    model.eval()
    batch = mlm.train_batch(config, data, 4, step=0)
    full = model(jnp.asarray(batch["inputs"]))
    gathered = np.take_along_axis(np.asarray(full), batch["positions"][..., None], axis=1)
    np.testing.assert_allclose(model(batch["inputs"], batch["positions"]), gathered, atol=1e-5)


@pytest.mark.parametrize("overrides, message", [
    ({"attention.cross": "linear"}, "has no cross attention"),
    ({"dataset.name": "wiki"}, "config.dataset.name='wiki' is not allowed"),
    ({"dataset.name": "tfds", "dataset.train_file": "", "dataset.test_file": ""}, "config.dataset.tfds_name is empty"),
    ({"dataset.name": "pydoc"}, "dataset.train_file='.*' is read only when dataset.name='text_files'"),
    ({"dataset.train_file": "/nonexistent.txt"}, "file not found"),
    ({"dataset.tokenizer": "wordpiece"}, "config.dataset.tokenizer='wordpiece' is not allowed"),
    ({"mlm.mask_token_rate": 0.95}, "exceeds 1"),
    ({"mlm.mask_rate": 0.0}, "nothing to predict"),
])
def test_bad_configs_fail_before_any_data_is_built(text_files, overrides, message):
    config = _config(text_files)
    for dotted, value in overrides.items():
        section, field = dotted.split(".")
        config[section][field] = value
    with pytest.raises(validate.ConfigError, match=message):
        validate.validate(config)


def test_an_unprepared_tfds_dataset_says_how_to_prepare_it(tmp_path):
    config = mlm_config.get_config("tiny")
    config.dataset.name, config.dataset.tfds_name = "tfds", "imdb_reviews"
    config.dataset.data_dir = str(tmp_path)
    with pytest.raises(DatasetNotPreparedError, match="tfds build imdb_reviews"):
        mlm_corpus.load_texts(config.dataset, "train")


def _study_eval(kind: str, seed: int, recall_accuracy: float, rest_accuracy: float) -> dict:
    """An MLM eval.json of a study's run: a recall slice of a quarter of the positions."""
    baselines = {"most_frequent": 0.05, "visible_or_frequent": 0.14, "unigram": 0.01, "bigram": 0.29}
    part = lambda share, accuracy: {"share": share, "masked_accuracy": accuracy, "loss": 2.0,  # noqa: E731
                                    "baselines": baselines}
    return {"config": {"seed": seed}, "attention": {"encoder_self": kind},
            "metrics": {"masked_accuracy": 0.25 * recall_accuracy + 0.75 * rest_accuracy, "loss": 2.0,
                        "perplexity": 7.4},
            "baselines": baselines, "recall_slice": {"recall": part(0.25, recall_accuracy),
                                                     "rest": part(0.75, rest_accuracy)},
            "rank": [{"role": "encoder_self", "layer": layer, "head": 0, "effective_rank": 10.0 + layer + seed,
                      "rank_bound": None if kind == "softmax" else 32} for layer in range(2)]}


def test_a_gap_whose_interval_excludes_zero_is_read_as_a_gap_and_seeds_below_a_baseline_are_counted():
    results = {"softmax": [_study_eval("softmax", seed, 0.6, 0.3) for seed in range(3)],
               "linear": [_study_eval("linear", seed, acc, 0.2) for seed, acc in ((0, 0.4), (1, 0.5), (2, 0.6))]}
    # Overall differences -0.125, -0.1, -0.075: mean -0.1, std 0.025; linear's seeds 0 and 1 (0.25, 0.275) sit
    # below the bigram's 0.29.
    half_width = 4.302653 * 0.025 / math.sqrt(3)
    assert (f"- linear against softmax: -10.0 points (95% CI {-10 - 100 * half_width:+.1f} to "
            f"{-10 + 100 * half_width:+.1f}) overall" in mlm_report.gap_reading(results))
    assert mlm_report.recall_slice_table(results).splitlines()[3].endswith("| 1/3 |")


def test_the_report_gives_each_kind_against_softmax_with_a_95_percent_interval_paired_by_seed():
    # Seeds listed out of order: the pairing goes by config.seed. Differences on the slice: -0.1, -0.15, -0.05.
    results = {"softmax": [_study_eval("softmax", seed, acc, 0.3) for seed, acc in ((0, 0.5), (1, 0.6), (2, 0.7))],
               "linear": [_study_eval("linear", seed, acc, 0.3) for seed, acc in ((2, 0.65), (0, 0.4), (1, 0.45))]}
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in mlm_report.recall_slice_table(results).splitlines()[2:]}
    half_width = 4.302653 * 0.05 / math.sqrt(3)  # t(0.975, 2) x std / sqrt(n)
    assert rows["linear"][-2] == f"-0.1000 ± {half_width:.4f}"
    assert rows["linear"][-3] == f"{0.25 * -0.1:+.4f} ± {0.25 * half_width:.4f}"
    assert rows["softmax"][-2] == "-"  # the reference itself
    assert rows["softmax"][-1] == rows["linear"][-1] == "3/3 |"  # 0.325 and more, above the bigram's 0.29
    assert (f"- linear against softmax: no gap larger than {100 * 0.25 * half_width + 2.5:.1f} points detectable "
            in mlm_report.gap_reading(results))
    assert f"no gap larger than {100 * half_width + 10:.1f} points detectable (-10.0, 95% CI" in mlm_report.gap_reading(results)
    assert "| bigram | 0.2900 | 0.2900 | 0.2900 |" in mlm_report.baseline_table(results)


def _curve_eval(kind, seed, seq_len, centred, curve):
    """An eval.json of a run at `seq_len`, with or without the centred convolution, and its validation curve
    (step -> (accuracy, recall slice accuracy))."""
    result = _study_eval(kind, seed, 0.5, 0.3)
    result["config"] = {"seed": seed, "dataset": {"seq_len": seq_len},
                        "model": {"conv_kernel": 3, "conv_centered": centred}}
    result["validation_curve"] = [{"step": step, "split": "eval", "masked_accuracy": all_, "recall_masked_accuracy": recall}
                                  for step, (all_, recall) in curve.items()]
    return result


def test_each_run_is_held_to_the_softmax_run_trained_alike_at_every_validation():
    curve = {500: (0.30, 0.40), 1000: (0.40, 0.50)}
    results = {
        "softmax": [_curve_eval("softmax", seed, 128, False, curve) for seed in range(2)],
        "linear": [_curve_eval("linear", seed, 128, False, {500: (0.20, 0.20), 1000: (0.35 + 0.02 * seed, 0.40)})
                   for seed in range(2)],
        "softmax_L512": [_curve_eval("softmax", seed, 512, False, curve) for seed in range(2)],
        "linear_L512": [_curve_eval("linear", seed, 512, False, {500: (0.10, 0.10), 1000: (0.20, 0.25)})
                        for seed in range(2)],
        "linear_centred": [_curve_eval("linear", seed, 128, True, curve) for seed in range(2)],  # no softmax alike
    }
    assert [mlm_report._reference_name(evals, results) for evals in results.values()] == [
        None, "softmax", None, "softmax_L512", None]
    gaps = mlm_report.gaps_over_steps(results)
    assert list(gaps) == ["all", "recall slice"] and list(gaps["all"]) == ["linear", "linear_L512"]
    (step, mean, half), (last_step, last_mean, last_half) = gaps["all"]["linear"]
    assert (step, last_step) == (500, 1000) and mean == pytest.approx(-0.10) and half == pytest.approx(0.0)
    # Differences -0.05 and -0.03: t(0.975, 1) x std / sqrt(2) = 12.7062 x 0.014142 / 1.414214.
    assert last_mean == pytest.approx(-0.04) and last_half == pytest.approx(12.7062 * 0.01, rel=1e-4)
    assert gaps["recall slice"]["linear_L512"] == [(500, pytest.approx(-0.30), 0.0), (1000, pytest.approx(-0.25), 0.0)]
    table = mlm_report.gaps_over_steps_table(gaps).splitlines()
    assert table[0] == "| run | positions | step 500 | step 1,000 |"
    assert table[2] == "| linear | all | -10.0 ± 0.0 | -4.0 ± 12.7 |"
