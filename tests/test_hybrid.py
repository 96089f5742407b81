"""based, Based's hybrid of Taylor linear attention and a sliding softmax window (attention/hybrid.py): the kind
contract of tests/kind_harness.py against tests/reference_hybrid.py, and beyond it its output as its weights
times the values, decoding equal to the parallel form, its options reaching both parts, its rank and its
refusals."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention
import kind_harness as harness
from attention.hybrid import BasedAttention
from kind_harness import B, H, L, KindContract, package_kinds_of
from reference_scored import WINDOW, softmax

pytestmark = pytest.mark.accelerator  # make test-accelerator runs these on the GPU or TPU

EPS = 1e-6


class TestBasedContract(KindContract):
    kinds = package_kinds_of(BasedAttention)


def _inputs(seed, lq, lk, qk_dim, value_dim):
    """q [B, lq, H, qk_dim], k [B, lk, H, qk_dim], v [B, lk, H, value_dim] in float32 and key_valid [B, lk]
    (example 0: its last 3 keys padded; example 1: key 5, mid-sequence)."""
    rng = np.random.default_rng(seed)
    q, k = (rng.normal(size=(B, length, H, qk_dim)).astype(np.float32) for length in (lq, lk))
    v = rng.normal(size=(B, lk, H, value_dim)).astype(np.float32)
    key_valid = np.ones((B, lk), bool)
    key_valid[0, lk - 3:] = False
    key_valid[1, min(5, lk - 1)] = False
    return q, k, v, key_valid


def _create(head_dim, **options):
    return attention.create("based", num_heads=H, head_dim=head_dim, rngs=nnx.Rngs(0), **options)


@pytest.mark.parametrize("causal", [False, True])
def test_output_is_its_weights_times_the_values_and_rows_sum_to_one(causal):
    """The weights that the rank and entropy analyses read are those of the output, a convex mix: a row sums to 1
    (up to Taylor's eps) where its window holds an allowed key, as every unpadded query's does (its own key), and
    to 1/2 where only Taylor's part has one (example 0's last query: its window's keys are all padded)."""
    q, k, v, key_valid = harness.inputs(seed=31)
    _, attend = harness.attending("based", causal)
    out, weights = attend(*harness.f32(q, k, v), harness.mask(key_valid))
    np.testing.assert_allclose(out, np.einsum("bhqk,bkhd->bqhd", np.asarray(weights, np.float64), v),
                               atol=2e-5, rtol=2e-5)
    allowed = harness.allowed(key_valid, L, causal)
    in_window = np.abs(np.arange(L)[None, :] - np.arange(L)[:, None]) <= WINDOW
    want_sums = (allowed.any(-1).astype(float) + (allowed & in_window).any(-1)) / 2
    assert want_sums[0, 0, -1] == 0.5
    np.testing.assert_allclose(np.asarray(weights).sum(-1), want_sums, atol=1e-5)


def test_decoding_token_by_token_equals_the_parallel_form():
    """Causal self-attention over 18 positions, more than Taylor's m = C(3 + 2, 2) = 10 features, so that its
    chunked sums (chunks of 5, not dividing 18) run; queries and keys narrower than the values, so that each
    part's cache has two widths; and cross-attention of 5 decoder rows over 9 padded source keys."""
    module = _create(3, chunk_size=5)
    assert module.feature_dim < 18
    q, k, v, key_valid = _inputs(40, 18, 18, 3, 5)
    qc, kc, vc, source_valid = _inputs(41, 5, 9, 3, 5)

    @jax.jit
    def run(q, k, v, key_valid, qc, kc, vc, source_valid):
        def self_step(cache, t):
            rows = [jax.lax.dynamic_slice_in_dim(x, t, 1, 1) for x in (q, k, v)]
            out, cache = module.decode_step(*rows, cache, t, q.shape[1], key_valid[:, t])
            return cache, out[:, 0]

        def cross_step(memory, t):
            row = jax.lax.dynamic_slice_in_dim(qc, t, 1, 1)
            out, memory = module.attend_memory(row, memory, source_valid, t, qc.shape[1])
            return memory, out[:, 0]

        cache = module.init_cache(B, q.shape[1], H, 3, 5)
        memory = module.init_memory(kc, vc, source_valid, qc.shape[1])
        stepped = [jnp.swapaxes(jax.lax.scan(step, start, jnp.arange(length))[1], 0, 1)
                   for step, start, length in ((self_step, cache, q.shape[1]), (cross_step, memory, qc.shape[1]))]
        parallel = [module(q, k, v, key_valid[:, None, None, :], causal=True),
                    module(qc, kc, vc, source_valid[:, None, None, :])]
        return stepped, parallel

    stepped, parallel = run(q, k, v, key_valid, qc, kc, vc, source_valid)
    for role, got, want in zip(("self", "cross"), stepped, parallel):
        np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5, err_msg=role)


