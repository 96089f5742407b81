"""The kernelised kinds' paths against each other: the custom-VJP sums (attention/ops/chunked_sums.py,
`kernelized_implementation="xla"`) against the reference path (`kernelized_implementation="autodiff"`, XLA's autodiff of
the chunked sums), and the Pallas kernels (attention/ops/linear_pallas.py, in interpret mode on the CPU) against
the custom-VJP sums: the same outputs and gradients within float32 rounding, for every kind, both strategies
of carrying the state across chunks, lengths that are not a multiple of the chunk, padded keys, and the
keys' stabiliser (performer) growing inside and across chunks. The dense references of tests/kind_harness.py
hold the default path to the contract. The kernels' Triton lowering for an H100 is checked without one (an
abstract device), their budget rule against hand-counted blocks, and on a GPU (make test-accelerator) the
compiled kernels against the XLA path at every width and chunk the rule accepts."""
import functools
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import AbstractDevice, AbstractMesh, AxisType, use_abstract_mesh

import attention
from attention import registry
from attention.ops import chunked_sums, chunking, kernel_sums, linear_pallas
from attention.kernelized_base import KernelizedAttention
from kind_harness import D, H, f32, inputs, mask, package_kinds_of, reference_for

pytestmark = pytest.mark.accelerator  # make test-accelerator runs these on the GPU or TPU
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KiB = 1024


def _module(kind, implementation, chunk_size):
    options = {**reference_for(kind).options, "chunk_size": chunk_size,
               "kernelized_implementation": implementation}
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


