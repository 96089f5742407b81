"""softmax and linear attention beyond the contract of tests/kind_harness.py: softmax's own paths without
a mask, linear's chunk sizes, the rank bound, bfloat16 features, the registry and the wrapper."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention
from attention import feature_maps
from kind_harness import B, D, H, L, allowed, inputs, mask, reference_for

pytestmark = pytest.mark.accelerator  # make test-accelerator runs these on the GPU or TPU


def _inputs(seed=0):
    """The contract's inputs in float32, as a model would pass them."""
    *arrays, key_valid = inputs(seed)
    return (*(x.astype(np.float32) for x in arrays), key_valid)


def _create(name, **options):
    return attention.create(name, num_heads=H, head_dim=D, rngs=nnx.Rngs(0), **options)


def _expected(name, q, k, v, allowed_keys):
    """The output of `name`'s dense reference (tests/reference_*.py)."""
    return np.einsum("bhqk,bkhd->bqhd", reference_for(name).weights(np, q, k, allowed_keys, {}), v)


@pytest.mark.parametrize("causal", [False, True])
def test_softmax_without_a_mask_matches_dense_reference(causal):
    """No mask takes jax.nn.dot_product_attention's own paths (is_causal when causal): output and grads."""
    q, k, v, _ = _inputs()
    every_key = allowed(np.ones((B, L), bool), L, causal)
    expected = _expected("softmax", q, k, v, every_key)
    module = _create("softmax")
    np.testing.assert_allclose(module(q, k, v, causal=causal), expected, atol=2e-5, rtol=2e-5)
    cotangent = np.random.default_rng(1).normal(size=expected.shape).astype(np.float32)
    def dense(q, k, v):
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(D)
        weights = jax.nn.softmax(jnp.where(every_key, scores, -jnp.inf), axis=-1)
        return (jnp.einsum("bhqk,bkhd->bqhd", weights, v) * cotangent).sum()
    fast = lambda q, k, v: (module(q, k, v, causal=causal) * cotangent).sum()
    for got, want in zip(jax.grad(fast, (0, 1, 2))(q, k, v), jax.grad(dense, (0, 1, 2))(q, k, v)):
        np.testing.assert_allclose(got, want, atol=5e-5, rtol=5e-5)


@pytest.mark.parametrize("chunk_size", [1, 4, 5, 13, 64])
def test_causal_linear_is_exact_for_any_chunk_size(chunk_size):
    q, k, v, key_valid = _inputs(seed=1)
    expected = _expected("linear", q, k, v, allowed(key_valid, L, True))
    out = _create("linear", chunk_size=chunk_size)(q, k, v, mask(key_valid), causal=True)
    np.testing.assert_allclose(out, expected, atol=2e-5, rtol=2e-5)
def test_linear_rank_is_bounded_by_feature_dim_and_softmax_is_not():
    q, k, _, _ = _inputs(seed=6)
    linear, softmax = _create("linear"), _create("softmax")
    assert linear.feature_dim == D and softmax.feature_dim is None
    def rank(matrix):  # float32 inputs: singular values below 1e-5 of the largest are round-off
        s = np.linalg.svd(np.asarray(matrix, np.float64), compute_uv=False)
        return int((s > 1e-5 * s[0]).sum())

    for b in range(B):
        for h in range(H):
            assert rank(linear.weights(q, k)[b, h]) <= D
            assert rank(softmax.weights(q, k)[b, h]) == L


def test_causal_mask_lifts_the_linear_rank_bound():
    q, k, _, _ = _inputs(seed=7)
    weights = np.asarray(_create("linear").weights(q, k, causal=True)[0, 0], np.float64)
    # Lower-triangular with a positive diagonal: its determinant is the diagonal's product, not 0.
    assert np.all(np.diag(weights) > 0) and np.allclose(weights, np.tril(weights))
    assert np.linalg.matrix_rank(weights) == L


