"""attention.softmax_implementation: which implementation `auto` picks and why, the mask given to cuDNN as key
lengths, and (on an NVIDIA GPU, make test-accelerator) cuDNN's outputs and gradients against XLA's."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention
from attention import fused

pytestmark = pytest.mark.accelerator

B, L, H, D = 3, 16, 2, 8
LENGTHS = np.array([16, 5, 0], np.int32)  # full, padded, and a padding row of the batch (no key at all)


def _inputs(dtype=jnp.float32, key_length=L):
    q, k, v = (jax.random.normal(key, (B, length, H, D), dtype)
               for key, length in zip(jax.random.split(jax.random.key(0), 3), (L, key_length, key_length)))
    return q, k, v


def _right_padding_mask(lengths, key_length=L):
    return jnp.asarray(np.arange(key_length)[None, :] < lengths[:, None])[:, None, None, :]


def _dense_reference(q, k, v, lengths, causal):
    """numpy softmax(q.k / sqrt(D)) v over the first lengths[b] keys (and, causal, the earlier ones);
    a row with no key is zero."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(D)
    allowed = np.arange(k.shape[1])[None, None, None, :] < lengths[:, None, None, None]
    if causal:
        allowed = allowed & np.tril(np.ones((q.shape[1], k.shape[1]), bool))
    weights = np.exp(np.where(allowed, scores - scores.max(-1, keepdims=True), -np.inf))
    weights = np.divide(weights, weights.sum(-1, keepdims=True), out=np.zeros_like(weights),
                        where=allowed.any(-1, keepdims=True))
    return np.einsum("bhqk,bkhd->bqhd", weights, v)


@pytest.fixture
def nvidia_gpu(monkeypatch):
    """Makes `fused` believe it runs on an NVIDIA Hopper GPU (the checks after the platform's)."""
    monkeypatch.setattr(fused, "_on_nvidia_gpu", lambda: True)
    monkeypatch.setattr(fused, "_max_cudnn_head_dim", lambda: 256)


def test_key_lengths_of_a_right_padding_mask():
    mask = _right_padding_mask(LENGTHS)
    np.testing.assert_array_equal(fused.key_lengths(mask, B), LENGTHS)
    shared = _right_padding_mask(np.array([7]))  # [1, 1, 1, L]: one mask for the whole batch
    np.testing.assert_array_equal(fused.key_lengths(shared, B), [7, 7, 7])
    assert fused.key_lengths(None, B) is None
    assert fused.key_lengths(jnp.ones((B, 1, L, L), bool), B) is None  # varies over queries


