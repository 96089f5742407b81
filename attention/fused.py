"""Which implementation computes softmax attention in one call: XLA's, or cuDNN's fused flash kernel.

`jax.nn.dot_product_attention` without `implementation` runs XLA's unfused softmax on every platform.
cuDNN's flash attention is far faster on an NVIDIA GPU, but only in 16-bit floats, at head widths up
to 128 (256 on Hopper) that are multiples of 8, and with masks it can express: causal (`is_causal`) and
key padding (`key_value_seq_lengths`). `select` picks it where `auto` allows and, on an NVIDIA GPU, says
once why not.
"""
import jax
import jax.numpy as jnp

IMPLEMENTATIONS = ("auto", "xla", "cudnn")
CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)
_said = set()  # the fallback reasons already printed: one line per reason and process


def key_lengths(mask, batch: int):
    """The number of allowed keys [B] (int32) of a key-padding mask [B or 1, 1, 1, Lk], or None when the
    mask is None or varies over heads or queries (no lengths can express it).

    Lengths describe padding at the end: the tasks pad their sequences on the right, so the allowed keys
    of a row are a prefix and their count is where its padding starts."""
    if mask is None or mask.ndim != 4 or mask.shape[1] != 1 or mask.shape[2] != 1:
        return None
    return jnp.broadcast_to(mask[:, 0, 0, :].sum(-1, dtype=jnp.int32), (batch,))


def _on_nvidia_gpu() -> bool:
    device = jax.devices()[0]
    return device.platform == "gpu" and "nvidia" in device.device_kind.lower()


def _max_cudnn_head_dim() -> int:
    capability = getattr(jax.devices()[0], "compute_capability", "0")
    return 256 if float(capability) >= 9.0 else 128


def platform_unsupported() -> str | None:
    """Why cuDNN's flash attention cannot run on this process's devices whatever the inputs, or None."""
    if not _on_nvidia_gpu():
        return f"it needs an NVIDIA GPU; this process runs on {jax.devices()[0].platform}"
    return None


def cudnn_unsupported(q, v, mask, causal_narrowed: bool) -> str | None:
    """Why cuDNN's flash attention cannot run q [B, Lq, H, D] over v with `mask`, or None if it can.

    `causal_narrowed`: the kind allows fewer keys than the mask and the causal flag say (a window)."""
    if reason := platform_unsupported():
        return reason
    if q.dtype not in CUDNN_DTYPES:
        return f"it needs bfloat16 or float16 inputs, got {q.dtype} (config.compute_dtype)"
    if q.shape[-1] != v.shape[-1]:
        return f"query/key width {q.shape[-1]} differs from the value width {v.shape[-1]}"
    head_limit = _max_cudnn_head_dim()
    if q.shape[-1] > head_limit or q.shape[-1] % 8:
        return f"head width {q.shape[-1]} is not a multiple of 8 up to {head_limit}"
    if causal_narrowed:
        return "the kind narrows the keys beyond the mask (a window)"
    if mask is not None and key_lengths(mask, q.shape[0]) is None:
        return f"a mask of shape {mask.shape} varies over heads or queries (cuDNN takes key lengths only)"
    return None


def select(implementation: str, q, v, mask, causal_narrowed: bool) -> str:
    """"xla" or "cudnn" for `implementation` and these inputs (at trace time). `auto` falls back to XLA,
    on an NVIDIA GPU with one printed line per reason; an explicit "cudnn" that cannot run raises instead."""
    if implementation == "xla":
        return "xla"
    reason = cudnn_unsupported(q, v, mask, causal_narrowed)
    if reason is None:
        return "cudnn"
    if implementation == "cudnn":
        raise ValueError(f"attention.softmax_implementation='cudnn' cannot run here: {reason}")
    if reason not in _said and _on_nvidia_gpu():  # elsewhere XLA is the only choice: nothing to say
        _said.add(reason)
        print(f"attention.softmax_implementation=auto: XLA's softmax, not cuDNN flash attention: {reason}",
              flush=True)
    return "xla"


def attention_over_lengths(q, k, v, lengths, *, scale: float, causal: bool, implementation: str):
    """Softmax attention over the first lengths[b] keys of each row b (all keys when lengths is None),
    causal or not. A row without keys (length 0, a padding row of the batch) gives zeros, as
    `ScoreAttention` does: kernels disagree on what such a row should hold."""
    out = jax.nn.dot_product_attention(q, k, v, scale=scale, is_causal=causal, key_value_seq_lengths=lengths,
                                       implementation=implementation)
    if lengths is None:
        return out
    return jnp.where((lengths > 0)[:, None, None, None], out, jnp.zeros((), out.dtype))
