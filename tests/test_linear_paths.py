"""The kernelised kinds' paths against each other: the custom-VJP sums (attention/chunked_sums.py,
`implementation="xla"`) against the former path they replace (`implementation="autodiff"`, XLA's autodiff of
the chunked sums), and the Pallas kernels (attention/linear_pallas.py, in interpret mode on the CPU) against
the custom-VJP sums: the same outputs and gradients within float32 rounding, for every kind, both strategies
of carrying the state across chunks, lengths that are not a multiple of the chunk, padded keys, and the
keys' stabiliser (performer) growing inside and across chunks. The dense references of tests/kind_harness.py
hold the default path to the contract. The kernels' Triton lowering for a GPU is checked without one."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention
from attention import chunked_sums, chunking, kernel_sums, linear_pallas
from attention.kernelized_base import KernelizedAttention
from kind_harness import D, H, f32, inputs, mask, package_kinds_of, reference_for

pytestmark = pytest.mark.accelerator  # make test-accelerator runs these on the GPU or TPU


def _module(kind, implementation, chunk_size):
    options = {**reference_for(kind).options, "chunk_size": chunk_size, "implementation": implementation}
    module = attention.create(kind, num_heads=H, head_dim=D, rngs=nnx.Rngs(jax.random.key(0, impl="rbg")),
                              **options)
    params = nnx.state(module, nnx.Param)  # hedgehog's weight away from the identity it starts at
    rng = np.random.default_rng(1)
    nnx.update(module, jax.tree.map(lambda x: x + jnp.asarray(0.5 * rng.normal(size=x.shape), x.dtype), params))
    return module


def _results(kind, implementation, chunk_size, q, k, v, key_mask, cotangent):
    """Causal and bidirectional outputs, and the gradients of each for q, k, v and the parameters."""
    graphdef, params, rest = nnx.split(_module(kind, implementation, chunk_size), nnx.Param, ...)

    def loss(params, q, k, v, causal):
        out = nnx.merge(graphdef, params, rest)(q, k, v, key_mask, causal=causal)
        return (out * cotangent).sum(), out

    def run(params, q, k, v):
        outputs, grads = [], []
        for causal in (True, False):
            grad, out = jax.grad(loss, (0, 1, 2, 3), has_aux=True)(params, q, k, v, causal)
            outputs.append(out)
            grads += jax.tree.leaves(grad)
        return *outputs, grads

    return jax.jit(run)(params, q, k, v)


def _assert_same(got, want):
    for got_array, want_array in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        scale = float(np.abs(np.asarray(want_array)).max())
        np.testing.assert_allclose(got_array, want_array, rtol=2e-5, atol=2e-6 * max(scale, 1.0))


def _compare(kind, strategy, monkeypatch, length, chunk_size, growth=0.0, paths=("xla", "autodiff")):
    """Two paths on inputs of `length` positions (example 0 with 4 padded keys), their norms growing by
    `growth` per position (later keys setting larger stabilisers)."""
    monkeypatch.setattr(chunking, "strategy_for", lambda platform, length: strategy)
    q, k, v, key_valid = inputs(seed=length, lq=length, lk=length)
    q, k = (x * (1 + growth * np.arange(length))[None, :, None, None] for x in (q, k))
    cotangent = jnp.asarray(np.random.default_rng(2).normal(size=v.shape), jnp.float32)
    arguments = (*f32(q, k, v), mask(key_valid), cotangent)
    _assert_same(*(_results(kind, path, chunk_size, *arguments) for path in paths))


@pytest.mark.parametrize("strategy", chunked_sums.STRATEGIES)
@pytest.mark.parametrize("kind", package_kinds_of(KernelizedAttention))
def test_custom_vjp_equals_the_former_path(kind, strategy, monkeypatch):
    """13 positions in chunks of 5: the last chunk padded."""
    _compare(kind, strategy, monkeypatch, length=13, chunk_size=5)


@pytest.mark.parametrize("length, chunk_size, strategy", [(16, 4, "sequential"), (16, 4, "parallel"),
                                                          (13, 5, "sequential"), (6, 0, "parallel")])
def test_custom_vjp_equals_the_former_path_under_a_growing_stabiliser(length, chunk_size, strategy, monkeypatch):
    """Performer's keys scaled by their running max, which grows inside and across chunks (whole chunks,
    a padded last one, and one chunk of the whole sequence)."""
    _compare("performer", strategy, monkeypatch, length, chunk_size, growth=0.3)


@pytest.mark.parametrize("reference", ["xla", "autodiff"])
@pytest.mark.parametrize("kind, growth", [("linear", 0.0), ("performer", 0.3), ("cosformer", 0.0)])
def test_pallas_kernels_equal_the_xla_path(kind, growth, reference, monkeypatch):
    """In interpret mode: plain features, a growing stabiliser, position-dependent features; 13 positions in
    chunks of 4 (the last padded), padded keys; outputs and gradients. Against the XLA path, whose per-chunk
    steps the kernels share, and against the former autodiff path, which shares none of them."""
    _compare(kind, "sequential", monkeypatch, length=13, chunk_size=4, growth=growth, paths=("pallas", reference))


@pytest.mark.parametrize("stabilised", [False, True])
def test_pallas_kernels_lower_through_triton_for_a_gpu(stabilised):
    """Lowered for CUDA (no GPU needed): every operation of the forward and backward kernels has a Triton
    lowering, bfloat16 operands included."""
    q, v = jnp.ones((1, 40, 2, 32), jnp.bfloat16), jnp.ones((1, 40, 2, 16), jnp.bfloat16)
    stabiliser = jnp.zeros((1, 40, 2, 1), jnp.float32) if stabilised else None

    def loss(q, k, v):
        return linear_pallas.causal_sums(q, k, v, jnp.float32(1e-6), stabiliser, 16, False).astype(jnp.float32).sum()

    text = jax.jit(jax.grad(loss, (0, 1, 2))).trace(q, q, v).lower(lowering_platforms=("cuda",)).as_text()
    assert text.count("__gpu$xla.gpu.triton") == 3  # forward, dq, dk and dv


def test_auto_takes_the_kernels_where_they_compile_and_pallas_is_refused_where_they_cannot():
    by_kernels = kernel_sums._by_kernels
    assert by_kernels("auto", "gpu", 64, 64, 64) and by_kernels("pallas", "gpu", 16, 128, 32)
    assert not by_kernels("auto", "gpu", 6, 64, 64) and not by_kernels("auto", "cpu", 64, 64, 64)
    assert not by_kernels("xla", "gpu", 64, 64, 64) and not by_kernels("autodiff", "gpu", 64, 64, 64)
    assert by_kernels("pallas", "cpu", 6, 4, 5)  # interpret mode
    with pytest.raises(ValueError, match="implementation='pallas' cannot run here: chunk 5 is not one of 16"):
        by_kernels("pallas", "gpu", 64, 64, 5)
