"""Mixed precision: every attention kind computing in bfloat16 against float32, and the sums that would
lose digits in bfloat16 (over keys, chunks and decoding steps) kept in float32.

Both runs see the same numbers: inputs and parameters are rounded to bfloat16 first, as the train step
rounds its parameters (`_in_compute_dtype`). A difference then measures the computation's precision,
not the inputs' rounding, to which hard attention's top-k choice and local-p's window edges respond in
whole keys.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention
from attention import registry
from attention.kernelized_base import KernelizedAttention
from attention.score_base import ScoreAttention
from training.steps import _in_compute_dtype

pytestmark = pytest.mark.accelerator  # make test-accelerator runs these on the GPU or TPU

B, H, L, D = 1, 2, 1024, 16
KERNELISED = [name for name in attention.names() if issubclass(registry.get(name), KernelizedAttention)]
# bfloat16 keeps 8 significant bits, so one rounding errs by up to 2^-8 (0.4%) of the value rounded. Allowed:
# two roundings, the output's own and one of the terms it sums (weights or features rounded to bfloat16 to
# meet v in a bfloat16 matmul), relative to the output or, where v's terms cancel, to the values (|v| ~ 1).
# Measured, the error reaches at most about half of this bound; a state summed in bfloat16 exceeds it
# (decoding, below).
TOLERANCE = {"rtol": 2**-7, "atol": 2**-7}


def _inputs():
    """q, k, v [B, L, H, D] in bfloat16 and a key-padding mask [B, 1, 1, L] that drops the last 100 keys."""
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(B, L, H, D)), jnp.bfloat16) for _ in range(3))
    return q, k, v, jnp.arange(L)[None, None, None, :] < L - 100


def _split(name):
    """A module of kind `name` as (graphdef, params rounded to bfloat16, the other state)."""
    # rbg rather than the default threefry, whose random bits take seconds to compile on CPU.
    module = attention.create(name, num_heads=H, head_dim=D, d_model=H * D,
                              rngs=nnx.Rngs(jax.random.key(0, impl="rbg")))
    graphdef, params, rest = nnx.split(module, nnx.Param, ...)
    return graphdef, _in_compute_dtype(params, "bfloat16"), rest


def _outputs(graphdef, params, rest, q, k, v, mask, dtype):
    """Bidirectional over padded keys, and causal where the kind can attend causally (`incremental`)."""
    module = nnx.merge(graphdef, _in_compute_dtype(params, dtype), rest)
    q, k, v = (x.astype(dtype) for x in (q, k, v))
    # A kind that reads the layer's input (attention/input_gated.py) reads v's rows as it.
    side = {"inputs": v.reshape(v.shape[:2] + (-1,))} if getattr(module, "reads_inputs", False) else {}
    outputs = {"bidirectional, padded keys": module(q, k, v, mask, **side)}
    if module.incremental:
        outputs["causal"] = module(q, k, v, causal=True, **side)
    return outputs


@pytest.mark.parametrize("name", attention.names())
def test_bfloat16_output_is_the_float32_output_within_two_roundings(name):
    graphdef, params, rest = _split(name)
    # One compilation for both dtypes; params and inputs as arguments, lest XLA fold them as constants.
    both = jax.jit(lambda *args: [_outputs(graphdef, *args, dtype) for dtype in ("float32", "bfloat16")])
    expected, got = both(params, rest, *_inputs())
    for case in expected:
        assert got[case].dtype == jnp.bfloat16, case
        np.testing.assert_allclose(np.asarray(got[case], np.float32), expected[case], **TOLERANCE, err_msg=case)


def _equations(jaxpr):
    """The equations of a jaxpr and of every jaxpr nested in it (jit, custom_jvp, ...)."""
    for equation in jaxpr.eqns:
        yield equation
        for param in equation.params.values():
            for inner in param if isinstance(param, (tuple, list)) else (param,):
                inner = getattr(inner, "jaxpr", inner)  # a ClosedJaxpr's Jaxpr
                if hasattr(inner, "eqns"):
                    yield from _equations(inner)


def _bfloat16_equations(name):
    """The equations of kind `name`'s bidirectional and causal calls on bfloat16 inputs, and the outputs."""
    graphdef, params, rest = _split(name)
    traced = jax.make_jaxpr(lambda *args: _outputs(graphdef, *args, "bfloat16"))(params, rest, *_inputs())
    return list(_equations(traced.jaxpr)), traced.out_avals


