"""Every registered kind, in every role of the translation model, takes training steps with finite values,
and is tested against a dense reference and at inputs of norm 10."""
import jax
import numpy as np
import pytest

import attention
import test_attention
import test_attention_linear
import test_attention_scored
from attention import registry
from data import pipeline
from training import steps, translation, validate

# The tests that hold kinds to a dense reference, and those that give them inputs of norm 10: a kind counts
# as covered by the values of their `name` parametrization, so only a test that runs on it can cover it.
DENSE_REFERENCE_TESTS = (test_attention.test_output_and_weights_match_dense_reference,
                         test_attention_scored.test_output_and_weights_match_numpy_reference,
                         test_attention_linear.test_output_and_weights_match_dense_reference)
LARGE_NORM_TESTS = (test_attention_scored.test_large_norms_and_a_fully_masked_row_stay_finite,
                    test_attention_linear.test_outputs_and_gradients_stay_finite_for_large_inputs)


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


def _kinds_run_by(tests):
    return {kind for test in tests for mark in test.pytestmark
            if mark.name == "parametrize" and mark.args[0] == "name" for kind in mark.args[1]}


@pytest.mark.parametrize("tests", [DENSE_REFERENCE_TESTS, LARGE_NORM_TESTS], ids=["dense_reference", "norm_10"])
def test_every_kind_is_tested(tests):
    # Names registered to one class run the same code: a test of scaled_dot is one of softmax.
    tested = {registry.get(kind) for kind in _kinds_run_by(tests)}
    assert [name for name in attention.names() if registry.get(name) not in tested] == []
