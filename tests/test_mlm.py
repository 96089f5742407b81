"""The MLM task end to end on tiny text files: loss going down, eval.json, ranks, restore, config errors."""
import json
import math
import os

import jax.numpy as jnp
import numpy as np
import pytest

from configs import mlm as mlm_config
from data import mlm_baselines, mlm_corpus
from data.files import DatasetNotPreparedError
from tasks import mlm
from training import loop, validate
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


def test_eval_py_restores_the_trained_parameters(trained):
    config, workdir, result = trained
    restored = evaluate(config, workdir)
    for name, value in result["metrics"].items():
        assert restored["metrics"][name] == pytest.approx(value, rel=1e-5)


def test_linear_attention_ranks_stay_within_the_feature_dim(text_files, tmp_path):
    config = _config(text_files)
    config.attention.name = "linear"
    data = mlm.prepare_data(config, str(tmp_path))
    result = mlm.evaluate_model(config, str(tmp_path), mlm.create_model(config, data), data, step=0)
    head_dim = config.model.d_model // config.model.num_heads
    assert all(row["rank_bound"] == head_dim for row in result["rank"])
    assert result["rank"][0]["seq_len"] > head_dim  # so that the bound is not trivially met
    assert all(row["numerical_rank"] <= head_dim for row in result["rank"])


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
