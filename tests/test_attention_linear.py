"""Kernelised kinds: what they add beyond the contract of tests/kind_harness.py (performer at extreme logits,
its estimator and redraws, feature maps against closed forms, the rank bound, bfloat16, even orders)."""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention
from attention import feature_maps
import kind_harness as harness
from kind_harness import B, D, H, L

pytestmark = pytest.mark.accelerator  # make test-accelerator runs these on the GPU or TPU


def _inputs(seed=0, lq=L, lk=L, head_dim=D, norm=None):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(B, lq, H, head_dim)).astype(np.float32)
    k = rng.normal(size=(B, lk, H, head_dim)).astype(np.float32)
    v = rng.normal(size=(B, lk, H, head_dim)).astype(np.float32)
    if norm is not None:
        q, k = (norm * x / np.linalg.norm(x, axis=-1, keepdims=True) for x in (q, k))
    key_valid = np.ones((B, lk), bool)
    key_valid[0, lk - 4 :] = False  # example 0 has 4 padded keys
    return q, k, v, key_valid


# m = 8 < L lets performer's rank bound bind, and one projection shape means one draw to compile.
TEST_OPTIONS = {"performer": {"num_features": 8}}


def _key(seed):
    # rbg rather than the default threefry, whose random bits take seconds to compile on CPU.
    return jax.random.key(seed, impl="rbg")


def _create(name, head_dim=D, **options):
    options = {**TEST_OPTIONS.get(name, {}), **options}
    module = attention.create(name, num_heads=H, head_dim=head_dim, rngs=nnx.Rngs(_key(0)), **options)
    if name == "hedgehog":  # away from the identity it starts at, as after some training
        noise = np.random.default_rng(1).normal(scale=0.5, size=module.weight[...].shape)
        module.weight[...] = module.weight[...] + jnp.asarray(noise, jnp.float32)
    return module



def _traced(function, *args):
    """function(*args) under jit: one compilation, where eager calls would compile each new operation."""
    return jax.jit(function)(*args)


@functools.cache
def _attention(name, causal, **options):
    """A module of kind `name` in chunks of 5 (which do not divide L), and its jitted
    (q, k, v, mask) -> (output, weights); cached so that tests on the same shapes share a compilation."""
    module = _create(name, chunk_size=5, **options)
    attend = jax.jit(lambda q, k, v, mask: (module(q, k, v, mask, causal=causal),
                                            module.weights(q, k, mask, causal=causal)))
    return module, attend


@functools.cache
def _differentiated(name):
    """A module of kind `name`, its learned params, and the jitted (q, k, v, params, mask, cotangent) ->
    (gradients of sum(output * cotangent) for q, k, v, params; output) of causal attention, cached."""
    module = _create(name, chunk_size=5)
    graphdef, params, rest = nnx.split(module, nnx.Param, ...)  # hedgehog's weight, else nothing

    def loss(q, k, v, params, mask, cotangent):
        out = nnx.merge(graphdef, params, rest)(q, k, v, mask, causal=True)
        return (out.astype(jnp.float32) * cotangent).sum(), out

    return module, params, jax.jit(jax.grad(loss, (0, 1, 2, 3), has_aux=True))


def _log_sum_exp(x, axis):
    top = x.max(axis, keepdims=True)
    return np.squeeze(top + np.log(np.exp(x - top).sum(axis, keepdims=True)), axis)


def performer_log_space_reference(module, q, k, v, allowed, eps=1e-6):
    """Performer's normalize(phi(Q) phi(K)^T masked) V and weights in float64, with phi(q).phi(k) and the
    normaliser summed in log space: for exponents that no plain sum of exp holds, even in float64."""
    projection = np.asarray(module.projection[...], np.float64)

    def log_phi(x):  # [B, L, H, m]
        x = np.asarray(x, np.float64) * x.shape[-1] ** -0.25
        return (np.einsum("blhd,hmd->blhm", x, projection) - (x * x).sum(-1, keepdims=True) / 2
                - np.log(projection.shape[1]) / 2)

    log_scores = _log_sum_exp(log_phi(q)[:, :, None] + log_phi(k)[:, None], -1).transpose(0, 3, 1, 2)
    log_scores = np.where(allowed, log_scores, -np.inf)  # [B, H, Lq, Lk]
    log_normaliser = _log_sum_exp(log_scores, -1)[..., None]
    # num / (den + eps) = (num / den) / (1 + eps / den)
    weights = np.exp(log_scores - log_normaliser) / (1 + eps * np.exp(-log_normaliser))
    return np.einsum("bhqk,bkhd->bqhd", weights, np.asarray(v, np.float64)), weights


