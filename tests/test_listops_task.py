"""The ListOps task: token ids, cached splits, the loss with the pooling penalty, and the whole loop."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import listops as listops_config
from data import listops
from training import evaluation, loop, steps
from tasks import listops as task
from training.validate import ConfigError, validate


def _config(tmp_path, arg="tiny"):
    config = listops_config.get_config(arg)
    config.dataset.data_dir = str(tmp_path / "datasets")
    return config


def test_arrays_hold_cls_the_tokens_and_padding():
    examples = [("[MAX 2 9 ]", 9), ("7", 7)]
    arrays = listops.encode(examples, max_length=5)
    assert arrays["inputs"].shape == (2, 6) and arrays["inputs"].dtype == np.int32
    assert arrays["inputs"][1].tolist() == [listops.CLS, 2 + listops.TOKENS.index("7"), *[listops.PAD] * 4]
    assert listops.decode(arrays["inputs"][0]) == ["[CLS]", "[MAX", "2", "9", "]"]
    assert arrays["targets"].tolist() == [[9], [7]] and arrays["weights"].tolist() == [[1.0], [1.0]]
    assert listops.VOCAB_SIZE == 2 + len(listops.TOKENS)


def test_splits_are_generated_once_then_read_from_the_cache(tmp_path, monkeypatch):
    dataset = _config(tmp_path).dataset
    first = listops.cached_arrays(dataset, "validation")
    assert len(first["inputs"]) == dataset.validation_size
    (cached,) = os.listdir(tmp_path / "datasets" / "listops")
    assert cached.endswith("_validation32.npz")
    monkeypatch.setattr(listops, "load_split", lambda *args, **kwargs: pytest.fail("generated again"))
    again = listops.cached_arrays(dataset, "validation")
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    labels = [listops.evaluate(" ".join(listops.decode(row)[1:])) for row in first["inputs"]]
    assert labels == first["targets"][:, 0].tolist()


def test_the_loss_adds_the_pooling_penalty_and_padding_rows_weigh_nothing(tmp_path):
    config = _config(tmp_path, "tiny,pooling=structured")
    data = task.prepare_data(config, str(tmp_path))
    model = task.create_model(config, data)
    model.eval()
    batch = {name: array[:5] for name, array in data.test.items()}
    loss, sums = task.metric_sums(model, batch)
    logits, penalty = model(batch["inputs"])
    cross_entropy = -jax.nn.log_softmax(logits)[np.arange(5), batch["targets"][:, 0]]
    assert float(penalty.min()) > 0
    np.testing.assert_allclose(loss, float(cross_entropy.mean() + penalty.mean()), rtol=1e-5)
    totals = evaluation.model_metric_totals(model, task.metric_sums, batch, batch_size=4)  # 5 rows: one padded batch
    np.testing.assert_allclose([totals["predictions"], totals["loss"]], [5, float(cross_entropy.sum())], rtol=1e-5)


def test_a_few_steps_lower_the_loss(tmp_path):
    config = _config(tmp_path)
    config.num_train_steps = 200  # a schedule still near its peak over the steps below
    data = task.prepare_data(config, str(tmp_path))
    optimizer = steps.create_optimizer(config)
    graphdef, state = steps.init_state(task.create_model(config, data), optimizer)
    train_step = steps.make_train_step(graphdef, optimizer, task.metric_sums, jax.random.key(0))
    batch = task.train_batch(config, data, 16, step=0)
    losses = []
    for _ in range(25):
        state, metrics = train_step(state, jax.tree.map(jnp.asarray, batch))
        losses.append(float(metrics["loss"] / metrics["predictions"]))
    assert losses[-1] < 0.5 * losses[0]


def test_the_whole_loop_writes_eval_json_with_accuracy_ranks_and_pooling(tmp_path):
    config = _config(tmp_path, "tiny,pooling=feed_forward,attention=linear")
    result = loop.train_and_evaluate(config, str(tmp_path / "run"))
    with open(tmp_path / "run" / "eval.json") as f:
        assert json.load(f)["metrics"] == result["metrics"]
    assert (result["task"], result["pooling"], result["num_examples"]) == ("listops", "feed_forward", 48)
    assert set(result["metrics"]) == {"accuracy", "loss", "penalty"} and 0 <= result["metrics"]["accuracy"] <= 1
    assert result["metrics"]["penalty"] == 0.0  # only structured pooling has one
    assert {row["role"] for row in result["rank"]} == {"encoder_self"}
    assert result["state"]["encoder_self"]["kind"] == "linear"


@pytest.mark.parametrize("field, value, message", [
    ("model.pooling", "max", "model.pooling='max' is not allowed; choose one of: cls, mean, feed_forward"),
    ("dataset.min_length", 500, "config.dataset: min_length=500 must be <= max_length=24"),
    ("dataset.max_args", 1, "config.dataset: max_args=1 must be >= 2"),
    ("model.pooling_penalty", -1.0, "pooling_penalty=-1.0 must be a finite number >= 0"),
])
def test_bad_listops_configs_name_the_field(tmp_path, field, value, message):
    config = _config(tmp_path)
    section, name = field.split(".")
    config[section][name] = value
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate(config)
