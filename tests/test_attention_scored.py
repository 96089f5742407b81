"""Softmax-over-scores kinds: what each adds beyond the contract of tests/kind_harness.py (dropout, hard
attention's straight-through gradient and ties, local windows, initial parameters, unequal widths)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention
import reference_scored as ref
import kind_harness as harness
from kind_harness import B, D, H, L, SETTINGS

pytestmark = pytest.mark.accelerator  # make test-accelerator runs these on the GPU or TPU

KINDS = ("dot", "scaled_dot", "multiplicative", "additive", "gaussian", "local", "local_predictive", "hard",
         "forced_forward")
WINDOW = ref.WINDOW


def _create(name, **options):
    return attention.create(name, num_heads=H, head_dim=D, rngs=nnx.Rngs(0), **options)


def _gradients(module, q, k, v, mask, causal, cotangent):
    """Gradients of sum(cotangent * output) w.r.t. q, k, v and the module's parameters (by name)."""
    graphdef, params, rest = nnx.split(module, nnx.Param, ...)

    def loss(params, q, k, v):
        return (nnx.merge(graphdef, params, rest)(q, k, v, mask, causal=causal) * cotangent).sum()

    param_grads, *input_grads = jax.grad(loss, (0, 1, 2, 3))(params, q, k, v)
    return input_grads, {name: grad[...] for name, grad in param_grads.items()}


def test_dropout_acts_in_training_only():
    q, k, v, key_valid = harness.inputs(seed=7)
    module = _create("dot", dropout_rate=0.5)  # its fast path must step aside for dropout
    args = harness.f32(q, k, v)
    train = module(*args, harness.mask(key_valid))
    module.eval()
    expected = jnp.einsum("bhqk,bkhd->bqhd", module.weights(*args[:2], harness.mask(key_valid)), args[2])
    np.testing.assert_allclose(module(*args, harness.mask(key_valid)), expected, atol=2e-5)
    assert not np.allclose(train, expected, atol=1e-3)


def test_hard_forward_is_top_k_and_backward_is_soft():
    q, k, v, key_valid = harness.inputs(seed=8)
    args, mask = harness.f32(q, k, v), harness.mask(key_valid)
    hard, soft = _create("hard", top_k=1), _create("scaled_dot")
    weights = np.asarray(hard.weights(*args[:2], mask, causal=True))
    assert np.all((weights == 0) | np.isclose(weights, 1.0))
    np.testing.assert_array_equal((weights > 0).sum(-1), 1)  # every row has an allowed key
    # Straight-through: the weights' cotangent reaches q and k through the soft softmax.
    cotangent = jnp.asarray(np.random.default_rng(9).normal(size=(B, L, H, D)), jnp.float32)
    (hard_dq, hard_dk, _), _ = _gradients(hard, *args, mask, True, cotangent)
    (soft_dq, soft_dk, _), _ = _gradients(soft, *args, mask, True, cotangent)
    np.testing.assert_allclose(hard_dq, soft_dq, atol=1e-6)
    np.testing.assert_allclose(hard_dk, soft_dk, atol=1e-6)


def test_hard_with_fewer_allowed_keys_than_top_k_attends_to_all_of_them():
    q, k, v, key_valid = harness.inputs(seed=11)
    module = _create("hard", top_k=L + 5)
    allowed = harness.allowed(key_valid, L, True)
    got = module.weights(*harness.f32(q, k), harness.mask(key_valid), causal=True)
    np.testing.assert_allclose(got, ref.scaled_dot(np, q, k, allowed, {}), atol=2e-6)


def test_hard_breaks_ties_towards_the_lowest_key_index():
    q, k, _, key_valid = harness.inputs(seed=12)
    k[:, 3] = k[:, 5] = k[:, 8] = 10 * q[:, 0]  # three equal keys, far ahead of the rest for query 0
    weights = np.asarray(_create("hard", top_k=1).weights(*harness.f32(q, k), harness.mask(key_valid)))
    np.testing.assert_array_equal(weights[:, :, 0].argmax(-1), 3)
    np.testing.assert_array_equal((weights[:, :, 0] > 0).sum(-1), 1)


@pytest.mark.parametrize("setting", ["padding", "cross"])
def test_local_weights_are_zero_outside_the_window(setting):
    lq, lk, _ = SETTINGS[setting]
    q, k, _, key_valid = harness.inputs(seed=13, lq=lq, lk=lk)
    allowed = harness.allowed(key_valid, lq, False)
    local = np.asarray(_create("local").weights(*harness.f32(q, k), harness.mask(key_valid)))
    distance = np.abs(np.arange(lk)[None, :] - ref.local_m_positions(lq, lk)[:, None])
    inside = distance <= WINDOW
    assert np.all(local[..., ~inside] == 0) and np.all(local[..., inside][allowed[..., inside]] > 0)
    module = harness.create("local_predictive")
    predictive = np.asarray(module.weights(*harness.f32(q, k), harness.mask(key_valid)))
    positions = ref.local_p_positions(np, q, allowed, harness.module_arrays(module))
    outside = np.abs(np.arange(lk) - positions[..., None]) > WINDOW + 1e-4
    assert outside.any() and np.all(predictive[outside] == 0)