def test_elu_plus_one_stays_positive_in_bfloat16():
    x = jnp.asarray([-30.0, -10.0, -6.0, -1.0, 0.0, 2.0], jnp.bfloat16)
    phi = feature_maps.elu_plus_one(x)
    assert phi.dtype == jnp.bfloat16 and bool(jnp.all(phi > 0))
    naive = jax.nn.elu(x) + 1  # the cancelling form this guards against
    assert float(naive[1]) == 0.0


def test_linear_refuses_a_mask_it_cannot_apply_in_linear_time():
    q, k, v, _ = _inputs()
    per_query = jnp.ones((B, 1, L, L), bool)
    with pytest.raises(ValueError, match="key-padding"):
        _create("linear")(q, k, v, per_query)


def test_registry_lists_kinds_and_rejects_unknown_names():
    assert {"softmax", "linear"} <= set(attention.names())
    with pytest.raises(ValueError, match="known kinds: .*linear.*softmax"):
        _create("nope")
    with pytest.raises(ValueError, match="takes no option"):
        _create("softmax", chunk_size=3)


def test_multi_head_wrapper_rejects_indivisible_width():
    with pytest.raises(ValueError, match="not divisible"):
        attention.MultiHeadAttention("softmax", d_model=10, num_heads=3, rngs=nnx.Rngs(0))


def test_chunk_size_zero_is_the_size_chunking_picks(monkeypatch):
    """chunk_size=0 (`attention.chunk_size = 0`) runs attention/ops/chunking.py's size for the platform and
    length: the output of that size given explicitly, and exact against the dense reference."""
    from attention.ops import chunking

    q, k, v, key_valid = _inputs(seed=1)
    expected = _expected("linear", q, k, v, allowed(key_valid, L, True))
    size = chunking.chunk_size_for(jax.default_backend(), L)
    auto = _create("linear", chunk_size=0)(q, k, v, mask(key_valid), causal=True)
    np.testing.assert_array_equal(auto, _create("linear", chunk_size=size)(q, k, v, mask(key_valid), causal=True))
    np.testing.assert_allclose(auto, expected, atol=2e-5, rtol=2e-5)
    # The size is looked up at trace time: a table entry below L (here 4, in chunks that do not divide L).
    monkeypatch.setattr(chunking, "chunk_size_for", lambda platform, length: 4)
    auto = _create("linear", chunk_size=0)(q, k, v, mask(key_valid), causal=True)
    np.testing.assert_array_equal(auto, _create("linear", chunk_size=4)(q, k, v, mask(key_valid), causal=True))


def test_chunking_tables_give_a_positive_size_and_a_strategy_everywhere():
    from attention.ops import chunking

    from attention.ops import chunked_sums

    for platform in ("cpu", "gpu", "cuda", "rocm", "tpu", "unknown"):
        sizes = [chunking.chunk_size_for(platform, length) for length in (1, 13, 256, 1024, 8192, 10**6)]
        assert all(isinstance(size, int) and size >= 1 for size in sizes), (platform, sizes)
        strategies = {chunking.strategy_for(platform, length) for length in (1, 13, 256, 1024, 8192, 10**6)}
        assert strategies <= set(chunked_sums.STRATEGIES), (platform, strategies)
    assert chunking.chunk_size_for("unknown", 8192) == chunking.DEFAULT_CHUNK
    assert chunking.chunk_size_for("cuda", 8192) == chunking.chunk_size_for("gpu", 8192)


def test_config_chunk_size_zero_is_valid_and_negative_is_not_even_where_no_kind_reads_it():
    from configs import recall as recall_config
    from training import validate

    config = recall_config.get_config("tiny")
    config.attention.name, config.attention.chunk_size = "linear", 0
    validate.validate(config)
    config.attention.chunk_size = -1
    with pytest.raises(validate.ConfigError, match="kind 'linear': chunk_size=-1 must be an integer >= 0"):
        validate.validate(config)
    config.attention.name = "softmax"  # which takes no chunk_size
    with pytest.raises(validate.ConfigError, match=r"config.attention.chunk_size=-1 is read by no kind in use .* "
                                                   r"\(kind '\w+' refuses it: chunk_size=-1 must be"):
        validate.validate(config)