@functools.cache
def _path_results(kind, path, strategy, length, chunk_size, growth):
    """_results of one path on inputs of `length` positions (example 0 with 4 padded keys), their norms growing
    by `growth` per position (later keys setting larger stabilisers), the state carried across chunks by
    `strategy`. Cached: the Pallas path (interpret mode, the slowest to compile) is held to two others."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(chunking, "strategy_for", lambda platform, length: strategy)
        q, k, v, key_valid = inputs(seed=length, lq=length, lk=length)
        q, k = (x * (1 + growth * np.arange(length))[None, :, None, None] for x in (q, k))
        cotangent = jnp.asarray(np.random.default_rng(2).normal(size=v.shape), jnp.float32)
        return _results(kind, path, chunk_size, *f32(q, k, v), mask(key_valid), cotangent)


def _compare(kind, strategy, length, chunk_size, growth=0.0, paths=("xla", "autodiff")):
    """Two paths on the same inputs (_path_results)."""
    _assert_same(*(_path_results(kind, path, strategy, length, chunk_size, growth) for path in paths))


# The kinds with the custom-VJP sums: gated_linear and the delta rule's have one path.
WITH_XLA_PATH = [kind for kind in package_kinds_of(KernelizedAttention)
                 if "xla" in registry.options_of(kind)["kernelized_implementation"].choices]


@pytest.mark.parametrize("strategy", chunked_sums.STRATEGIES)
@pytest.mark.parametrize("kind", WITH_XLA_PATH)
def test_custom_vjp_equals_the_autodiff_path(kind, strategy):
    """13 positions in chunks of 5: the last chunk padded."""
    _compare(kind, strategy, length=13, chunk_size=5)


@pytest.mark.parametrize("length, chunk_size, strategy", [(16, 4, "sequential"), (16, 4, "parallel"),
                                                          (13, 5, "sequential"), (6, 0, "parallel")])
def test_custom_vjp_equals_the_autodiff_path_under_a_growing_stabiliser(length, chunk_size, strategy):
    """Performer's keys scaled by their running max, which grows inside and across chunks (whole chunks,
    a padded last one, and one chunk of the whole sequence)."""
    _compare("performer", strategy, length, chunk_size, growth=0.3)


@pytest.mark.parametrize("reference", ["xla", "autodiff"])
@pytest.mark.parametrize("kind, growth", [("linear", 0.0), ("performer", 0.3), ("cosformer", 0.0)])
def test_pallas_kernels_equal_the_xla_path(kind, growth, reference):
    """In interpret mode: plain features, a growing stabiliser, position-dependent features; 13 positions in
    chunks of 4 (the last padded), padded keys; outputs and gradients. Against the XLA path, whose per-chunk
    steps the kernels share, and against the autodiff path, which shares none of them. On a GPU the kernels compile
    for real, and refuse these toy widths: skipped there, saying why (the GPU's own widths are bench_linear_paths')."""
    try:
        _compare(kind, "sequential", length=13, chunk_size=4, growth=growth, paths=("pallas", reference))
    except ValueError as error:
        if jax.default_backend() != "gpu" or "kernelized_implementation='pallas' cannot run here" not in str(error):
            raise
        pytest.skip(f"on this GPU: {error}")


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="interpret mode is the kernels' path off a GPU")
def test_an_explicit_pallas_off_a_gpu_says_once_that_it_runs_in_interpret_mode(monkeypatch, capsys):
    monkeypatch.setattr(kernel_sums, "_said_interpreted", set())
    phi = jnp.ones((1, 8, 1, 4))

    def trace(implementation):  # traced only, as jit traces: the kernels' results are the tests' above
        jax.eval_shape(lambda: kernel_sums.causal_linear_attention(phi, phi, phi, 1e-6, 4,
                                                                   implementation=implementation))

    for _ in range(3):  # as the train step, the eval step and each layer trace it
        trace("pallas")
    assert capsys.readouterr().out == (
        f"warning: attention.kernelized_implementation='pallas' on {jax.default_backend()}: the Pallas kernels run in "
        f"interpret mode (as XLA operations, far slower than 'xla'; for tests); 'auto' takes XLA's sums here\n")
    trace("auto")
    assert capsys.readouterr().out == ""


def _abstract_h100():
    """An abstract mesh of one H100: Pallas's Triton lowering reads the GPU's compute capability from it where
    no GPU is attached (jax 0.11 refuses to lower without one: "No supported GPU devices found")."""
    h100 = AbstractDevice(device_kind="NVIDIA H100 80GB HBM3", num_cores=132, platform="gpu")
    return use_abstract_mesh(AbstractMesh((1,), ("devices",), (AxisType.Explicit,), abstract_device=h100))


@pytest.mark.parametrize("stabilised", [False, True])
def test_pallas_kernels_lower_through_triton_for_an_h100(stabilised):
    """Lowered for CUDA, bfloat16 operands included: each kernel once per chunk of each (batch, head), its warps
    by the register rule (width 64, chunk 64: the states and forward kernels hold 12,288 and 24,576 float32
    elements, 96 and 192 registers a thread at 4 warps; dq and dk/dv 40,960 and 45,056, 320 and 352: 8 warps)."""
    q, v = jnp.ones((1, 136, 2, 64), jnp.bfloat16), jnp.ones((1, 136, 2, 64), jnp.bfloat16)
    stabiliser = jnp.zeros((1, 136, 2, 1), jnp.float32) if stabilised else None

    def loss(q, k, v):
        return linear_pallas.causal_sums(q, k, v, jnp.float32(1e-6), stabiliser, 64, False).astype(jnp.float32).sum()

    with _abstract_h100():
        text = jax.jit(jax.grad(loss, (0, 1, 2))).trace(q, q, v).lower(lowering_platforms=("cuda",)).as_text()
    calls = [line for line in text.splitlines() if "@__gpu$xla.gpu.triton" in line]
    launches = [(_attribute(call, "name"), _attribute(call, "num_warps")) for call in calls]
    # The chunk states twice: the backward rebuilds them rather than store them.
    assert launches == [('"chunk_states"', "4"), ('"outputs"', "4"), ('"chunk_states"', "4"),
                        ('"query_gradients"', "8"), ('"key_gradients"', "8")]
    for call in calls:  # (B, H, n): 136 positions in 3 chunks of 64
        assert [_attribute(call, axis) for axis in ("grid_x", "grid_y", "grid_z")] == ["1", "2", "3"]


def _attribute(custom_call: str, name: str) -> str:
    return custom_call.split(f" {name} = ", 1)[1].split(" ", 1)[0].rstrip(",")


def test_shared_memory_estimate_against_hand_counted_operands():
    """Two largest dots' operands at once, float32 unless both operands are the inputs."""
    key, forward = linear_pallas.KEY, linear_pallas.FORWARD
    # Width 128, chunk 128: every dk/dv dot has two float32 128 x 128 operands, 128 KiB: 256 KiB for two.
    assert linear_pallas.shared_memory_bytes(key, 128, 128, 128, jnp.float32) == 256 * KiB
    assert linear_pallas.shared_memory_bytes(key, 128, 128, 128, jnp.bfloat16) == 256 * KiB
    # Width 64, chunk 64: 16 KiB operands, 64 KiB.
    assert linear_pallas.shared_memory_bytes(key, 64, 64, 64, jnp.float32) == 64 * KiB
    # m = 128, Dv = 16, chunk 64: Q K^T (2 x 64 x 128) in the inputs' dtype, Q P (64 x 128 + 128 x 16) in
    # float32 (40 KiB), (Q K^T) V (64 x 64 + 64 x 16) in float32 (20 KiB).
    assert linear_pallas.shared_memory_bytes(forward, 128, 16, 64, jnp.float32) == (64 + 40) * KiB
    assert linear_pallas.shared_memory_bytes(forward, 128, 16, 64, jnp.bfloat16) == (32 + 40) * KiB


