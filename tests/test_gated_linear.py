"""gated_linear beyond the contract of tests/kind_harness.py: its chunked scan held to the recurrence it
computes, written position by position (float64 numpy for outputs, jax.numpy for gradients), at chunk sizes
that do and do not divide the length, with a scalar gate per head or one per key feature; decoding against the
parallel form; a gate of 1 is `linear`; cross-attention of more or fewer queries than keys against the dense
reference; no rank bound in eval.json."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention
from attention import MultiHeadAttention
from kind_harness import reference_for
from reference_delta import by_position, gated_inputs
from training import evaluation

pytestmark = pytest.mark.accelerator  # make test-accelerator runs these on the GPU or TPU

B, L, H, D = 2, 19, 2, 3
EPS = 1e-6


def _inputs(seed=0, lq=L, lk=L):
    return gated_inputs(B, H, D, seed, lq, lk)


def _create(chunk_size=4, gate_weight=None, gate_bias=None, gate="scalar"):
    """Per feature, the biases spread over [-0.5, 1] across heads and features."""
    module = attention.create("gated_linear", num_heads=H, head_dim=D, rngs=nnx.Rngs(0), chunk_size=chunk_size,
                              eps=EPS, gate=gate)
    rng = np.random.default_rng(7)
    shape = module.gate_bias.shape
    weight = rng.normal(size=module.gate_weight.shape) if gate_weight is None else gate_weight
    bias = np.linspace(1.0, -0.5, np.prod(shape)).reshape(shape) if gate_bias is None else gate_bias
    module.gate_weight[...] = jnp.asarray(weight, jnp.float32)
    module.gate_bias[...] = jnp.asarray(bias, jnp.float32)
    return module


def _params(module):
    return np.asarray(module.gate_weight[...], np.float64), np.asarray(module.gate_bias[...], np.float64)


def _phi(xp, x):
    return xp.where(x > 0, x + 1, xp.exp(xp.minimum(x, 0)))


def _gates(xp, k, key_valid, weight, bias):
    """g [B, L, H], or [B, L, H, m] per key feature (weight [H, m, d]), 1 at padded keys."""
    per_feature = weight.ndim == 3
    logit = xp.einsum("blhd,hmd->blhm" if per_feature else "blhd,hd->blh", k, weight) + bias
    valid = key_valid[:, :, None, None] if per_feature else key_valid[:, :, None]
    return xp.where(valid, 1 / (1 + xp.exp(-logit)), 1.0)


def _scan(xp, phi_q, phi_k, v, gate, strict=False):
    """[B, L, H, Dv] numerators and [B, L, H] normalisers of S_t = diag(g_t) S_{t-1} + phi(k_t) v_t^T (z alike),
    g_t one gate per feature or the same for all, read by phi(q_t) after key t is added, or before it where
    `strict`; one position at a time."""
    batch, _, heads, features = phi_k.shape

    def step(carry, rows):
        state, norm = carry
        phi_q, phi_k, v, gate = rows
        g = gate if gate.ndim == 3 else gate[:, :, None]  # [B, H, m or 1]
        state, norm = g[..., None] * state, g * norm
        added = state + xp.einsum("bhm,bhd->bhmd", phi_k, v), norm + phi_k
        read_state, read_norm = (state, norm) if strict else added
        return added, (xp.einsum("bhm,bhmd->bhd", phi_q, read_state), xp.einsum("bhm,bhm->bh", phi_q, read_norm))

    carry = xp.zeros((batch, heads, features, v.shape[-1])), xp.zeros((batch, heads, features))
    return by_position(xp, step, carry, [phi_q, phi_k, v, gate])


def recurrence(xp, q, k, v, key_valid, weight, bias, causal):
    """The gated recurrence, position by position. Bidirectionally, a forward scan plus a backward scan over
    the reversed sequence in which key s > t is decayed by the gates of t+1..s: reversed, the gate applied
    at each position is the next (unreversed) position's."""
    phi_q, phi_k = _phi(xp, q), _phi(xp, k) * key_valid[:, :, None, None]
    gate = _gates(xp, k, key_valid, weight, bias)
    numerator, normaliser = _scan(xp, phi_q, phi_k, v, gate)
    if not causal:
        next_gate = xp.concatenate([gate[:, 1:], xp.ones_like(gate[:, :1])], axis=1)
        back_num, back_norm = _scan(xp, phi_q[:, ::-1], phi_k[:, ::-1], v[:, ::-1], next_gate[:, ::-1], strict=True)
        numerator, normaliser = numerator + back_num[:, ::-1], normaliser + back_norm[:, ::-1]
    return numerator / (normaliser[..., None] + EPS)


def _mask(key_valid):
    return jnp.asarray(key_valid[:, None, None, :])


def _f32(*arrays):
    return [jnp.asarray(x, jnp.float32) for x in arrays]


@functools.cache
def _attend(chunk_size, causal, gate="scalar"):
    module = _create(chunk_size, gate=gate)
    return module, jax.jit(lambda q, k, v, mask: module(q, k, v, mask, causal=causal))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("chunk_size, gate", [(1, "scalar"), (4, "scalar"), (16, "scalar"), (0, "scalar"),
                                              (1, "per_feature"), (4, "per_feature")])