def test_local_predictive_rows_sum_to_less_than_one_and_gradient_reaches_its_position_parameters():
    q, k, v, key_valid = harness.inputs(seed=14)
    module = _create("local_predictive")
    args, mask = harness.f32(q, k, v), harness.mask(key_valid)
    row_sums = np.asarray(module.weights(*args[:2], mask).sum(-1))
    assert np.all(row_sums <= 1 + 1e-6) and np.all(row_sums >= np.exp(-2) - 1e-6) and np.any(row_sums < 0.99)
    _, param_grads = _gradients(module, *args, mask, False, jnp.ones((B, L, H, D)))
    for name in ("position_projection", "position_vector"):
        assert np.all(np.abs(param_grads[name]).sum(axis=tuple(range(1, param_grads[name].ndim))) > 0), name


def test_initial_parameters_start_near_scaled_dot_product():
    q, k, _, _ = harness.inputs(seed=15)
    scaled = _create("scaled_dot").weights(*harness.f32(q, k))
    np.testing.assert_allclose(_create("multiplicative").weights(*harness.f32(q, k)), scaled, atol=1e-6)
    precision = jax.nn.softplus(harness.module_arrays(_create("gaussian"))["raw_precision"])
    np.testing.assert_allclose(precision, D**-0.5, rtol=1e-6)


def test_additive_takes_queries_and_keys_of_different_sizes():
    rng = np.random.default_rng(16)
    q, k, v = rng.normal(size=(B, 5, H, 6)), rng.normal(size=(B, 9, H, D)), rng.normal(size=(B, 9, H, D))
    module = _create("additive", query_dim=6)
    params = harness.module_arrays(module)
    assert params["query_projection"].shape == (H, 6, D) and params["key_projection"].shape == (H, D, D)
    expected = np.einsum("bhqk,bkhd->bqhd", ref.additive(np, q, k, np.ones((B, H, 5, 9), bool), params), v)
    np.testing.assert_allclose(module(*harness.f32(q, k, v)), expected, atol=2e-5, rtol=2e-5)


def test_kinds_resolve_by_name_and_take_their_options():
    assert set(KINDS) <= set(attention.names())
    assert attention.registry.get("scaled_dot") is attention.registry.get("softmax")
    assert all(_create(name).feature_dim is None for name in KINDS)
    assert attention.options("additive") == ("dropout_rate", "hidden_dim", "query_dim", "key_dim")
    assert attention.options("local") == attention.options("local_predictive") == ("dropout_rate", "window")
    assert attention.options("hard") == ("dropout_rate", "top_k")
    default_hard = attention.create("hard", num_heads=H, head_dim=D, rngs=nnx.Rngs(0))
    assert _create("local").window == 3 and default_hard.top_k == 1
    with pytest.raises(ValueError, match="window=0 must be an integer >= 1"):
        _create("local_predictive", window=0)


def test_forced_forward_spreads_a_repeated_query_evenly_after_its_first_step():
    """With the same query at every step, e'_ti = exp(e_i) / (t exp(e_i)) = 1 / t for t >= 1: whatever the first
    step preferred, later steps are uniform over the allowed keys."""
    q, k, _, key_valid = harness.inputs(seed=14, lq=5, lk=9)
    q[:] = q[:, :1]
    weights = np.asarray(harness.create("forced_forward").weights(*harness.f32(q, k), harness.mask(key_valid)))
    uniform = key_valid / key_valid.sum(-1, keepdims=True)
    np.testing.assert_allclose(weights[:, :, 1:], np.broadcast_to(uniform[:, None, None], (B, H, 4, 9)), atol=1e-6)
    assert np.all(weights[:, :, 0].max(-1) > 2 * uniform.max(-1)[:, None])


@pytest.mark.parametrize("causal", [False, True])
def test_local_says_it_narrows_the_keys_exactly_where_its_window_drops_one(causal):
    """The fused softmax path (cuDNN) takes key lengths and the causal flag only, so a kind whose window
    drops any key the mask would allow must keep its own mask: between window + 2 and 2 window + 1 keys a
    bidirectional window drops keys of the edge queries alone."""
    local = _create("local")
    for length in range(1, 3 * WINDOW + 3):
        q, k, _, _ = harness.inputs(seed=15, lq=length, lk=length)
        weights = np.asarray(local.weights(*harness.f32(q, k), None, causal=causal))
        unrestricted = np.tril(np.ones((length, length), bool)) if causal else np.ones((length, length), bool)
        assert local.narrows_keys(length) == bool((weights[..., unrestricted] == 0).any()), length