def _taylor_kernel(s, order):
    return sum(s**j / math.factorial(j) for j in range(order + 1))


@pytest.mark.parametrize("window, taylor_order, options", [
    (1, 4, {}),  # m = C(4 + 4, 4) = 70 above the 18 keys: Taylor's explicit Lq x Lk path
    (0, 2, {"chunk_size": 4, "kernelized_implementation": "xla", "eps": 1e-3}),  # m = 15: the chunked custom-VJP sums
])
def test_options_reach_both_parts(window, taylor_order, options):
    """Against the formula written here: the mean of the order-p Taylor kernel of q.k / sqrt(d) normalised
    over the allowed keys (+ eps), and the softmax over the keys within `window` of the query."""
    eps = options.get("eps", EPS)
    module = _create(4, window=window, taylor_order=taylor_order, **options)
    q, k, v, key_valid = _inputs(42, 18, 18, 4, 4)
    out = jax.jit(lambda q, k, v, mask: module(q, k, v, mask, causal=True))(q, k, v, key_valid[:, None, None, :])
    allowed = harness.allowed(key_valid, 18, causal=True)
    scaled_dot = np.einsum("bqhd,bkhd->bhqk", q.astype(np.float64), k.astype(np.float64)) / 2  # sqrt(d) = 2
    taylor = _taylor_kernel(scaled_dot, taylor_order) * allowed
    band = np.abs(np.arange(18)[None, :] - np.arange(18)[:, None]) <= window
    weights = (taylor / (taylor.sum(-1, keepdims=True) + eps) + softmax(np, scaled_dot, allowed & band)) / 2
    np.testing.assert_allclose(out, np.einsum("bhqk,bkhd->bqhd", weights, v), atol=2e-5, rtol=2e-5)


def test_feature_dim_is_taylors_m_and_bounds_no_rank():
    """Head dim 2: m = C(2 + 2, 2) = 6 features, and bidirectional weights over 13 keys of rank above 6 (Taylor's
    part alone is of rank <= 6; the window's band lifts it), so eval.json reports no rank bound."""
    q, k, _, _ = _inputs(43, 13, 13, 2, 2)
    module = _create(2)
    assert module.feature_dim == 6
    weights = np.asarray(jax.jit(module.weights)(q, k), np.float64)
    singular = np.linalg.svd(weights, compute_uv=False)
    assert ((singular > 1e-5 * singular[..., :1]).sum(-1) > 6).all()
    layer = attention.MultiHeadAttention("based", d_model=8, num_heads=2, rngs=nnx.Rngs(0), qk_head_dim=2)
    assert layer.feature_dim == 6 and layer.rank_bound is None


@pytest.mark.parametrize("option, value, message", [
    ("window", -1, "window=-1 must be an integer >= 0"),
    ("taylor_order", 3, "taylor_order=3 must be a positive even integer"),
    ("kernelized_implementation", "cudnn",
     "kernelized_implementation='cudnn' must be one of 'auto', 'xla', 'pallas', 'autodiff'"),
])
def test_a_bad_option_is_refused_naming_it(option, value, message):
    with pytest.raises(ValueError, match="^" + message):
        _create(4, **{option: value})