@pytest.mark.parametrize("causal", [False, True])
def test_performer_at_logits_near_90_is_exact_and_ignores_future_keys(causal):
    """Head dim 64 and q.k / sqrt(d) up to 90, beyond float32's exp (88.7). Each head's keys have logit 90
    from its longest projection row w but exponents -40 down to -46 (an orthogonal part lengthens them);
    queries lie on w (exponent |w|^2 / 2) or, at odd positions, on the next longest row. Then the keys
    from position 7 on move onto w: the largest exponent a key can have, which would put the earlier
    keys' terms below 1e-30 if it set their scale. Outputs and weights must be finite and the float64
    reference's, and causally the same to the bit for queries up to 6."""
    d = 64
    module, attend = _attention("performer", causal, head_dim=d)
    rows = np.asarray(module.projection[...], np.float64)  # [H, m, d], orthogonal rows
    longest = np.argsort(-(rows**2).sum(-1), axis=-1)  # [H, m]
    w, w_next = (rows[np.arange(H), longest[:, i]] for i in (0, 1))
    norm2 = (w**2).sum(-1)  # [H]
    exponents = -40.0 - np.arange(L) / 2  # of the keys: w.x - |x|^2 / 2 at x = k / d^(1/4)
    # x = (90 / |w|^2) w + z, z orthogonal to every row: w.x = 90 and |x|^2 = 2 (90 - exponent)
    z = np.random.default_rng(11).normal(size=(B, L, H, d))
    for h in range(H):
        basis = np.linalg.qr(rows[h].T)[0]
        z[:, :, h] -= z[:, :, h] @ basis @ basis.T
    z *= np.sqrt((2 * (90 - exponents)[:, None] - 90**2 / norm2) / (z**2).sum(-1))[..., None]
    k = (((90 / norm2)[:, None] * w + z) * d**0.25).astype(np.float32)
    q = (np.where(np.arange(L)[:, None, None] % 2, w_next, w) * d**0.25)[None].repeat(B, 0).astype(np.float32)
    v = np.random.default_rng(12).normal(size=(B, L, H, d)).astype(np.float32)
    np.testing.assert_allclose(np.einsum("bqhd,bkhd->bhqk", q, k)[:, :, ::2] / np.sqrt(d), 90, rtol=1e-5)
    _, _, _, key_valid = _inputs()
    k2, v2 = k.copy(), v.copy()
    k2[:, 7:], v2[:, 7:] = w * d**0.25, 50.0
    results = []
    for keys, values in ((k, v), (k2, v2)):
        out, weights = attend(q, keys, values, harness.mask(key_valid))
        expected, expected_weights = performer_log_space_reference(
            module, q, keys, values, harness.allowed(key_valid, L, causal))
        assert _all_finite((out, weights))
        np.testing.assert_allclose(out, expected, atol=1e-4, rtol=1e-4)
        np.testing.assert_allclose(weights, expected_weights, atol=1e-5)
        results.append((out, weights))
    if causal:
        (out, weights), (out2, weights2) = results
        np.testing.assert_array_equal(out2[:, :7], out[:, :7])
        np.testing.assert_array_equal(weights2[:, :, :7], weights[:, :, :7])


