"""A task in one file: "name the previous token", defined here as the Task interface (tasks/interface.py)
asks, then trained, evaluated and reported through the lab's generic code (the loop, eval.py's entry, the
study report) without another file knowing it."""
import dataclasses
import functools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import tasks
from analysis import rank_plots, report, tables
from configs import common
from models import MaskedLanguageModel
from training import evaluation, loop, model_config
from training.config_checks import check_int
from training.losses import prediction_loss_and_accuracy, prediction_sums
from training.metrics import read_metrics

VOCAB, LENGTH = 16, 12


@dataclasses.dataclass
class ToyData:
    train: dict
    validation: dict
    test: dict


def _examples(size: int, seed: int) -> dict:
    """Random tokens; at every position but the first the answer is the token before it."""
    inputs = np.random.default_rng(seed).integers(1, VOCAB, (size, LENGTH), dtype=np.int32)
    positions = np.broadcast_to(np.arange(1, LENGTH, dtype=np.int32), (size, LENGTH - 1))
    return {"inputs": inputs, "positions": np.array(positions), "targets": inputs[:, :-1].copy(),
            "weights": np.ones((size, LENGTH - 1), np.float32)}


class PreviousToken:
    NAME = "previous_token"
    METRICS = ("accuracy", "loss")
    PROGRESS_METRIC = "accuracy"
    report_sections = functools.partial(report.rank_study_sections, METRICS)
    allowed_kinds = staticmethod(model_config.registered_kinds)

    def roles(self, config):
        return ("encoder_self",)

    def check_config(self, config):
        check_int(config, "dataset.train_size", 1)

    def prepare_data(self, config, workdir):
        return ToyData(*(_examples(size, seed) for seed, size in enumerate((config.dataset.train_size, 64, 64))))

    def create_model(self, config, data):
        spec = model_config.transformer_spec(config, LENGTH, self.roles(config))
        return MaskedLanguageModel(VOCAB, spec, rngs=nnx.Rngs(params=jax.random.key(config.seed), dropout=1))

    def train_batch(self, config, data, batch_size, step):
        rows = np.random.default_rng([config.seed, step]).integers(0, len(data.train["inputs"]), batch_size)
        return {name: array[rows] for name, array in data.train.items()}

    def metric_sums(self, model, batch, label_smoothing=0.0):
        return prediction_sums(model, batch, jnp.float32(batch["inputs"].size), label_smoothing)

    def summarize(self, sums):
        loss, accuracy = prediction_loss_and_accuracy(sums)
        return {"accuracy": accuracy, "loss": loss}

    def evaluate_model(self, config, workdir, model, data):
        sums = evaluation.model_metric_totals(model, self.metric_sums, data.test, config.eval.batch_size)
        return evaluation.TaskEvaluation("test", len(data.test["inputs"]), self.summarize(sums),
                                         {"encoder_self": LENGTH},
                                         evaluation.encoder_analysis(config, workdir, model, data.test["inputs"], 0, list))


@pytest.fixture
def toy_task(monkeypatch):
    tasks.names()  # the package's own tasks first, then a registry this test may add to
    monkeypatch.setattr(tasks, "_REGISTERED", dict(tasks._REGISTERED))
    return tasks.register(PreviousToken())


def _config(kind: str):
    config = common.base_config(PreviousToken.NAME)
    common.set_tiny_schedule(config)
    config.model.d_model, config.model.mlp_dim = 32, 64
    config.dataset.train_size = 256
    config.attention.name = kind
    return config


def test_a_toy_task_trains_evaluates_and_reports_through_the_generic_code(toy_task, tmp_path):
    results = {}
    for kind in ("softmax", "linear"):
        workdir = str(tmp_path / kind)
        trained = loop.train_and_evaluate(_config(kind), workdir)
        assert loop.evaluate(_config(kind), workdir)["metrics"] == trained["metrics"]  # eval.py's entry
        splits = {record["split"] for record in read_metrics(workdir)}
        assert splits == {"train", "eval"} and trained["task"] == PreviousToken.NAME
        results[kind] = [trained]
    path = report.write_report(toy_task, "tiny", "test", results, {}, str(tmp_path / "report"))
    text = open(path).read()
    assert "# previous_token comparison" in text and tables.accuracy_table(PreviousToken.METRICS, results) in text
    assert os.path.exists(tmp_path / "report" / rank_plots.FEATURE_DIM_PLOT)
    assert json.load(open(tmp_path / "report" / report.RESULTS_JSON)) == results


def test_an_object_lacking_part_of_the_interface_is_refused_by_name(toy_task):
    members = {name: value for name, value in vars(PreviousToken).items() if name != "summarize"}
    with pytest.raises(TypeError, match="lacks summarize"):
        tasks.register(type("WithoutSummarize", (), members)())
    assert tasks.names().count(PreviousToken.NAME) == 1