@pytest.mark.parametrize("causal", [False, True])
def test_attention_over_lengths_matches_dense_reference(causal):
    q, k, v = _inputs()
    out = fused.attention_over_lengths(q, k, v, jnp.asarray(LENGTHS), scale=D**-0.5, causal=causal,
                                       implementation="xla")
    np.testing.assert_allclose(out, _dense_reference(q, k, v, LENGTHS, causal), atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_lengths_give_the_mask_paths_outputs_and_gradients(causal):
    """What cuDNN receives (lengths, is_causal) computes, through XLA, what the mask path computes."""
    module = attention.create("softmax", num_heads=H, head_dim=D, rngs=nnx.Rngs(0), softmax_implementation="xla")
    mask = _right_padding_mask(LENGTHS)

    def loss(via_lengths, q, k, v):
        if via_lengths:
            out = fused.attention_over_lengths(q, k, v, fused.key_lengths(mask, B), scale=D**-0.5,
                                               causal=causal, implementation="xla")
        else:
            out = module(q, k, v, mask, causal=causal)
        return jnp.sum(out * jnp.cos(out)), out

    inputs = _inputs()
    (_, out_lengths), grads_lengths = jax.value_and_grad(loss, argnums=(1, 2, 3), has_aux=True)(True, *inputs)
    (_, out_mask), grads_mask = jax.value_and_grad(loss, argnums=(1, 2, 3), has_aux=True)(False, *inputs)
    np.testing.assert_allclose(out_lengths, out_mask, atol=1e-6)
    for lengths_grad, mask_grad in zip(grads_lengths, grads_mask):
        np.testing.assert_allclose(lengths_grad, mask_grad, atol=1e-6)


def test_auto_picks_xla_where_cudnn_cannot_run_and_says_why_once_on_a_gpu(capsys, monkeypatch):
    """Off an NVIDIA GPU for the platform, silently: XLA is the only choice there; on one (make
    test-accelerator), where bfloat16 would take cuDNN, for float32 inputs, in one line."""
    monkeypatch.setattr(fused, "_said", set())
    if on_gpu := fused._on_nvidia_gpu():
        dtype, reason = jnp.float32, "it needs bfloat16 or float16 inputs, got float32"
    else:
        dtype, reason = jnp.bfloat16, f"it needs an NVIDIA GPU; this process runs on {jax.devices()[0].platform}"
    q, _, v = _inputs(dtype)
    assert fused.select("auto", q, v, None, False) == "xla"
    assert fused.select("auto", q, v, None, False) == "xla"
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == on_gpu and all(reason in line for line in printed)
    assert fused.select("xla", q, v, None, False) == "xla"
    with pytest.raises(ValueError, match=f"attention.softmax_implementation='cudnn' cannot run here: {reason}"):
        fused.select("cudnn", q, v, None, False)


@pytest.mark.parametrize("change, reason", [
    ({"dtype": jnp.float32}, "needs bfloat16 or float16 inputs, got float32"),
    ({"head_dim": 12}, "head width 12 is not a multiple of 8"),
    ({"head_dim": 512}, "head width 512 is not a multiple of 8 up to 256"),
    ({"value_dim": 16}, "query/key width 8 differs from the value width 16"),
    ({"narrowed": True}, "narrows the keys beyond the mask"),
    ({"mask": jnp.ones((B, 1, L, L), bool)}, "varies over heads or queries"),
])
def test_auto_falls_back_for_what_cudnn_cannot_do(nvidia_gpu, change, reason):
    setting = {"dtype": jnp.bfloat16, "head_dim": D, "value_dim": None, "narrowed": False,
               "mask": _right_padding_mask(LENGTHS)} | change
    q = jnp.zeros((B, L, H, setting["head_dim"]), setting["dtype"])
    v = jnp.zeros((B, L, H, setting["value_dim"] or setting["head_dim"]), setting["dtype"])
    assert reason in fused.cudnn_unsupported(q, v, setting["mask"], setting["narrowed"])
    assert fused.select("auto", q, v, setting["mask"], setting["narrowed"]) == "xla"


def test_auto_takes_cudnn_on_a_gpu_in_bfloat16(nvidia_gpu):
    q, _, v = _inputs(jnp.bfloat16)
    for mask in (None, _right_padding_mask(LENGTHS)):
        assert fused.cudnn_unsupported(q, v, mask, False) is None
        assert fused.select("auto", q, v, mask, False) == "cudnn"


@pytest.mark.parametrize("causal", [False, True])
def test_softmax_module_routes_the_cudnn_choice_through_lengths(nvidia_gpu, monkeypatch, causal):
    """Where cuDNN is chosen, the module calls dot_product_attention with key lengths and is_causal (run
    here through XLA) and gives the mask path's outputs; local attention keeps its window."""
    calls = []
    dot_product_attention = jax.nn.dot_product_attention

    def xla_in_place_of_cudnn(*args, implementation=None, **kwargs):
        calls.append((implementation, kwargs.get("key_value_seq_lengths") is not None, kwargs.get("is_causal", False)))
        return dot_product_attention(*args, **kwargs, implementation="xla" if implementation == "cudnn" else None)

    monkeypatch.setattr(jax.nn, "dot_product_attention", xla_in_place_of_cudnn)
    q, k, v = _inputs(jnp.bfloat16)
    mask = _right_padding_mask(LENGTHS)
    fused_out = attention.create("softmax", num_heads=H, head_dim=D, rngs=nnx.Rngs(0))(q, k, v, mask, causal=causal)
    assert calls == [("cudnn", True, causal)]
    xla = attention.create("softmax", num_heads=H, head_dim=D, rngs=nnx.Rngs(0), softmax_implementation="xla")
    np.testing.assert_allclose(np.asarray(fused_out, np.float32), np.asarray(xla(q, k, v, mask, causal=causal),
                                                                             np.float32), atol=1e-2)
    calls.clear()
    attention.create("local", num_heads=H, head_dim=D, rngs=nnx.Rngs(0), window=2)(q, k, v, mask, causal=causal)
    assert calls == [(None, False, False)]


def test_an_unknown_implementation_is_refused():
    with pytest.raises(ValueError, match="^softmax_implementation='flash' must be one of 'auto', 'xla', 'cudnn'$"):
        attention.create("softmax", num_heads=H, head_dim=D, rngs=nnx.Rngs(0), softmax_implementation="flash")


@pytest.mark.skipif(not any(d.platform == "gpu" and "nvidia" in d.device_kind.lower() for d in jax.devices()),
                    reason="cuDNN flash attention needs an NVIDIA GPU (make test-accelerator on one)")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("cross", [False, True])
def test_cudnn_matches_xla_in_bfloat16(causal, cross):
    """Both implementations on the same bf16 inputs: outputs and gradients within bf16 rounding."""
    if causal and cross:
        pytest.skip("causal attention is self-attention")
    q, k, v = _inputs(jnp.bfloat16, key_length=24 if cross else L)
    mask = _right_padding_mask(np.array([24, 5, 0]) if cross else LENGTHS, k.shape[1])

    def run(implementation):
        module = attention.create("softmax", num_heads=H, head_dim=D, rngs=nnx.Rngs(0),
                                  softmax_implementation=implementation)
        loss = lambda q, k, v: jnp.sum(module(q, k, v, mask, causal=causal).astype(jnp.float32) ** 2)
        return module(q, k, v, mask, causal=causal), jax.grad(loss, argnums=(0, 1, 2))(q, k, v)

    (cudnn_out, cudnn_grads), (xla_out, xla_grads) = run("cudnn"), run("xla")
    for ours, theirs in zip((cudnn_out, *cudnn_grads), (xla_out, *xla_grads)):
        np.testing.assert_allclose(np.asarray(ours, np.float32), np.asarray(theirs, np.float32), atol=3e-2, rtol=3e-2)
