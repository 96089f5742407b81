"""The rank-m controls (attention/low_rank.py) beyond the kind contract: softmax_rank's rank, softmax exactly where
the bound cannot bind, gradients with the singular vectors held constant, its subspace basis against the exact one,
and its refusals of causal attention, decoding and causal or decoded roles; landmark_softmax's rows (nonnegative,
summing to 1) and rank, and its landmarks."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention
import reference_scored as ref
from attention import low_rank
from configs import mlm as mlm_config
from configs import recall as recall_config
from training import validate
from training.config_checks import ConfigError

pytestmark = pytest.mark.accelerator  # make test-accelerator runs these on the GPU or TPU


def _create(rank, head_dim):
    return attention.create("softmax_rank", num_heads=2, head_dim=head_dim, rngs=nnx.Rngs(0), rank=rank)


def _inputs(seed, batch, lq, lk, dim):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(batch, length, 2, dim)) for length in (lq, lk, lk)]


def _f32(*arrays):
    return [jnp.asarray(x, jnp.float32) for x in arrays]


def _softmax(q, k, allowed):
    """Scaled dot-product softmax in float64, [B, H, Lq, Lk]."""
    return ref.scaled_dot(np, q, k, np.broadcast_to(allowed, (q.shape[0], 2, q.shape[1], k.shape[1])), {})


@pytest.mark.parametrize("rank", [1, 4, 9])
def test_weights_have_numerical_rank_m_where_softmax_has_full_rank(rank):
    """np.linalg.matrix_rank at float32's tolerance (analysis/rank.py's threshold): exactly m for generic
    inputs, padded keys included, where softmax's own matrix has the full rank of its unpadded block. The
    weights are A's truncated SVD U_m S_m V_m^T, written here from float64 singular vectors."""
    q, k, _ = _inputs(30 + rank, 2, 24, 24, 8)
    key_valid = np.ones((2, 24), bool)
    key_valid[0, 20:] = False
    weights = np.asarray(_create(rank, 8).weights(*_f32(q, k), jnp.asarray(key_valid[:, None, None, :])))
    softmax = _softmax(q, k, key_valid[:, None, None, :])
    u, s, vt = np.linalg.svd(softmax)
    truncated = np.einsum("bhqm,bhm,bhmk->bhqk", u[..., :rank], s[..., :rank], vt[..., :rank, :])
    np.testing.assert_allclose(weights, truncated, atol=1e-6)
    assert np.all(weights[0, :, :, 20:] == 0)  # padded keys
    assert rank == 1 or weights.min() < 0  # a top singular vector alone is positive (Perron-Frobenius)
    for b, block in enumerate([weights[0, :, :, :20], weights[1]]):
        for head in range(2):
            assert np.linalg.matrix_rank(block[head]) == rank
            assert np.linalg.matrix_rank(softmax[b, head].astype(np.float32)) == (20, 24)[b]


def test_with_m_at_least_the_allowed_keys_or_queries_the_weights_are_softmax_exactly():
    """m >= min(Lq, Lk) skips the projection; m >= an example's allowed keys leaves that example's weights
    as they are while the others' are projected."""
    q, k, v = _inputs(40, 2, 16, 16, 4)
    key_valid = np.ones((2, 16), bool)
    key_valid[0, 5:] = False
    mask = jnp.asarray(key_valid[:, None, None, :])
    softmax = attention.create("softmax", num_heads=2, head_dim=4, rngs=nnx.Rngs(0))
    want = np.asarray(softmax.weights(*_f32(q, k), mask))
    np.testing.assert_array_equal(_create(16, 4).weights(*_f32(q, k), mask), want)
    cross_q = _f32(q[:, :6])[0]
    np.testing.assert_array_equal(_create(6, 4).weights(cross_q, *_f32(k), mask),
                                  softmax.weights(cross_q, *_f32(k), mask))
    projected = np.asarray(_create(8, 4).weights(*_f32(q, k), mask))
    np.testing.assert_array_equal(projected[0], want[0])  # 5 allowed keys <= m = 8
    assert np.abs(projected[1] - want[1]).max() > 1e-3
    out = _create(16, 4)(*_f32(q, k, v), mask)
    expected = np.einsum("bhqk,bkhd->bqhd", _softmax(q, k, key_valid[:, None, None, :]), v)
    np.testing.assert_allclose(out, expected, atol=2e-5, rtol=2e-5)


