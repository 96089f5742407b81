"""delta and gated_delta beyond the contract of tests/kind_harness.py: the chunked form held to the sequential
recurrence of tests/reference_delta.py in float64 numpy (outputs, and gradients as central differences of it),
under padding and at chunk sizes that do not divide the length; decoding token by token against the chunked
form; weights() @ v against the output; the delta rule's overwrite; no rank bound."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention
from attention import MultiHeadAttention, key_gates
from kind_harness import module_arrays
from reference_delta import EPS, gated_inputs, recurrence

pytestmark = pytest.mark.accelerator  # make test-accelerator runs these on the GPU or TPU

B, L, H, D = 2, 19, 2, 3
KINDS = ("delta", "gated_delta")


def _inputs(seed=0, lq=L, lk=L):
    return gated_inputs(B, H, D, seed, lq, lk)


def _create(kind, chunk_size=4, **params):
    """The kind with parameters off their initial values (gated_delta's gates low enough to decay), or `params`."""
    module = attention.create(kind, num_heads=H, head_dim=D, rngs=nnx.Rngs(0), chunk_size=chunk_size, eps=EPS)
    rng = np.random.default_rng(7)
    values = {"beta_weight": rng.normal(size=(H, D)), "beta_bias": [0.5, -0.5],
              "gate_weight": rng.normal(size=(H, D)), "gate_bias": [1.0, -0.5], **params}
    for name, value in values.items():
        if hasattr(module, name):
            getattr(module, name)[...] = jnp.asarray(value, jnp.float32)
    return module


def _reference(module, q, k, v, key_valid, causal):
    return recurrence(np, q, k, v, key_valid, **module_arrays(module), causal=causal)


def _mask(key_valid):
    return jnp.asarray(key_valid[:, None, None, :])


def _f32(*arrays):
    return [jnp.asarray(x, jnp.float32) for x in arrays]


@functools.cache
def _attend(kind, chunk_size, causal):
    """(module, jitted (q, k, v, mask) -> (output, weights)): one compilation per shape."""
    module = _create(kind, chunk_size)
    return module, jax.jit(lambda q, k, v, mask: (module(q, k, v, mask, causal=causal),
                                                  module.weights(q, k, mask, causal=causal)))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("chunk_size", [1, 4, 0])  # 4 does not divide 19; 0: the table's, one chunk of 19 here
def test_chunked_form_equals_the_recurrence(kind, chunk_size, causal):
    q, k, v, key_valid = _inputs()
    module, attend = _attend(kind, chunk_size, causal)
    out, _ = attend(*_f32(q, k, v), _mask(key_valid))
    np.testing.assert_allclose(out, _reference(module, q, k, v, key_valid, causal), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lq, lk", [(L, L), (23, 19), (6, 19)], ids=["self", "more queries", "fewer queries"])
def test_weights_times_values_is_the_output(kind, lq, lk):
    """Bidirectionally (the causal weights are held to it by the contract), cross-attention included: query t at
    position t of the keys' axis, beyond the last key too. The output also against the recurrence."""
    q, _, _, _ = _inputs(seed=1, lq=lq, lk=lq)
    _, k, v, key_valid = _inputs(seed=2, lq=lk, lk=lk)
    module, attend = _attend(kind, 4, False)
    out, weights = attend(*_f32(q, k, v), _mask(key_valid))
    np.testing.assert_allclose(np.einsum("bhqk,bkhd->bqhd", weights, v), out, atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(out, _reference(module, q, k, v, key_valid, causal=False), atol=2e-5, rtol=2e-5)


def _loss(module, cotangent, key_valid, causal, q, k, v, **params):
    arrays = {**module_arrays(module), **params}
    return (recurrence(np, q, k, v, key_valid, **arrays, causal=causal) * cotangent).sum()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_gradients_equal_the_recurrences(kind, causal):
    """jax.grad through the chunked form (chunks of 4, padded keys) for q, k, v and every parameter, against
    central differences of the float64 recurrence along two random directions each (step 1e-6: its error, about
    1e-10, is far below float32's)."""
    q, k, v, key_valid = _inputs(seed=3)
    module = _create(kind)
    graphdef, params, rest = nnx.split(module, nnx.Param, ...)
    cotangent = np.random.default_rng(4).normal(size=(B, L, H, D))

    def loss(params, q, k, v):
        out = nnx.merge(graphdef, params, rest)(q, k, v, _mask(key_valid), causal=causal)
        return (out * jnp.asarray(cotangent, jnp.float32)).sum()

    param_grads, *input_grads = jax.jit(jax.grad(loss, (0, 1, 2, 3)))(params, *_f32(q, k, v))
    got = {**{path[0]: value[...] for path, value in param_grads.flat_state()}, **dict(zip("qkv", input_grads))}
    at = {**module_arrays(module), "q": q, "k": k, "v": v}
    assert set(got) == set(at)
    rng, step = np.random.default_rng(5), 1e-6
    for name, gradient in got.items():
        for _ in range(2):
            direction = rng.normal(size=at[name].shape)
            moved = [_loss(module, cotangent, key_valid, causal, **{**at, name: at[name] + sign * step * direction})
                     for sign in (1, -1)]
            want = (moved[0] - moved[1]) / (2 * step)
            assert abs(want) > 1e-3, name  # a derivative that is there to get wrong
            np.testing.assert_allclose(np.vdot(np.asarray(gradient, np.float64), direction), want, rtol=1e-4,
                                       atol=1e-5 * np.linalg.norm(direction), err_msg=name)


@pytest.mark.parametrize("kind", KINDS)
def test_decoding_equals_the_chunked_form(kind):
    """Causal steps (a padded key mid-sequence) equal the causal call's rows; cross-attention steps of a 7-position
    decoder over a padded 11-position source and of a 13-position one over a 9-position source equal the
    bidirectional call over it."""
    q, k, v, key_valid = _inputs(seed=6)
    q, k, v = _f32(q, k, v)
    module = _create(kind)

    @functools.partial(jax.jit, static_argnums=4)
    def cross_steps(qc, kc, vc, source_valid, decoder_length):
        def step(memory, t):
            row = jax.lax.dynamic_slice_in_dim(qc, t, 1, 1)
            return module.attend_memory(row, memory, source_valid, t, decoder_length)[::-1]

        memory = module.init_memory(kc, vc, source_valid, decoder_length)
        return jnp.swapaxes(jax.lax.scan(step, memory, jnp.arange(decoder_length))[1][:, :, 0], 0, 1)

    @jax.jit
    def self_steps(q, k, v, key_valid):
        def step(cache, t):
            rows = [jax.lax.dynamic_slice_in_dim(x, t, 1, 1) for x in (q, k, v)]
            return module.decode_step(*rows, cache, t, L, key_valid[:, t])[::-1]

        return jnp.swapaxes(jax.lax.scan(step, module.init_cache(B, L, H, D, D), jnp.arange(L))[1][:, :, 0], 0, 1)

    np.testing.assert_allclose(self_steps(q, k, v, jnp.asarray(key_valid)),
                               module(q, k, v, _mask(key_valid), causal=True), atol=1e-5, rtol=1e-5)
    for lq, lk in [(7, 11), (13, 9)]:
        qc, _, _, _ = _inputs(seed=7, lq=lq, lk=lq)
        _, kc, vc, source_valid = _inputs(seed=8, lq=lk, lk=lk)
        qc, kc, vc = _f32(qc, kc, vc)
        np.testing.assert_allclose(cross_steps(qc, kc, vc, jnp.asarray(source_valid), lq),
                                   module(qc, kc, vc, _mask(source_valid)), atol=1e-5, rtol=1e-5, err_msg=f"{lq}")


@pytest.mark.parametrize("kind", KINDS)
def test_a_key_written_again_replaces_its_value(kind):
    """beta = 1 (b = 1e4), no decay, one key at every position and the query on it: the delta rule overwrites,
    so causal output t is v_t (additive linear attention would return a mix of v_0..v_t)."""
    rng = np.random.default_rng(9)
    key = rng.normal(size=(1, 1, H, D))
    q = k = jnp.asarray(np.broadcast_to(key, (1, 6, H, D)), jnp.float32)
    v = jnp.asarray(rng.normal(size=(1, 6, H, D)), jnp.float32)
    module = _create(kind, beta_weight=np.zeros((H, D)), beta_bias=[1e4, 1e4], gate_weight=np.zeros((H, D)),
                     gate_bias=[1e4, 1e4])
    np.testing.assert_allclose(module(q, k, v, causal=True), v, atol=1e-5)


def test_gates_decay_gated_delta_and_a_gate_of_one_is_delta():
    """At these inputs the gates move the output by far more than the tolerance (so the tests above could not
    pass with the decay dropped), and with every gate 1 (b = 1e4) gated_delta is delta."""
    q, k, v, key_valid = _inputs(seed=10)
    _, attend = _attend("gated_delta", 4, True)
    gated, _ = attend(*_f32(q, k, v), _mask(key_valid))
    ungated = _reference(_create("delta"), q, k, v, key_valid, causal=True)
    assert np.abs(np.asarray(gated) - ungated).max() > 0.1
    one = _create("gated_delta", gate_weight=np.zeros((H, D)), gate_bias=[1e4, 1e4])
    np.testing.assert_allclose(one(*_f32(q, k, v), _mask(key_valid), causal=True),
                               _create("delta")(*_f32(q, k, v), _mask(key_valid), causal=True), atol=1e-6)


def test_a_long_sequence_of_strong_decay_stays_exact():
    """400 positions, 25 chunks, gates near sigmoid(-4) and sigmoid(-1): the log gates summed over the sequence
    reach -1,600, so the chunks' decays must come from sums within each chunk to stay exact in float32."""
    rng = np.random.default_rng(11)
    q, k, v = (rng.normal(size=(1, 400, H, D)) for _ in range(3))
    module = _create("gated_delta", 16, gate_weight=np.zeros((H, D)), gate_bias=[-4.0, -1.0])
    got = jax.jit(lambda q, k, v: module(q, k, v, causal=True))(*_f32(q, k, v))
    want = _reference(module, q, k, v, np.ones((1, 400), bool), causal=True)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_initial_values_state_size_and_paths(kind):
    """beta starts at 0.5 and gated_delta's gate at sigmoid(3) = 0.95; the state is d x Dv numbers per head; the
    one path takes "auto" or "autodiff", and the custom-VJP and Pallas paths of the other kinds are refused."""
    module = attention.create(kind, num_heads=H, head_dim=D, rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(module.beta_weight[...], 0.0)
    np.testing.assert_array_equal(module.beta_bias[...], 0.0)
    if kind == "gated_delta":
        np.testing.assert_array_equal(module.gate_weight[...], 0.0)
        np.testing.assert_array_equal(module.gate_bias[...], 3.0)
    assert module.state_size(D, 5, 1000, True) == D * 5
    for implementation in ("xla", "pallas"):
        with pytest.raises(ValueError, match=f"^kernelized_implementation='{implementation}' must be one of 'auto', "
                                             f"'autodiff'$"):
            attention.create(kind, num_heads=H, head_dim=D, rngs=nnx.Rngs(0), kernelized_implementation=implementation)


@pytest.mark.parametrize("kind", KINDS)
def test_its_feature_dim_bounds_no_rank(kind):
    """Bidirectional weights of rank above d (a triangular part of Q K^T times an invertible matrix), hence no
    rank bound in eval.json."""
    q, k, _, _ = _inputs(seed=12)
    _, attend = _attend(kind, 4, False)
    weights = np.asarray(attend(*_f32(q, k, k), None)[1], np.float64)[1, 0]
    singular = np.linalg.svd(weights, compute_uv=False)
    assert (singular > 1e-4 * singular[0]).sum() > D
    assert MultiHeadAttention(kind, d_model=H * D, num_heads=H, rngs=nnx.Rngs(0)).rank_bound is None


@pytest.mark.parametrize("kind, options", [("gated_delta", {}), ("gated_linear", {"gate": "scalar"}),
                                           ("gated_linear", {"gate": "per_feature"})])
def test_decay_bias_starts_every_gate_at_its_sigmoid_whatever_the_key(kind, options):
    """The gate-initialisation ablation's option: w = 0 and b = decay_bias, so log g = log sigmoid(b) at any key;
    b <= 0 is refused (a state halved or worse at every position)."""
    module = attention.create(kind, num_heads=H, head_dim=D, rngs=nnx.Rngs(0), decay_bias=5.0, **options)
    np.testing.assert_array_equal(module.gate_bias[...], 5.0)
    k = jax.random.normal(jax.random.key(3), (B, L, H, D))
    log_gate = key_gates.log_gate(k, module.gate_weight, module.gate_bias, None)
    np.testing.assert_allclose(log_gate, np.log(1 / (1 + np.exp(-5.0))), rtol=1e-6)
    with pytest.raises(ValueError, match=r"^decay_bias=0\.0 must be a number > 0; sigmoid\(b\) <= 0\.5 would halve"):
        attention.create(kind, num_heads=H, head_dim=D, rngs=nnx.Rngs(0), decay_bias=0.0, **options)
