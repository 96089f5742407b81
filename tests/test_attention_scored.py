"""Softmax-over-scores kinds against dense references written here.

Each reference is one formula written against an array module `xp`: run with numpy (float64) it is the
plain-numpy reference for outputs and weights, run with jax.numpy it is differentiated for gradients.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention
import attention.hard  # noqa: F401  (registration side effect)
import attention.local  # noqa: F401
import attention.forced_forward  # noqa: F401
import attention.scored  # noqa: F401

pytestmark = pytest.mark.accelerator  # make test-accelerator runs these on the GPU or TPU

B, L, H, D = 2, 13, 3, 4
WINDOW, TOP_K = 3, 2
KINDS = ("dot", "scaled_dot", "multiplicative", "additive", "gaussian", "local", "local_predictive", "hard",
         "forced_forward")
OPTIONS = {"hard": {"top_k": TOP_K}}
SETTINGS = {"padding": (L, L, False), "causal": (L, L, True), "cross": (5, 9, False)}  # Lq, Lk, causal


def _inputs(seed=0, lq=L, lk=L, norm=None):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(B, lq, H, D))
    k = rng.normal(size=(B, lk, H, D))
    v = rng.normal(size=(B, lk, H, D))
    if norm is not None:
        q, k = (x * norm / np.linalg.norm(x, axis=-1, keepdims=True) for x in (q, k))
    key_valid = np.ones((B, lk), bool)
    key_valid[0, lk - 4 :] = False  # example 0 has 4 padded keys
    return q, k, v, key_valid


def _allowed(key_valid, lq, causal):
    allowed = np.broadcast_to(key_valid[:, None, None, :], (B, H, lq, key_valid.shape[1]))
    if causal:
        allowed = allowed & np.tril(np.ones((lq, lq), bool))
    return allowed


def _create(name, **options):
    options = OPTIONS.get(name, {}) | options
    return attention.create(name, num_heads=H, head_dim=D, rngs=nnx.Rngs(0), **options)


def _params(module):
    state = nnx.state(module, nnx.Param)
    return {name: np.asarray(variable[...], np.float64) for name, variable in state.items()}


def _randomise_params(module, seed=10):
    """Moves every parameter off its initial value (multiplicative starts as scaled dot exactly)."""
    rng = np.random.default_rng(seed)
    for name, value in _params(module).items():
        getattr(module, name)[...] = jnp.asarray(value + 0.5 * rng.normal(size=value.shape), jnp.float32)
    return module


# ---- references: one formula per kind, for xp = numpy or jax.numpy -------------------------------

def _softmax(xp, scores, allowed):
    scores = xp.where(allowed, scores, -1e30)
    exp = xp.exp(scores - scores.max(-1, keepdims=True)) * allowed
    return exp / xp.maximum(exp.sum(-1, keepdims=True), 1e-30)


def _dot(xp, q, k):
    return xp.einsum("bqhd,bkhd->bhqk", q, k)


def _scaled_dot(xp, q, k):
    return _dot(xp, q, k) / np.sqrt(q.shape[-1])


def _sigmoid(xp, x):
    return 1 / (1 + xp.exp(-x))


def ref_dot(xp, q, k, allowed, params):
    return _softmax(xp, _dot(xp, q, k), allowed)


def ref_scaled_dot(xp, q, k, allowed, params):
    return _softmax(xp, _scaled_dot(xp, q, k), allowed)


def ref_multiplicative(xp, q, k, allowed, params):
    return _softmax(xp, xp.einsum("bqhd,hde,bkhe->bhqk", q, params["bilinear"], k), allowed)


def ref_additive(xp, q, k, allowed, params):
    hidden_q = xp.einsum("bqhd,hde->bhqe", q, params["query_projection"])
    hidden_k = xp.einsum("bkhd,hde->bhke", k, params["key_projection"])
    scores = xp.einsum("bhqke,he->bhqk", xp.tanh(hidden_q[:, :, :, None] + hidden_k[:, :, None]),
                       params["score_vector"])
    return _softmax(xp, scores, allowed)


def ref_gaussian(xp, q, k, allowed, params):
    squared_distance = ((q[:, :, None] - k[:, None]) ** 2).sum(-1).transpose(0, 3, 1, 2)
    precision = xp.log1p(xp.exp(params["raw_precision"]))
    return _softmax(xp, -precision[:, None, None] / 2 * squared_distance, allowed)


def _local_m_positions(lq, lk):
    return np.floor(np.arange(lq) * (lk - 1) / (lq - 1) + 0.5)


def ref_local(xp, q, k, allowed, params):
    lq, lk = q.shape[1], k.shape[1]
    band = np.abs(np.arange(lk)[None, :] - _local_m_positions(lq, lk)[:, None]) <= WINDOW
    return _softmax(xp, _scaled_dot(xp, q, k), xp.logical_and(allowed, band))


def _local_p_positions(xp, q, allowed, params):
    last_allowed_key = (np.arange(allowed.shape[-1]) * allowed).max(-1)
    hidden = xp.tanh(xp.einsum("bqhd,hde->bhqe", q, params["position_projection"]))
    return last_allowed_key * _sigmoid(xp, xp.einsum("bhqe,he->bhq", hidden, params["position_vector"]))


def ref_local_predictive(xp, q, k, allowed, params):
    distance = np.arange(k.shape[1]) - _local_p_positions(xp, q, allowed, params)[..., None]
    in_window = xp.logical_and(allowed, xp.abs(distance) <= WINDOW)
    gaussian = xp.exp(-(distance**2) / (2 * (WINDOW / 2) ** 2))
    return _softmax(xp, _scaled_dot(xp, q, k), in_window) * gaussian


def ref_hard(xp, q, k, allowed, params, top_k=TOP_K):
    scores = _scaled_dot(xp, q, k)
    # Allowed keys by decreasing score, ties by increasing index (a stable sort); disallowed ones last.
    order = xp.argsort(xp.where(allowed, -scores, np.inf), axis=-1, stable=True)
    rank = xp.argsort(order, axis=-1)
    soft = _softmax(xp, scores, allowed)
    hard = _softmax(xp, scores, xp.logical_and(allowed, rank < top_k))
    return hard if xp is np else soft + jax.lax.stop_gradient(hard - soft)


def ref_forced_forward(xp, q, k, allowed, params):
    """Paulus et al.'s intra-temporal attention as written, row by row: e'_ti = exp(e_ti) / sum exp(e_ji) over
    the earlier rows j that were allowed key i (exp(e_ti) where none was), then normalised over i."""
    exp = xp.exp(xp.einsum("bqhd,hde,bkhe->bhqk", q, params["bilinear"], k)) * allowed
    rows = []
    for t in range(q.shape[1]):
        received = exp[:, :, :t].sum(2)
        attended_before = allowed[:, :, :t].any(2)
        row = exp[:, :, t] / xp.where(attended_before, received, 1.0)
        rows.append(row / xp.maximum(row.sum(-1, keepdims=True), 1e-30))
    return xp.stack(rows, axis=2)


REFERENCES = {name: globals()[f"ref_{name}"] for name in KINDS}


def _mask(key_valid):
    return jnp.asarray(key_valid[:, None, None, :])


def _f32(*arrays):
    return [jnp.asarray(x, jnp.float32) for x in arrays]


# ---- tests ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("name", KINDS)
def test_output_and_weights_match_numpy_reference(name, setting):
    lq, lk, causal = SETTINGS[setting]
    q, k, v, key_valid = _inputs(lq=lq, lk=lk)
    module = _randomise_params(_create(name))
    expected_weights = REFERENCES[name](np, q, k, _allowed(key_valid, lq, causal), _params(module))
    expected = np.einsum("bhqk,bkhd->bqhd", expected_weights, v)
    args = _f32(q, k, v)
    np.testing.assert_allclose(module(*args, _mask(key_valid), causal=causal), expected, atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(module.weights(*args[:2], _mask(key_valid), causal=causal), expected_weights,
                               atol=2e-6)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", KINDS)
def test_without_a_mask_every_kind_matches_numpy_reference(name, causal):
    """No padding mask (the recall model's sequences have none): the fast paths a kind may take then
    (jax.nn.dot_product_attention with is_causal) must keep what the kind narrows, e.g. local's window."""
    q, k, v, _ = _inputs(seed=21)
    module = _randomise_params(_create(name))
    every_key = np.ones((B, L), bool)
    expected = np.einsum("bhqk,bkhd->bqhd", REFERENCES[name](np, q, k, _allowed(every_key, L, causal),
                                                              _params(module)), v)
    np.testing.assert_allclose(module(*_f32(q, k, v), None, causal=causal), expected, atol=2e-5, rtol=2e-5)


def _gradients(module, q, k, v, mask, causal, cotangent):
    """Gradients of sum(cotangent * output) w.r.t. q, k, v and the module's parameters (by name)."""
    graphdef, params, rest = nnx.split(module, nnx.Param, ...)

    def loss(params, q, k, v):
        return (nnx.merge(graphdef, params, rest)(q, k, v, mask, causal=causal) * cotangent).sum()

    param_grads, *input_grads = jax.grad(loss, (0, 1, 2, 3))(params, q, k, v)
    return input_grads, {name: grad[...] for name, grad in param_grads.items()}


@pytest.mark.parametrize("name", KINDS)
def test_gradients_match_jnp_reference(name):
    # Causal and padding masks at once: compiling the backward pass of each kind dominates this file.
    q, k, v, key_valid = _inputs(seed=3)
    causal = True
    allowed = _allowed(key_valid, L, causal)
    cotangent = jnp.asarray(np.random.default_rng(4).normal(size=(B, L, H, D)), jnp.float32)
    module = _randomise_params(_create(name))

    def dense(params, q, k, v):
        weights = REFERENCES[name](jnp, q, k, allowed, params)
        return (jnp.einsum("bhqk,bkhd->bqhd", weights, v) * cotangent).sum()

    params = {param: jnp.asarray(value, jnp.float32) for param, value in _params(module).items()}
    want_params, *want_inputs = jax.grad(dense, (0, 1, 2, 3))(params, *_f32(q, k, v))
    got_inputs, got_params = _gradients(module, *_f32(q, k, v), _mask(key_valid), causal, cotangent)
    for got, want in zip(got_inputs, want_inputs):
        np.testing.assert_allclose(got, want, atol=5e-5, rtol=5e-5)
    assert got_params.keys() == want_params.keys()
    for param in want_params:
        np.testing.assert_allclose(got_params[param], want_params[param], atol=5e-5, rtol=5e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", KINDS)
def test_output_ignores_masked_and_future_keys(name, causal):
    q, k, v, key_valid = _inputs(seed=5)
    module = _create(name)
    out = module(*_f32(q, k, v), _mask(key_valid), causal=causal)
    k2, v2 = k.copy(), v.copy()
    k2[~key_valid], v2[~key_valid] = 100.0, -100.0  # garbage in padded keys
    if causal:  # and in the future of query 6: only its outputs up to 6 must stay
        k2[:, 7:], v2[:, 7:] = 50.0, 50.0
    out2 = module(*_f32(q, k2, v2), _mask(key_valid), causal=causal)
    upto = 7 if causal else L
    np.testing.assert_allclose(out2[:, :upto], out[:, :upto], atol=1e-5)


@pytest.mark.parametrize("name", KINDS)
def test_large_norms_and_a_fully_masked_row_stay_finite(name):
    q, k, v, key_valid = _inputs(seed=6, norm=10.0)
    mask = np.broadcast_to(_mask(key_valid), (B, 1, L, L)).copy()
    mask[:, :, 2] = False  # query 2 may attend to nothing
    module = _randomise_params(_create(name))
    args = _f32(q, k, v)
    out = module(*args, jnp.asarray(mask), causal=True)
    weights = module.weights(*args[:2], jnp.asarray(mask), causal=True)
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(weights))
    assert np.all(np.asarray(out)[:, 2] == 0) and np.all(np.asarray(weights)[:, :, 2] == 0)
    cotangent = jnp.ones_like(out)
    input_grads, param_grads = _gradients(module, *args, jnp.asarray(mask), True, cotangent)
    for grad in [*input_grads, *param_grads.values()]:
        assert np.all(np.isfinite(grad))


def test_dropout_acts_in_training_only():
    q, k, v, key_valid = _inputs(seed=7)
    module = _create("dot", dropout_rate=0.5)  # its fast path must step aside for dropout
    args = _f32(q, k, v)
    train = module(*args, _mask(key_valid))
    module.eval()
    expected = jnp.einsum("bhqk,bkhd->bqhd", module.weights(*args[:2], _mask(key_valid)), args[2])
    np.testing.assert_allclose(module(*args, _mask(key_valid)), expected, atol=2e-5)
    assert not np.allclose(train, expected, atol=1e-3)


def test_hard_forward_is_top_k_and_backward_is_soft():
    q, k, v, key_valid = _inputs(seed=8)
    args, mask = _f32(q, k, v), _mask(key_valid)
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
    q, k, v, key_valid = _inputs(seed=11)
    module = _create("hard", top_k=L + 5)
    allowed = _allowed(key_valid, L, True)
    got = module.weights(*_f32(q, k), _mask(key_valid), causal=True)
    np.testing.assert_allclose(got, ref_scaled_dot(np, q, k, allowed, {}), atol=2e-6)


def test_hard_breaks_ties_towards_the_lowest_key_index():
    q, k, _, key_valid = _inputs(seed=12)
    k[:, 3] = k[:, 5] = k[:, 8] = 10 * q[:, 0]  # three equal keys, far ahead of the rest for query 0
    weights = np.asarray(_create("hard", top_k=1).weights(*_f32(q, k), _mask(key_valid)))
    np.testing.assert_array_equal(weights[:, :, 0].argmax(-1), 3)
    np.testing.assert_array_equal((weights[:, :, 0] > 0).sum(-1), 1)


@pytest.mark.parametrize("setting", ["padding", "cross"])
def test_local_weights_are_zero_outside_the_window(setting):
    lq, lk, _ = SETTINGS[setting]
    q, k, _, key_valid = _inputs(seed=13, lq=lq, lk=lk)
    allowed = _allowed(key_valid, lq, False)
    local = np.asarray(_create("local").weights(*_f32(q, k), _mask(key_valid)))
    distance = np.abs(np.arange(lk)[None, :] - _local_m_positions(lq, lk)[:, None])
    inside = distance <= WINDOW
    assert np.all(local[..., ~inside] == 0) and np.all(local[..., inside][allowed[..., inside]] > 0)
    module = _randomise_params(_create("local_predictive"))
    predictive = np.asarray(module.weights(*_f32(q, k), _mask(key_valid)))
    positions = _local_p_positions(np, q, allowed, _params(module))
    outside = np.abs(np.arange(lk) - positions[..., None]) > WINDOW + 1e-4
    assert outside.any() and np.all(predictive[outside] == 0)


def test_local_predictive_rows_sum_to_less_than_one_and_gradient_reaches_its_position_parameters():
    q, k, v, key_valid = _inputs(seed=14)
    module = _create("local_predictive")
    args, mask = _f32(q, k, v), _mask(key_valid)
    row_sums = np.asarray(module.weights(*args[:2], mask).sum(-1))
    assert np.all(row_sums <= 1 + 1e-6) and np.all(row_sums >= np.exp(-2) - 1e-6) and np.any(row_sums < 0.99)
    _, param_grads = _gradients(module, *args, mask, False, jnp.ones((B, L, H, D)))
    for name in ("position_projection", "position_vector"):
        assert np.all(np.abs(param_grads[name]).sum(axis=tuple(range(1, param_grads[name].ndim))) > 0), name


def test_initial_parameters_start_near_scaled_dot_product():
    q, k, _, _ = _inputs(seed=15)
    scaled = _create("scaled_dot").weights(*_f32(q, k))
    np.testing.assert_allclose(_create("multiplicative").weights(*_f32(q, k)), scaled, atol=1e-6)
    precision = jax.nn.softplus(_params(_create("gaussian"))["raw_precision"])
    np.testing.assert_allclose(precision, D**-0.5, rtol=1e-6)


def test_additive_takes_queries_and_keys_of_different_sizes():
    rng = np.random.default_rng(16)
    q, k, v = rng.normal(size=(B, 5, H, 6)), rng.normal(size=(B, 9, H, D)), rng.normal(size=(B, 9, H, D))
    module = _create("additive", query_dim=6)
    params = _params(module)
    assert params["query_projection"].shape == (H, 6, D) and params["key_projection"].shape == (H, D, D)
    expected = np.einsum("bhqk,bkhd->bqhd", ref_additive(np, q, k, np.ones((B, H, 5, 9), bool), params), v)
    np.testing.assert_allclose(module(*_f32(q, k, v)), expected, atol=2e-5, rtol=2e-5)


def test_kinds_resolve_by_name_and_take_their_options():
    assert set(KINDS) <= set(attention.names())
    assert attention.registry.get("scaled_dot") is attention.registry.get("softmax")
    assert all(_create(name).feature_dim is None for name in KINDS)
    assert attention.options("additive") == ("dropout_rate", "hidden_dim", "query_dim", "key_dim")
    assert attention.options("local") == attention.options("local_predictive") == ("dropout_rate", "window")
    assert attention.options("hard") == ("dropout_rate", "top_k")
    default_hard = attention.create("hard", num_heads=H, head_dim=D, rngs=nnx.Rngs(0))
    assert _create("local").window == 3 and default_hard.top_k == 1
    with pytest.raises(ValueError, match="window >= 1"):
        _create("local_predictive", window=0)


def test_forced_forward_spreads_a_repeated_query_evenly_after_its_first_step():
    """With the same query at every step, e'_ti = exp(e_i) / (t exp(e_i)) = 1 / t for t >= 1: whatever the first
    step preferred, later steps are uniform over the allowed keys."""
    q, k, _, key_valid = _inputs(seed=14, lq=5, lk=9)
    q[:] = q[:, :1]
    weights = np.asarray(_randomise_params(_create("forced_forward")).weights(*_f32(q, k), _mask(key_valid)))
    uniform = key_valid / key_valid.sum(-1, keepdims=True)
    np.testing.assert_allclose(weights[:, :, 1:], np.broadcast_to(uniform[:, None, None], (B, H, 4, 9)), atol=1e-6)
    assert np.all(weights[:, :, 0].max(-1) > 2 * uniform.max(-1)[:, None])