def _projected_loss(q, k, v, cotangent, basis):
    """sum(cotangent * (A V V^T) v) in float64 with V = `basis` fixed, A scaled dot-product softmax."""
    weights = _softmax(q, k, np.ones((1, 1, 1, k.shape[1]), bool))
    out = np.einsum("bhqk,bkhd->bqhd", weights @ basis @ np.swapaxes(basis, -1, -2), v)
    return float((out * cotangent).sum())


def _central_differences(loss, x, step=1e-6):
    """d loss / d x by central differences, one entry of x at a time."""
    grad = np.zeros_like(x)
    for position in np.ndindex(x.shape):
        shift = np.zeros_like(x)
        shift[position] = step
        grad[position] = (loss(x + shift) - loss(x - shift)) / (2 * step)
    return grad


def test_gradients_hold_the_singular_vectors_constant():
    """Central differences in float64 of the projection with V fixed at the unperturbed top-2 right singular
    vectors, against jax.grad of the kind's output."""
    q, k, v = _inputs(50, 1, 7, 7, 3)
    cotangent = np.random.default_rng(51).normal(size=v.shape)
    basis = np.swapaxes(np.linalg.svd(_softmax(q, k, np.ones((1, 1, 1, 7), bool)))[2][..., :2, :], -1, -2)
    module = _create(2, 3)
    got_q, got_k = jax.grad(lambda q, k: (module(q, k, jnp.asarray(v, jnp.float32)) * cotangent).sum(),
                            (0, 1))(*_f32(q, k))
    want_q = _central_differences(lambda x: _projected_loss(x, k, v, cotangent, basis), q)
    want_k = _central_differences(lambda x: _projected_loss(q, x, v, cotangent, basis), k)
    np.testing.assert_allclose(got_q, want_q, atol=1e-4, rtol=1e-3)
    np.testing.assert_allclose(got_k, want_k, atol=1e-4, rtol=1e-3)


def test_causal_attention_is_refused_saying_why():
    q, k, v = _f32(*_inputs(60, 1, 8, 8, 4))
    module = _create(2, 4)
    for call in (lambda: module(q, k, v, causal=True), lambda: module.weights(q, k, causal=True)):
        with pytest.raises(ValueError, match="^" + low_rank.NOT_CAUSAL + "$"):
            call()
    assert "future keys" in low_rank.NOT_CAUSAL


def test_causal_and_decoded_roles_are_refused_by_the_config_checks(tiny_config):
    """Recall's causal language model, and translation's decoder (step by step in its evaluation) beside an
    encoder that may take the kind."""
    config = recall_config.get_config("tiny,form=causal")
    config.attention.name = "softmax_rank"
    with pytest.raises(ConfigError, match="^config.attention.name='softmax_rank': the decoder_self role attends "
                                          "causally, and kind 'softmax_rank' cannot: a row of its weights depends "
                                          "on the later queries; give attention.decoder_self another kind$"):
        validate.validate(config)
    config = tiny_config()
    config.attention.encoder_self = config.attention.cross = "softmax_rank"
    with pytest.raises(ConfigError, match="^config.attention.cross='softmax_rank': the cross role is decoded one "
                                          "position at a time, and kind 'softmax_rank' cannot: "):
        validate.validate(config)
    config.attention.cross = ""
    validate.validate(config)


def test_an_encoder_role_takes_it_with_its_rank_checked():
    for config in (recall_config.get_config("tiny,form=bidirectional"), mlm_config.get_config("tiny")):
        config.attention.name = "softmax_rank"
        validate.validate(config)
        config.attention.rank = 0
        with pytest.raises(ConfigError, match="kind 'softmax_rank': rank=0 must be an integer >= 1"):
            validate.validate(config)