def test_widths_and_chunks_over_the_h100s_shared_memory_are_refused():
    assert linear_pallas.SHARED_MEMORY_PER_BLOCK == 227 * KiB
    reason = linear_pallas.unsupported("gpu", 128, 128, 128, jnp.float32)
    assert reason == ("chunk 128 at feature width 128 and value width 128 (float32) needs about 256 KiB of shared "
                      "memory in the forward kernel, over the H100's 227 KiB per block: take a smaller "
                      "attention.chunk_size")
    # Width 128, chunk 64: dk/dv's V R^T and K R, 64 x 128 + 128 x 128 float32 operands each: 192 KiB.
    assert linear_pallas.shared_memory_bytes(linear_pallas.KEY, 128, 128, 64, jnp.float32) == 192 * KiB
    assert linear_pallas.unsupported("gpu", 128, 128, 64, jnp.float32) is None
    assert linear_pallas.unsupported("gpu", 64, 64, 128, jnp.float32) is None
    with pytest.raises(ValueError, match="'pallas' cannot run here: chunk 128 at feature width 128 .* over the H100"):
        kernel_sums._by_kernels("pallas", "gpu", 128, 128, 128, jnp.float32)
    assert not kernel_sums._by_kernels("auto", "gpu", 128, 128, 128, jnp.float32)


def test_the_gpus_automatic_chunk_fits_every_width():
    """chunk_size 0 picks attention/ops/chunking.py's GPU chunk: the kernels must take it at every width, or `auto`
    would leave them for XLA exactly where a caller did not choose the chunk."""
    chunk = chunking.chunk_size_for("gpu", 4096)
    for feature_dim in linear_pallas.WIDTHS:
        for value_dim in linear_pallas.WIDTHS:
            assert linear_pallas.unsupported("gpu", feature_dim, value_dim, chunk, jnp.float32) is None


def test_warps_by_the_registers_the_blocks_need():
    """dk/dv at width 64, chunk 64 holds 11 blocks of 64 x 64: 45,056 float32 elements, 352 a thread at 128
    threads (over 255: 8 warps); at width 32 and chunk 32, 11 x 1,024 = 88 a thread (4 warps); width 16 and
    chunk 64, 3 x 4,096 + 7 x 1,024 + 256 = 19,712, 154 a thread (4 warps)."""
    key = linear_pallas.KEY
    assert linear_pallas.registers_per_thread(key, 64, 64, 64, 4) == 352
    assert linear_pallas.registers_per_thread(key, 64, 64, 64, 8) == 176
    assert linear_pallas.num_warps(key, 64, 64, 64) == 8
    assert linear_pallas.num_warps(key, 32, 32, 32) == 4
    assert linear_pallas.registers_per_thread(key, 16, 16, 64, 4) == 154
    assert linear_pallas.num_warps(key, 16, 16, 64) == 4


