"""Every registered kind, in every role of the translation model, takes training steps with finite values."""
import jax
import numpy as np
import pytest

import attention
from data import pipeline
from training import steps, translation, validate


@pytest.mark.parametrize("kind", attention.names())
def test_every_kind_trains_in_every_role(kind, tiny_config, tmp_path):
    config = tiny_config()
    config.attention.name = kind
    config.weight_decay = 0.0  # decay would move every parameter, gradient or not
    validate.validate(config)
    data = translation.prepare_data(config, str(tmp_path))
    model = translation.create_model(config, data)
    optimizer = steps.create_optimizer(config)
    graphdef, state = steps.init_state(model, optimizer)
    before = jax.tree.map(np.array, state["params"])
    train_step = steps.make_train_step(graphdef, optimizer, translation.metric_sums, jax.random.key(0))
    for step in range(2):
        state, metrics = train_step(state, pipeline.batch_at_step(data.train, 8, seed=0, step=step))
        assert np.isfinite(float(metrics["loss"])) and np.isfinite(float(metrics["grad_norm"]))
        assert bool(metrics["finite"]) and float(metrics["grad_norm"]) > 0
    changed = jax.tree.map(lambda a, b: not np.array_equal(a, b), before, jax.device_get(state["params"]))
    assert all(jax.tree.leaves(changed)), "every parameter (including kind-specific ones) gets updates"