def _described(equations):
    return [f"{e.primitive.name} -> {e.outvars[0].aval.str_short()}" for e in equations]


# Contractions (key states, scores, normaliser sums) and the division by the normaliser, in every kind.
SUMS_AND_DIVISION = ("dot_general", "div")


def _prefix_sum_equations(equations, feature_dim: int):
    """The causal form's sums over chunk states [..., m, Dv], whatever their layout: a cumsum, or the adds and
    multiplies of a carry that adds each chunk's state to the earlier ones' (rescaled under a stabiliser)."""
    return [e for e in equations if e.primitive.name == "cumsum"
            or (e.primitive.name in ("add", "mul") and e.outvars[0].aval.shape[-2:] == (feature_dim, D)
                and jnp.issubdtype(e.outvars[0].aval.dtype, jnp.floating))]


@pytest.mark.parametrize("name", KERNELISED)
def test_kernelised_kinds_sum_and_divide_in_float32_from_bfloat16_inputs(name):
    equations, outputs = _bfloat16_equations(name)
    checked = [e for e in equations if e.primitive.name in SUMS_AND_DIVISION]
    assert {e.primitive.name for e in checked} == set(SUMS_AND_DIVISION)
    prefix_sums = _prefix_sum_equations(equations, nnx.merge(*_split(name)).feature_dim)
    assert prefix_sums
    in_bfloat16 = [e for e in checked + prefix_sums if e.outvars[0].aval.dtype != jnp.float32]
    assert not in_bfloat16, _described(in_bfloat16)
    assert all(output.dtype == jnp.bfloat16 for output in outputs)


def _contracted_sizes(equation):
    (lhs_contracting, _), _ = equation.params["dimension_numbers"]
    return {equation.invars[0].aval.shape[axis] for axis in lhs_contracting}


# The kinds whose output is ScoreAttention's weighted sum of values (the dot-product kinds call
# jax.nn.dot_product_attention instead).
WEIGHTED_SUM_KINDS = [name for name in attention.names()
                      if registry.get(name).__call__ is ScoreAttention.__call__]


@pytest.mark.parametrize("name", WEIGHTED_SUM_KINDS)
def test_score_kinds_sum_over_keys_in_float32_from_bfloat16_inputs(name):
    equations, outputs = _bfloat16_equations(name)
    over_keys = [e for e in equations if e.primitive.name == "dot_general" and L in _contracted_sizes(e)]
    # One weighted sum per call (bidirectional, causal); softmax_rank's projection adds products of its own.
    assert len(over_keys) >= len(outputs)
    assert all(e.outvars[0].aval.dtype == jnp.float32 for e in over_keys), _described(over_keys)


@pytest.mark.parametrize("name", ["linear", "performer"])  # performer: its state is rescaled as keys come
def test_decoding_state_stays_float32_over_a_thousand_bfloat16_steps(name):
    """The state sums a term per step. Summed in bfloat16 it would stop growing (past ~256 terms of similar
    size, a new term is below half its last digit) and the outputs of late steps would drift by several %."""
    graphdef, params, rest = _split(name)
    q, k, v, _ = _inputs()

    def decoded_and_full(params, rest, q, k, v):
        module = nnx.merge(graphdef, params, rest)

        def step(cache, t):
            at_t = lambda x: jax.lax.dynamic_slice_in_dim(x, t, 1, 1)
            out, cache = module.decode_step(at_t(q), at_t(k), at_t(v), cache, t, L, jnp.ones(B, bool))
            return cache, out[:, 0]

        # The cache asked for in the compute dtype, as the decoder asks for it.
        cache, outputs = jax.lax.scan(step, module.init_cache(B, L, H, D, D, jnp.bfloat16), jnp.arange(L))
        full = module(*(x.astype(jnp.float32) for x in (q, k, v)), causal=True)
        return cache, jnp.swapaxes(outputs, 0, 1), full

    cache, decoded, full = jax.jit(decoded_and_full)(params, rest, q, k, v)
    np.testing.assert_allclose(np.asarray(decoded, np.float32), full, **TOLERANCE)
    assert cache["state"].dtype == jnp.float32 and decoded.dtype == jnp.bfloat16