def test_chunked_scan_equals_the_recurrence(chunk_size, gate, causal):
    """Chunks of 1, 4 and 16 (none divides 19; 16 leaves a chunk of 3) and 0 (the table's)."""
    q, k, v, key_valid = _inputs()
    module, attend = _attend(chunk_size, causal, gate)
    want = recurrence(np, q, k, v, key_valid, *_params(module), causal)
    got = attend(*_f32(q, k, v), _mask(key_valid))
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)


def test_gates_decay_the_output():
    """The recurrence's gates matter at these inputs: without them (b large) the output moves by far more
    than the tolerance, so the test above could not pass with the decay dropped."""
    q, k, v, key_valid = _inputs()
    module, attend = _attend(4, True)
    ungated = recurrence(np, q, k, v, key_valid, np.zeros((H, D)), np.full(H, 50.0), True)
    assert np.abs(np.asarray(attend(*_f32(q, k, v), _mask(key_valid))) - ungated).max() > 0.1


def test_a_long_sequence_of_strong_decay_stays_exact():
    """400 positions, 25 chunks, gates near sigmoid(-4) and sigmoid(-1): the log gates summed over the sequence
    reach -1,600, so the chunks' decays must come from sums within each chunk to stay exact in float32."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.normal(size=(1, 400, H, D)) for _ in range(3))
    module = _create(16, gate_weight=np.zeros((H, D)), gate_bias=[-4.0, -1.0])
    got = jax.jit(lambda q, k, v: module(q, k, v, causal=True))(*_f32(q, k, v))
    want = recurrence(np, q, k, v, np.ones((1, 400), bool), *_params(module), True)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("gate", ["scalar", "per_feature"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_gradients_equal_the_recurrences(causal, gate):
    """jax.grad through the chunked scan (chunks of 4, padded keys) against jax.grad of the position-by-position
    recurrence in jax.numpy, for q, k, v and the gate's parameters."""
    q, k, v, key_valid = _inputs(seed=1)
    module = _create(4, gate=gate)
    graphdef, params, rest = nnx.split(module, nnx.Param, ...)
    cotangent = jnp.asarray(np.random.default_rng(2).normal(size=(B, L, H, D)), jnp.float32)

    def loss(params, q, k, v):
        out = nnx.merge(graphdef, params, rest)(q, k, v, _mask(key_valid), causal=causal)
        return (out * cotangent).sum()

    def reference_loss(weight, bias, q, k, v):
        return (recurrence(jnp, q, k, v, jnp.asarray(key_valid), weight, bias, causal) * cotangent).sum()

    param_grads, *got = jax.jit(jax.grad(loss, (0, 1, 2, 3)))(params, *_f32(q, k, v))
    *want, = jax.jit(jax.grad(reference_loss, (0, 1, 2, 3, 4)))(*_f32(*_params(module), q, k, v))
    got = [param_grads["gate_weight"][...], param_grads["gate_bias"][...], *got]
    for name, g, w in zip(["gate_weight", "gate_bias", "q", "k", "v"], got, want):
        np.testing.assert_allclose(g, w, atol=5e-5, rtol=5e-5, err_msg=name)
        assert np.abs(np.asarray(w)).max() > 1e-3, name  # a gradient that is there to get wrong


