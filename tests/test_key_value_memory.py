"""Key-value(-predict) memory against a reference written here with a loop over positions.

The reference is written against an array module `xp`: with numpy (float64) it checks the outputs, with
jax.numpy it is differentiated for the gradients. It picks each step's keys by listing them, so it
shares neither the band gather nor the masked softmax with the module.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from models.key_value_memory import KeyValueMemory

pytestmark = pytest.mark.accelerator  # make test-accelerator runs these on the GPU or TPU

B, LT, HIDDEN = 2, 7, 12
# window 2 over example 1's padded positions 3 and 4 leaves step 5 with no key at all.
VARIANTS = {"key_value": dict(predict=False, window=2), "key_value_predict": dict(predict=True, window=3)}
VALID = np.array([[True] * 5 + [False] * 2,  # padding at the end
                  [True] * 3 + [False] * 2 + [True] * 2])  # padding mid-sequence


def _module(variant, seed=10):
    """The module with every parameter moved off its initial value, so each weight matters."""
    module = KeyValueMemory(HIDDEN, rngs=nnx.Rngs(0), **VARIANTS[variant])
    rng = np.random.default_rng(seed)
    params = nnx.state(module, nnx.Param)
    nnx.update(module, jax.tree.map(lambda p: p + 0.3 * jnp.asarray(rng.normal(size=p.shape), p.dtype), params))
    return module


def _params(module):
    return nnx.to_pure_dict(nnx.state(module, nnx.Param))


def _states(seed=0):
    return np.random.default_rng(seed).normal(size=(B, LT, HIDDEN))


def reference(xp, params, states, valid, window, predict):
    """Daniluk et al.'s key-value(-predict) attention, one position t of one example at a time."""
    parts = 3 if predict else 2
    size = states.shape[-1] // parts
    rows = []
    for b in range(states.shape[0]):
        keys, values = states[b, :, :size], states[b, :, size : 2 * size]
        inputs = states[b, :, (parts - 1) * size :]
        for t in range(states.shape[1]):
            attended = [j for j in range(max(0, t - window), t) if valid[b, j]]
            read = xp.zeros(size)
            if attended:
                query = keys[t] @ params["query_projection"]["kernel"]
                scores = xp.stack([xp.tanh(keys[j] @ params["key_projection"]["kernel"] + query)
                                   @ params["score_vector"] for j in attended])
                weights = xp.exp(scores - scores.max())
                weights = weights / weights.sum()
                read = sum(weight * values[j] for weight, j in zip(weights, attended))
            rows.append(xp.tanh(read @ params["read_projection"]["kernel"] + inputs[t]
                                @ params["input_projection"]["kernel"] + params["input_projection"]["bias"]))
    return xp.stack(rows).reshape(states.shape)


@pytest.mark.parametrize("variant", VARIANTS)
def test_parallel_matches_reference(variant):
    module, states = _module(variant), _states()
    params = jax.tree.map(lambda p: np.asarray(p, np.float64), _params(module))
    expected = reference(np, params, states, VALID, **VARIANTS[variant])
    actual = module(jnp.asarray(states, jnp.float32), jnp.asarray(VALID))
    np.testing.assert_allclose(actual, expected, atol=2e-5)


@nnx.jit
def _decode(module, states, valid):
    """Every position through `step` in one scan, the position traced."""
    def step(state, position):
        h, h_valid, index = position
        output, state = module.step(state, h, h_valid, index)
        return state, output

    positions = (jnp.swapaxes(states, 0, 1), valid.T, jnp.arange(states.shape[1], dtype=jnp.int32))
    _, outputs = jax.lax.scan(step, module.init_state(states.shape[0]), positions)
    return jnp.swapaxes(outputs, 0, 1)


@pytest.mark.parametrize("variant", VARIANTS)
def test_step_matches_parallel(variant):
    module, states, valid = _module(variant), jnp.asarray(_states(1), jnp.float32), jnp.asarray(VALID)
    np.testing.assert_allclose(_decode(module, states, valid), module(states, valid), atol=2e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_gradients_match_reference(variant):
    module, states, valid = _module(variant), jnp.asarray(_states(2), jnp.float32), jnp.asarray(VALID)
    graphdef, params = nnx.split(module, nnx.Param)
    cotangent = jnp.asarray(np.random.default_rng(3).normal(size=states.shape), jnp.float32)

    def module_loss(params, states):
        return jnp.sum(nnx.merge(graphdef, params)(states, valid) * cotangent)

    def reference_loss(params, states):
        return jnp.sum(reference(jnp, params, states, VALID, **VARIANTS[variant]) * cotangent)

    def gradients(loss, params):
        # Jitted: the reference's loop is hundreds of tiny ops, slower run one by one than compiled once.
        return jax.jit(jax.grad(loss, argnums=(0, 1)))(params, states)

    param_grads, state_grads = gradients(module_loss, params)
    expected_params, expected_states = gradients(reference_loss, nnx.to_pure_dict(params))
    assert np.all(np.isfinite(state_grads))  # assert_allclose would take NaN for NaN
    np.testing.assert_allclose(state_grads, expected_states, rtol=1e-4, atol=1e-5)
    for actual, expected in zip(jax.tree.leaves(nnx.to_pure_dict(param_grads)), jax.tree.leaves(expected_params)):
        assert np.all(np.isfinite(actual)) and np.any(actual != 0)
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_state_is_window_sized(variant):
    module = _module(variant)
    window, part = VARIANTS[variant]["window"], HIDDEN // (3 if VARIANTS[variant]["predict"] else 2)
    state = module.init_state(B, jnp.bfloat16)
    assert {name: array.shape for name, array in state.items()} == {
        "keys": (B, window, part), "values": (B, window, part), "valid": (B, window)}
    assert state["keys"].dtype == jnp.bfloat16 and not state["valid"].any()


@pytest.mark.parametrize("hidden_dim, window, predict, field", [
    (10, 2, True, "model.d_model"), (9, 2, False, "model.d_model"), (12, 0, False, "model.memory_window")])
def test_rejects_bad_config(hidden_dim, window, predict, field):
    with pytest.raises(ValueError, match=field):
        KeyValueMemory(hidden_dim, window, predict=predict, rngs=nnx.Rngs(0))
