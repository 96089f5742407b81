"""softmax_rank (attention/low_rank.py) beyond the kind contract: the rank of its weights, softmax exactly
where the bound cannot bind, gradients with the singular vectors held constant, and its refusals of causal
attention, decoding and causal or decoded roles."""
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