@pytest.mark.parametrize("gate", ["scalar", "per_feature"])
def test_decoding_equals_the_parallel_form(gate):
    """Causal steps (a padded key mid-sequence) equal the causal call's rows, and cross-attention steps of a
    7-position decoder over a padded 11-position source equal the bidirectional call over it."""
    q, k, v, key_valid = _inputs(seed=4)
    qc, kc, vc, source_valid = _inputs(seed=5, lq=7, lk=11)
    module = _create(4, gate=gate)
    q, k, v, qc, kc, vc = _f32(q, k, v, qc, kc, vc)

    @jax.jit
    def decode(q, k, v, qc, kc, vc):
        def self_step(cache, t):
            rows = [jax.lax.dynamic_slice_in_dim(x, t, 1, 1) for x in (q, k, v)]
            return module.decode_step(*rows, cache, t, L, jnp.asarray(key_valid)[:, t])[::-1]

        def cross_step(memory, t):
            row = jax.lax.dynamic_slice_in_dim(qc, t, 1, 1)
            return module.attend_memory(row, memory, jnp.asarray(source_valid), t, 7)[::-1]

        _, steps = jax.lax.scan(self_step, module.init_cache(B, L, H, D, D), jnp.arange(L))
        _, cross = jax.lax.scan(cross_step, module.init_memory(kc, vc, jnp.asarray(source_valid), 7), jnp.arange(7))
        return jnp.swapaxes(steps[:, :, 0], 0, 1), jnp.swapaxes(cross[:, :, 0], 0, 1)

    stepped, stepped_cross = decode(q, k, v, qc, kc, vc)
    np.testing.assert_allclose(stepped, module(q, k, v, _mask(key_valid), causal=True), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(stepped_cross, module(qc, kc, vc, _mask(source_valid)), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_a_gate_of_one_is_the_linear_kind(causal):
    """b = 1e4, w = 0: every gate rounds to 1 (log sigmoid to 0), and gated_linear is `linear`."""
    q, k, v, key_valid = _f32(*_inputs(seed=6))
    mask = _mask(np.asarray(key_valid, bool))
    gated = _create(4, gate_weight=np.zeros((H, D)), gate_bias=[1e4, 1e4])
    linear = attention.create("linear", num_heads=H, head_dim=D, rngs=nnx.Rngs(0), chunk_size=4, eps=EPS)
    np.testing.assert_allclose(gated(q, k, v, mask, causal=causal), linear(q, k, v, mask, causal=causal),
                               atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_a_gate_per_feature_alike_across_features_is_the_scalar_gate(causal):
    """w[h, f] = w[h] and b[h, f] = b[h] for every feature f: outputs and weights are the scalar gate's; and the
    per-feature weights times v are its output where the features' gates differ."""
    q, k, v, key_valid = _f32(*_inputs(seed=13))
    mask = _mask(np.asarray(key_valid, bool))
    scalar = _create(4)
    weight, bias = _params(scalar)
    alike = _create(4, np.broadcast_to(weight[:, None], (H, D, D)), np.broadcast_to(bias[:, None], (H, D)),
                    gate="per_feature")
    for name, got, want in [("output", alike(q, k, v, mask, causal=causal), scalar(q, k, v, mask, causal=causal)),
                            ("weights", alike.weights(q, k, mask, causal=causal),
                             scalar.weights(q, k, mask, causal=causal))]:
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-5, err_msg=name)
    per_feature = _create(4, gate="per_feature")
    np.testing.assert_allclose(np.einsum("bhqk,bkhd->bqhd", per_feature.weights(q, k, mask, causal=causal), v),
                               per_feature(q, k, v, mask, causal=causal), atol=2e-6, rtol=1e-5)


def test_initial_gates_are_near_one():
    module = attention.create("gated_linear", num_heads=H, head_dim=D, rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(module.gate_weight[...], 0.0)
    np.testing.assert_allclose(jax.nn.sigmoid(module.gate_bias[...]), 1 / (1 + np.exp(-3.0)), rtol=1e-6)


@pytest.mark.parametrize("implementation", ["xla", "pallas"])
def test_implementations_it_has_not_are_refused(implementation):
    with pytest.raises(ValueError, match=f"^kernelized_implementation='{implementation}' must be one of 'auto', "
                                         f"'autodiff'"):
        attention.create("gated_linear", num_heads=H, head_dim=D, rngs=nnx.Rngs(0),
                         kernelized_implementation=implementation)


def test_state_size_is_the_linear_kinds():
    module = attention.create("gated_linear", num_heads=H, head_dim=D, rngs=nnx.Rngs(0))
    assert module.state_size(D, 5, 1000, True) == D * 5


class _Model:
    """The one method of a model that evaluation.rank_bounds reads."""

    def __init__(self, kind):
        self.layer = MultiHeadAttention(kind, d_model=H * D, num_heads=H, rngs=nnx.Rngs(0))

    def attention_layers(self):
        return {"encoder_self": [self.layer], "decoder_self": [self.layer]}


def test_its_feature_dim_bounds_no_rank_in_eval():
    """Bidirectional weights of rank above m = D (the decay matrix is of full rank), hence no rank bound in
    eval.json's rows, where linear's m is one."""
    q, k, _, _ = _inputs(seed=8)
    weights = np.asarray(_create(4).weights(*_f32(q, k)), np.float64)[1, 0]  # example 1: no padding
    singular = np.linalg.svd(weights, compute_uv=False)
    assert (singular > 1e-4 * singular[0]).sum() > D
    assert evaluation.rank_bounds(_Model("gated_linear")) == {"encoder_self": [None], "decoder_self": [None]}
    assert evaluation.rank_bounds(_Model("linear")) == {"encoder_self": [D], "decoder_self": [None]}


@pytest.mark.parametrize("lq, lk", [(23, 19), (6, 19)])
def test_cross_attention_of_more_or_fewer_queries_matches_the_dense_reference(lq, lk):
    """Query t at position t of the keys' axis, beyond the last key too (23 queries over 19 keys): the output
    and weights against the contract's dense reference, which sums the gates between by an explicit indicator."""
    q, _, _, _ = _inputs(seed=9, lq=lq, lk=lq)
    _, k, v, key_valid = _inputs(seed=10, lq=lk, lk=lk)
    module = _create(4)
    weight, bias = _params(module)
    allowed = np.broadcast_to(key_valid[:, None, None, :], (B, H, lq, lk))
    want_weights = reference_for("gated_linear").weights(np, q, k, allowed, {"gate_weight": weight, "gate_bias": bias})
    out = module(*_f32(q, k, v), _mask(key_valid))
    np.testing.assert_allclose(out, np.einsum("bhqk,bkhd->bqhd", want_weights, v), atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(module.weights(*_f32(q, k), _mask(key_valid)), want_weights, atol=2e-6)