def test_auto_takes_the_kernels_where_they_compile_and_pallas_is_refused_where_they_cannot():
    def by_kernels(*arguments):
        return kernel_sums._by_kernels(*arguments, jnp.float32)

    assert by_kernels("auto", "gpu", 64, 64, 64) and by_kernels("pallas", "gpu", 16, 128, 32)
    assert not by_kernels("auto", "gpu", 6, 64, 64) and not by_kernels("auto", "cpu", 64, 64, 64)
    assert not by_kernels("xla", "gpu", 64, 64, 64) and not by_kernels("autodiff", "gpu", 64, 64, 64)
    assert by_kernels("pallas", "cpu", 6, 4, 5)  # interpret mode
    with pytest.raises(ValueError, match="implementation='pallas' cannot run here: chunk 5 is not one of 16"):
        by_kernels("pallas", "gpu", 64, 64, 5)


def test_import_attention_without_pallas_triton_and_pallas_is_refused_in_one_line():
    """A jax without jax.experimental.pallas.triton (deprecated since jax 0.11): `import attention` works,
    `auto` takes XLA, `pallas` is refused on any platform, interpret mode included."""
    script = """if True:
        import sys
        sys.modules["jax.experimental.pallas.triton"] = None  # its import now raises ImportError
        import jax.numpy as jnp
        import attention
        from attention.ops import kernel_sums
        assert not kernel_sums._by_kernels("auto", "gpu", 64, 64, 64, jnp.float32)
        try:
            kernel_sums._by_kernels("pallas", "cpu", 64, 64, 64, jnp.float32)
        except ValueError as error:
            print(error)
    """
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("attention.kernelized_implementation='pallas' cannot run here: this jax has no "
                                    "Pallas Triton backend (jax.experimental.pallas.triton: ")
    assert len(result.stdout.splitlines()) == 1




# Every width (feature and value alike, and two unlike) and chunk that the kernels take and the budget rule accepts.
ACCEPTED = [(m, dv, chunk) for m, dv in [*((w, w) for w in linear_pallas.WIDTHS), (16, 128), (128, 16)]
            for chunk in linear_pallas.WIDTHS if linear_pallas.unsupported("gpu", m, dv, chunk, jnp.float32) is None]


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="compiles the kernels for a GPU: make test-accelerator")
@pytest.mark.parametrize("stabilised", [False, True])
@pytest.mark.parametrize("feature_dim, value_dim, chunk", ACCEPTED)
def test_compiled_kernels_equal_the_xla_path(feature_dim, value_dim, chunk, stabilised):
    """Outputs and the gradients of phi(q), phi(k), v and a per-query eps, in float32 at the highest matmul
    precision (tests/conftest.py), over two chunks and a padded third of 2 x 3 heads, a key stabiliser growing
    inside and across chunks or none. The tolerance allows float32 sums in another order (Triton's dots
    against XLA's); a wrong formula, block or index is off by far more."""
    batch, length, heads = 2, 2 * chunk + 5, 3
    rng = np.random.default_rng(feature_dim * chunk + value_dim)

    def array(low, high, width):
        return jnp.asarray(rng.uniform(low, high, (batch, length, heads, width)), jnp.float32)

    phi_q, phi_k = array(0.1, 1.0, feature_dim) / feature_dim**0.5, array(0.1, 1.0, feature_dim) / feature_dim**0.5
    v, eps, cotangent = array(-1.0, 1.0, value_dim), array(1e-3, 1e-2, 1), array(-1.0, 1.0, value_dim)
    stabiliser = jnp.asarray(np.maximum.accumulate(array(0.0, 3.0, 1), axis=1)) if stabilised else None

    def results(sums):
        def loss(*arguments):
            out = sums(*arguments, stabiliser, chunk)
            return (out * cotangent).sum(), out

        return jax.jit(jax.grad(loss, (0, 1, 2, 3), has_aux=True))(phi_q, phi_k, v, eps)

    kernels = results(lambda *arguments: linear_pallas.causal_sums(*arguments, False))
    xla = results(lambda *arguments: chunked_sums.causal_sums(*arguments, "parallel"))
    for got, want in zip(jax.tree.leaves(kernels), jax.tree.leaves(xla), strict=True):
        scale = float(np.abs(np.asarray(want)).max())
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(scale, 1.0))