def _frobenius_excess(weights, projected, rank):
    """||A - projected||_F over the optimum ||A - A_m||_F (Eckart-Young, from float64 singular values), less 1."""
    s = np.linalg.svd(np.asarray(weights, np.float64), compute_uv=False)
    optimum = np.sqrt((s[..., rank:] ** 2).sum(-1))
    return np.linalg.norm(np.asarray(weights, np.float64) - np.asarray(projected, np.float64), axis=(-2, -1)) / optimum - 1


def test_the_subspace_basis_matches_the_exact_one():
    """Softmax rows at L = 64 sharpened like trained ones (scores scaled 2x), m = 8, keys padded in one example:
    after 8 steps of subspace iteration the projection is the exact basis's to float32 round-off (its error within
    1e-6 of the best rank-8 approximation's) and padded keys stay out exactly; one step alone is measurably worse,
    so the steps are what the match rests on. Here s_17 / s_8 is about 0.7, so each step shrinks the error by about
    0.5; at the MLM study's m = 32 and L = 128, 3 steps leave 0.005% at most (docs/benchmarks.md)."""
    q, k, _ = _inputs(70, 2, 64, 64, 8)
    key_valid = np.ones((2, 64), bool)
    key_valid[0, 50:] = False
    allowed = jnp.asarray(key_valid[:, None, None, :])
    weights = attention.create("softmax", num_heads=2, head_dim=8, rngs=nnx.Rngs(0)).weights(*_f32(2 * q, k), allowed)
    exact = low_rank.project_onto_top_rows(weights, allowed, 8)
    eight, one = (low_rank.project_onto_top_rows(weights, allowed, 8, steps) for steps in (8, 1))
    np.testing.assert_allclose(eight, exact, atol=2e-4)
    assert np.all(np.asarray(eight)[0, :, :, 50:] == 0)
    assert np.max(_frobenius_excess(weights, exact, 8)) < 1e-6
    assert np.max(_frobenius_excess(weights, eight, 8)) < 1e-6
    assert np.min(_frobenius_excess(weights, one, 8)) > 1e-2
    module = attention.create("softmax_rank", num_heads=2, head_dim=8, rngs=nnx.Rngs(0), rank=8, basis_iterations=8)
    np.testing.assert_allclose(module.weights(*_f32(2 * q, k), allowed), exact, atol=2e-4)


def _landmarks(rank, head_dim):
    return attention.create("landmark_softmax", num_heads=2, head_dim=head_dim, rngs=nnx.Rngs(0), rank=rank)


def test_landmark_rows_are_nonnegative_sum_to_one_and_have_rank_at_most_m():
    """The control elu + 1's bound stands for: every allowed row a distribution over the allowed keys (padded keys
    exactly 0), and numerical rank at most m, where softmax's is that of its unpadded block."""
    q, k, _ = _inputs(80, 2, 24, 24, 8)
    key_valid = np.ones((2, 24), bool)
    key_valid[1, 18:] = False
    weights = np.asarray(_landmarks(4, 8).weights(*_f32(3 * q, k), jnp.asarray(key_valid[:, None, None, :])))
    assert weights.min() >= 0 and np.all(weights[1, :, :, 18:] == 0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    softmax = _softmax(3 * q, k, key_valid[:, None, None, :])
    for b, keys in enumerate((24, 18)):
        for head in range(2):
            assert np.linalg.matrix_rank(weights[b, head]) <= 4
            assert np.linalg.matrix_rank(softmax[b, head].astype(np.float32)) == keys


def test_landmarks_are_the_means_of_the_allowed_keys_of_each_segment():
    k = jnp.arange(2 * 7 * 1 * 1, dtype=jnp.float32).reshape(2, 7, 1, 1)
    key_valid = jnp.asarray([[True] * 7, [True] * 4 + [False] * 3])
    landmarks, occupied = low_rank.segment_means(k, key_valid, 3)  # segments: positions 0-2, 3-4, 5-6
    np.testing.assert_allclose(landmarks[..., 0, 0], [[1.0, 3.5, 5.5], [8.0, 10.0, 0.0]])
    assert occupied.tolist() == [[True, True, True], [True, True, False]]