@pytest.mark.parametrize("dim, degree", [(1, 2), (3, 3), (3, 4), (8, 2), (5, 6)])
def test_taylor_and_exp_limit_features_equal_their_closed_forms(dim, degree):
    x, y = np.random.default_rng(dim * 10 + degree).normal(scale=0.7, size=(2, 5, dim)).astype(np.float32)
    dot = (np.asarray(x, np.float64) * y).sum(-1)
    feature_maps_under_test = (feature_maps.taylor_features, feature_maps.exp_limit_features)
    kernels = lambda x, y: [(phi(x, degree) * phi(y, degree)).sum(-1) for phi in feature_maps_under_test]
    taylor, exp_limit = _traced(kernels, x, y)
    np.testing.assert_allclose(taylor, sum(dot**j / math.factorial(j) for j in range(degree + 1)),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(exp_limit, (1 + dot / degree) ** degree, rtol=1e-5, atol=1e-6)
    count = math.comb(dim + degree, degree)
    assert feature_maps.taylor_feature_dim(dim, degree) == count
    assert feature_maps.exp_limit_feature_dim(dim, degree) == count
    for phi in feature_maps_under_test:
        assert jax.eval_shape(lambda x: phi(x, degree), x).shape == (5, count)


@pytest.mark.parametrize("name, option", [("taylor", "taylor_order"), ("exp_limit", "exp_limit_n")])
@pytest.mark.parametrize("causal", [False, True])
def test_polynomial_kinds_take_the_explicit_matrix_below_m_keys_and_equal_their_feature_path(
        name, option, causal, monkeypatch):
    """With fewer keys (13) than features (m = C(4 + 4, 4) = 70 at degree 4), "auto" forms the L x L
    polynomial of q.k and computes no features; "xla" goes through the features. Outputs and gradients
    agree, padded and causal. Where m is at most the keys (2 dims at degree 2: m = 6), "auto" is the
    feature path."""
    q, k, v, key_valid = harness.inputs(seed=31)
    q, k, v = harness.f32(q, k, v)
    mask = harness.mask(key_valid)

    def attend(implementation, q, k, v):
        module = attention.create(name, num_heads=H, head_dim=D, rngs=nnx.Rngs(0),
                                  kernelized_implementation=implementation, **{option: 4})
        return module(q, k, v, mask, causal=causal)

    def loss(implementation):
        return lambda q, k, v: (attend(implementation, q, k, v) ** 2).sum()

    want, want_grads = attend("xla", q, k, v), jax.grad(loss("xla"), argnums=(0, 1, 2))(q, k, v)
    cls = type(attention.create(name, num_heads=H, head_dim=D, rngs=nnx.Rngs(0)))
    monkeypatch.setattr(cls, "features", lambda self, x: pytest.fail("features computed below m keys"))
    got, got_grads = attend("auto", q, k, v), jax.grad(loss("auto"), argnums=(0, 1, 2))(q, k, v)
    # exp_limit's first causal rows normalise by a few kernel values (1 + q.k/n)^n that can nearly vanish:
    # its outputs differ by up to 5e-6 and its gradients by 9e-5 between the two orders of summation on the
    # CPU, and by more on a GPU, which sums in another order.
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    for got_grad, want_grad in zip(got_grads, want_grads):
        np.testing.assert_allclose(got_grad, want_grad, rtol=5e-4, atol=5e-4)
    narrow = attention.create(name, num_heads=H, head_dim=2, rngs=nnx.Rngs(0), **{option: 2})  # m = 6 <= 13
    with pytest.raises(pytest.fail.Exception, match="features computed"):
        narrow(q[..., :2], k[..., :2], v, mask, causal=causal)


def _kernel_estimates(orthogonal, q, k, num_features, num_draws=2000):
    """phi(q).phi(k) without stabiliser, [num_draws, pairs] per number of features: one row per draw.

    The first m rows of a projection are a projection of m rows (its first m / d blocks when orthogonal),
    so one draw of the largest size serves every m.
    """
    def estimates(key):
        projection = feature_maps.random_projection(key, max(num_features), q.shape[-1], orthogonal)
        return [(feature_maps.positive_random_features(q, projection[:m])
                 * feature_maps.positive_random_features(k, projection[:m])).sum(-1) for m in num_features]

    keys = jax.random.split(_key(0), num_draws)
    return [np.asarray(e, np.float64) for e in jax.jit(jax.vmap(estimates))(keys)]


@pytest.mark.parametrize("orthogonal", [True, False])
def test_performer_estimate_of_exp_is_unbiased_and_sharpens_with_more_features(orthogonal):
    q, k, _, _ = _inputs(seed=8)
    q, k = q[0, :4, 0] * D**-0.25, k[0, :4, 0] * D**-0.25  # four (q, k) pairs, scaled as in the module
    exact = np.exp((np.asarray(q, np.float64) * k).sum(-1))
    few, many = _kernel_estimates(orthogonal, q, k, num_features=(16, 256))
    for estimates in (few, many):
        standard_error = estimates.std(0) / np.sqrt(len(estimates))
        assert np.all(np.abs(estimates.mean(0) - exact) < 4 * standard_error)
    # The relative error shrinks as 1/sqrt(m): to a quarter from m = 16 to 256, in expectation.
    rms_relative_error = lambda estimates: np.sqrt(np.mean(((estimates - exact) / exact) ** 2))
    assert rms_relative_error(many) < 0.5 * rms_relative_error(few)


def test_orthogonal_projection_has_orthogonal_rows_within_each_block():
    rows = np.asarray(_traced(lambda key: feature_maps.random_projection(key, 10, 4), _key(3)), np.float64)
    for block in (rows[0:4], rows[4:8], rows[8:10]):  # blocks of dim rows, the last one truncated
        gram = block @ block.T
        np.testing.assert_allclose(gram - np.diag(np.diag(gram)), 0, atol=1e-5)


def test_performer_redraws_its_projection_on_schedule_and_only_in_training():
    module = _create("performer", redraw_every_steps=3)
    graphdef, state = nnx.split(module)

    @jax.jit
    def train_step(state, step):  # as the train step calls it: inside jit on the traced step
        model = nnx.merge(graphdef, state)
        model.on_train_step(step)
        return nnx.state(model)

    projections = [np.asarray(module.projection[...])]
    for step in range(5):
        state = train_step(state, jnp.int32(step))
        projections.append(np.asarray(nnx.merge(graphdef, state).projection[...]))
    changed = [not np.array_equal(before, after) for before, after in zip(projections, projections[1:])]
    assert changed == [True, False, False, True, False]  # steps 0 and 3

    q, k, v, key_valid = _inputs()
    forward = nnx.jit(lambda module, q, k, v: module(q, k, v, harness.mask(key_valid)))  # carries state changes out
    first = forward(module, q, k, v)
    np.testing.assert_array_equal(forward(module, q, k, v), first)
    np.testing.assert_array_equal(module.projection[...], projections[0])


def test_performer_projection_is_state_but_not_a_parameter():
    module = _create("performer")
    assert module.projection[...].shape == (H, 8, D)
    assert not jax.tree.leaves(nnx.state(module, nnx.Param))
    assert any(leaf.shape == (H, 8, D) for leaf in jax.tree.leaves(nnx.state(module)))


# Every feature dim below L = 13: taylor and exp_limit need head_dim 2 for it (C(2 + 2, 2) = 6).
RANK_CASES = [("linear", {}), ("relu", {}), ("performer", {}), ("cosformer", {}), ("hedgehog", {}),
              ("taylor", {"head_dim": 2}), ("exp_limit", {"head_dim": 2})]


def _numerical_rank(matrix):  # float32 weights: singular values below 1e-5 of the largest are round-off
    s = np.linalg.svd(np.asarray(matrix, np.float64), compute_uv=False)
    return int((s > 1e-5 * s[0]).sum())


@pytest.mark.parametrize("name, options", RANK_CASES)
def test_rank_is_bounded_by_feature_dim_bidirectionally_but_not_causally(name, options):
    q, k, v, _ = _inputs(seed=6, head_dim=options.get("head_dim", D))
    no_padding = jnp.ones((B, 1, 1, L), bool)
    module, attend_bidirectional = _attention(name, False, **options)
    _, attend_causal = _attention(name, True, **options)
    assert module.feature_dim < L
    _, bidirectional = attend_bidirectional(q, k, v, no_padding)
    _, causal = attend_causal(q, k, v, no_padding)
    for b in range(B):
        for h in range(H):
            assert _numerical_rank(bidirectional[b, h]) <= module.feature_dim
            assert _numerical_rank(causal[b, h]) > module.feature_dim


def _all_finite(tree):
    return all(np.all(np.isfinite(np.asarray(x, np.float32))) for x in jax.tree.leaves(tree))


def test_performer_stays_finite_in_bfloat16():
    q, k, v, key_valid = _inputs(seed=10, norm=10.0)
    q, k, v = (jnp.asarray(x, jnp.bfloat16) for x in (q, k, v))
    _, params, gradients = _differentiated("performer")
    grads, out = gradients(q, k, v, params, harness.mask(key_valid), jnp.ones((B, L, H, D)))
    assert all(x.dtype == jnp.bfloat16 for x in (out, *grads[:3]))
    assert _all_finite(out) and _all_finite(grads)


@pytest.mark.parametrize("option", ["taylor_order", "exp_limit_n"])
def test_odd_orders_are_refused_since_the_normaliser_could_cross_zero(option):
    name = "taylor" if option == "taylor_order" else "exp_limit"
    with pytest.raises(ValueError, match=f"{option}=3 must be a positive even integer; .*negative"):
        _create(name, **{option: 3})
