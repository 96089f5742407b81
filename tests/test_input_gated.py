"""The kinds that read the layer's input (attention/input_gated.py: gla, deltanet, gated_deltanet) against their
papers' recurrences in float64 (tests/reference_recurrent.py): outputs, weights, padding, causality, gradients
and decoding; their refusal in cross-attention, Mamba2's initialisation, and training in the encoder and decoder."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention
from attention import input_gated, key_gates
from attention.input_gated import InputGatedAttention
from kind_harness import assert_every_parameter_trains, package_kinds_of
from reference_recurrent import RECURRENCES
from training import validate

pytestmark = pytest.mark.accelerator  # make test-accelerator runs these on the GPU or TPU

B, L, H, D, D_MODEL = 2, 13, 2, 4, 8  # values D_MODEL / H = 4 wide; chunks of 5 do not divide L
KINDS = package_kinds_of(InputGatedAttention)


def test_every_input_gated_kind_has_a_recurrence():
    assert sorted(KINDS) == sorted(RECURRENCES) == ["deltanet", "gated_deltanet", "gla"]


@functools.cache
def create(kind: str):
    """The kind with its test options, every parameter moved off its initial value (the output norm's scale
    starts at 1, the gates' biases at 0): the reference must use them all to agree."""
    module = attention.create(kind, num_heads=H, head_dim=D, d_model=D_MODEL, rngs=nnx.Rngs(0),
                              **RECURRENCES[kind][1])
    rng = np.random.default_rng(7)
    params = nnx.state(module, nnx.Param)
    nnx.update(module, jax.tree.map(lambda x: x + jnp.asarray(0.5 * rng.normal(size=x.shape), x.dtype), params))
    return module


def arrays(module, dtype=np.float64) -> dict:
    return {".".join(map(str, path)): np.asarray(variable[...], dtype)
            for path, variable in nnx.state(module, nnx.Param).flat_state()}


def inputs(seed=0):
    """q, k [B, L, H, D], v [B, L, H, D], x [B, L, D_MODEL] in float64 and key_valid [B, L] (example 0: 4 padded)."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.normal(size=(B, L, H, D)) for _ in range(3))
    x = rng.normal(size=(B, L, D_MODEL))
    key_valid = np.ones((B, L), bool)
    key_valid[0, L - 4:] = False
    return q, k, v, x, key_valid


def reference(kind, module, q, k, v, x, key_valid, causal):
    return RECURRENCES[kind][0](np, q, k, v, x, key_valid, causal, arrays(module))


def f32(*xs):
    return [jnp.asarray(x, jnp.float32) for x in xs]


def mask(key_valid):
    return jnp.asarray(key_valid[:, None, None, :])


@functools.cache
def attending(kind: str, causal: bool):
    module = create(kind)
    return jax.jit(lambda q, k, v, x, mask: (module(q, k, v, mask, causal=causal, inputs=x),
                                             module.weights(q, k, mask, causal=causal, inputs=x)))


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("kind", KINDS)
def test_output_and_weights_match_the_recurrence(kind, causal):
    """The output at every query of the padded example too; weights @ v is the recurrence's o before the norm."""
    q, k, v, x, key_valid = inputs()
    core, want = reference(kind, create(kind), q, k, v, x, key_valid, causal)
    out, weights = attending(kind, causal)(*f32(q, k, v, x), mask(key_valid))
    np.testing.assert_allclose(out, want, atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(np.einsum("bhqk,bkhd->bqhd", weights, v), core, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("kind", KINDS)
def test_padded_and_future_keys_change_nothing(kind, causal):
    q, k, v, x, key_valid = inputs(seed=5)
    attend = attending(kind, causal)
    out, _ = attend(*f32(q, k, v, x), mask(key_valid))
    k2, v2, x2 = k.copy(), v.copy(), x.copy()
    k2[~key_valid], v2[~key_valid], x2[~key_valid] = 100.0, -100.0, 30.0
    if causal:  # and in the future of query 6: its outputs up to 6 must stay
        k2[:, 7:], v2[:, 7:], x2[:, 7:] = 50.0, 50.0, -30.0
    out2, _ = attend(*f32(q, k2, v2, x2), mask(key_valid))
    upto = 7 if causal else L
    valid_queries = key_valid[:, :upto, None, None]  # x at a padded position is its query's input too
    np.testing.assert_allclose(np.where(valid_queries, out2[:, :upto], 0), np.where(valid_queries, out[:, :upto], 0),
                               atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_gradients_match_the_recurrence(kind):
    """Causal and padded at once, for q, k, v, x and every parameter: the kind's gradient along three random
    directions of all of them equals the float64 recurrence's central difference along each."""
    q, k, v, x, key_valid = inputs(seed=3)
    rng = np.random.default_rng(4)
    cotangent = rng.normal(size=(B, L, H, D))
    module = create(kind)
    graphdef, params, rest = nnx.split(module, nnx.Param, ...)

    def loss(params, q, k, v, x):
        out = nnx.merge(graphdef, params, rest)(q, k, v, mask(key_valid), causal=True, inputs=x)
        return (out * jnp.asarray(cotangent, jnp.float32)).sum()

    param_grads, *input_grads = jax.jit(jax.grad(loss, (0, 1, 2, 3, 4)))(params, *f32(q, k, v, x))
    param_grads = {".".join(map(str, path)): np.asarray(value[...]) for path, value in param_grads.flat_state()}
    base = arrays(module)
    assert param_grads.keys() == base.keys()

    def reference_loss(step: float, directions) -> float:
        moved_params = {name: base[name] + step * directions[0][name] for name in base}
        moved = [array + step * direction for array, direction in zip((q, k, v, x), directions[1])]
        _, out = RECURRENCES[kind][0](np, *moved, key_valid, True, moved_params)
        return float((out * cotangent).sum())

    for _ in range(3):
        directions = ({name: rng.normal(size=array.shape) for name, array in base.items()},
                      [rng.normal(size=array.shape) for array in (q, k, v, x)])
        along = (sum(float((param_grads[name] * directions[0][name]).sum()) for name in base)
                 + sum(float((np.asarray(grad) * direction).sum()) for grad, direction in zip(input_grads, directions[1])))
        difference = (reference_loss(1e-6, directions) - reference_loss(-1e-6, directions)) / 2e-6
        np.testing.assert_allclose(along, difference, rtol=1e-3)


@pytest.mark.parametrize("kind", KINDS)
def test_decoding_steps_equal_the_causal_recurrence(kind):
    """Step by step, a padding key mid-sequence: each step is the recurrence's row, O(1) state."""
    q, k, v, x, key_valid = inputs(seed=11)
    key_valid[1, 5] = False
    module = create(kind)

    @jax.jit
    def run(q, k, v, x, key_valid):
        def step(cache, t):
            rows = [jax.lax.dynamic_slice_in_dim(a, t, 1, 1) for a in (q, k, v, x)]
            out, cache = module.decode_step(*rows[:3], cache, t, L, key_valid[:, t], inputs=rows[3])
            return cache, out[:, 0]

        _, outputs = jax.lax.scan(step, module.init_cache(B, L, H, D, D), jnp.arange(L))
        return jnp.swapaxes(outputs, 0, 1)

    _, want = reference(kind, module, q, k, v, x, key_valid, True)
    np.testing.assert_allclose(run(*f32(q, k, v, x), jnp.asarray(key_valid)), want, atol=5e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_without_the_output_norm_the_output_is_the_recurrences_state_read(kind):
    """output_norm=False (the ablation): o_t as the recurrence gives it, before any norm or gate, and no norm's
    parameters."""
    module = attention.create(kind, num_heads=H, head_dim=D, d_model=D_MODEL, rngs=nnx.Rngs(0), output_norm=False,
                              **RECURRENCES[kind][1])
    q, k, v, x, key_valid = inputs(seed=6)
    core, _ = reference(kind, module, q, k, v, x, key_valid, True)
    out = module(*f32(q, k, v), mask(key_valid), causal=True, inputs=jnp.asarray(x, jnp.float32))
    np.testing.assert_allclose(out, core, atol=2e-5, rtol=2e-5)
    assert not any(name.startswith("output_norm") for name in arrays(module))


def test_a_kind_that_reads_the_input_needs_its_width():
    with pytest.raises(ValueError, match="^attention kind 'gla' reads the layer's input x: create it with d_model"):
        attention.create("gla", num_heads=H, head_dim=D, rngs=nnx.Rngs(0))


def test_gated_deltanet_starts_at_mamba2s_decays_spread_over_heads():
    """A ~ U[1, 16] and softplus(dt_bias) = dt in [1e-3, 1e-1] per head: the decays at x = 0 spread over heads."""
    module = attention.create("gated_deltanet", num_heads=64, head_dim=D, d_model=64, rngs=nnx.Rngs(0))
    a, dt = np.exp(module.a_log[...]), np.asarray(jax.nn.softplus(module.dt_bias[...]))
    assert np.all((a >= 1) & (a <= 16)) and np.all((dt >= 1e-3 * 0.999) & (dt <= 1e-1 * 1.001))
    decays = np.exp(-a * dt)
    assert decays.min() < 0.7 and decays.max() > 0.99  # a spread, not one timescale
    assert isinstance(module.a_log, key_gates.DecayParam) and isinstance(module.dt_bias, key_gates.DecayParam)
    assert input_gated.A_RANGE == (1.0, 16.0) and input_gated.DT_RANGE == (1e-3, 1e-1)


def test_each_is_refused_across_and_all_train_in_the_encoder_and_decoder(tiny_config, tmp_path):
    """Each refused in cross-attention (it reads one sequence's input); then the three, one a layer
    (model.layer_kinds) of the encoder's and the decoder's self-attention, two steps of the loop's train step with
    every parameter (their gates included) updated: one compilation for the three."""
    config = tiny_config()
    for kind in KINDS:
        config.attention.name = kind
        with pytest.raises(validate.ConfigError, match=f"^config.attention.name='{kind}': the cross role attends "
                                                       f"across two sequences, .+; give attention.cross another kind$"):
            validate.validate(config)
    config.attention.name, config.attention.cross = "softmax", "softmax"
    config.model.num_layers, config.model.layer_kinds = len(KINDS), ",".join(KINDS)
    validate.validate(config)
    assert_every_parameter_trains(config, tmp_path)
