"""Causal linear attention as Pallas kernels (jax.experimental.pallas, lowered through Triton on a GPU), forward
and backward: the path `implementation="pallas"` of the kernelised kinds (attention/kernel_sums.py).

One program per (batch, head) walks the chunks of C positions, reading them from q, k, v [B, L, H, *] in place
(no transposed copy) and keeping the state of the chunks before (P [m, Dv], z [m]) in its registers. The
forward kernel writes the output and the denominator D; the backward is two kernels, as the sequential
strategy of attention/chunked_sums.py is two passes: in order, the states rebuilt, dq and D's cotangent; in
reverse, the states' cotangent carried, dk and dv. A chunk's arithmetic is chunked_sums' (`forward_step`,
`query_step`, `key_step`), so the kernels and the XLA path compute one formula.

Where it runs: on a GPU, for feature and value widths and chunks that are powers of two from 16 to 128
(`unsupported` says why not otherwise; `auto` then takes the XLA path, an explicit `pallas` is refused).
Elsewhere `pallas` runs the kernels in interpret mode (pallas_call(..., interpret=True), the kernels' bodies
executed as XLA operations): that is how the tests hold them to the XLA path on the CPU. Their speed on a GPU
is not measured: no GPU was lent to the sessions that wrote them.
"""
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pallas_triton

from attention import chunked_sums

WIDTHS = (16, 32, 64, 128)  # feature, value and chunk sizes the Triton kernels take


def unsupported(platform: str, feature_dim: int, value_dim: int, chunk: int) -> str | None:
    """Why the kernels cannot run as compiled kernels here, or None if they can."""
    if platform != "gpu":
        return f"they are compiled for a GPU (Triton); this process runs on {platform}"
    for name, size in (("feature width", feature_dim), ("value width", value_dim), ("chunk", chunk)):
        if size not in WIDTHS:
            return f"{name} {size} is not one of {', '.join(map(str, WIDTHS))}"
    return None


# --- the kernels: one program per (batch, head) ---------------------------------------------------------------


def _stabiliser(stabiliser_refs, index, rows):
    """(c [C], r) of chunk `index` from the refs of the running max c [L] and the received units r [n]."""
    if not stabiliser_refs:
        return None
    c_ref, received_ref = stabiliser_refs
    return c_ref[rows], received_ref[index]


def _zero_state(q_ref, v_ref):
    width = q_ref.shape[-1]
    return jnp.zeros((width, v_ref.shape[-1]), jnp.float32), jnp.zeros((width,), jnp.float32)


def _forward_kernel(q_ref, k_ref, v_ref, eps_ref, *refs, chunk: int, num_chunks: int):
    *stabiliser_refs, out_ref, denominator_ref = refs

    def body(index, state):
        rows = pl.ds(index * chunk, chunk)
        state, out, denominator = chunked_sums.forward_step(
            state, q_ref[rows, :], k_ref[rows, :], v_ref[rows, :], eps_ref[rows][:, None],
            _stabiliser(stabiliser_refs, index, rows))
        out_ref[rows, :] = out.astype(out_ref.dtype)
        denominator_ref[rows] = denominator[:, 0]
        return state

    jax.lax.fori_loop(0, num_chunks, body, _zero_state(q_ref, v_ref))


def _query_kernel(q_ref, k_ref, v_ref, out_cotangent_ref, denominator_ref, *refs, chunk: int, num_chunks: int):
    *stabiliser_refs, dq_ref, normaliser_ref = refs

    def body(index, state):
        rows = pl.ds(index * chunk, chunk)
        state, dq, normaliser = chunked_sums.query_step(
            state, q_ref[rows, :], k_ref[rows, :], v_ref[rows, :], out_cotangent_ref[rows, :],
            denominator_ref[rows][:, None], _stabiliser(stabiliser_refs, index, rows))
        dq_ref[rows, :] = dq.astype(dq_ref.dtype)
        normaliser_ref[rows] = normaliser[:, 0]
        return state

    jax.lax.fori_loop(0, num_chunks, body, _zero_state(q_ref, v_ref))


def _key_kernel(q_ref, k_ref, v_ref, out_cotangent_ref, denominator_ref, normaliser_ref, *refs, chunk: int,
                num_chunks: int):
    *stabiliser_refs, dk_ref, dv_ref = refs

    def body(step, cotangent):
        index = num_chunks - 1 - step  # in reverse
        rows = pl.ds(index * chunk, chunk)
        cotangent, dk, dv = chunked_sums.key_step(
            cotangent, q_ref[rows, :], k_ref[rows, :], v_ref[rows, :], out_cotangent_ref[rows, :],
            denominator_ref[rows][:, None], normaliser_ref[rows][:, None], _stabiliser(stabiliser_refs, index, rows))
        dk_ref[rows, :] = dk.astype(dk_ref.dtype)
        dv_ref[rows, :] = dv.astype(dv_ref.dtype)
        return cotangent

    jax.lax.fori_loop(0, num_chunks, body, _zero_state(q_ref, v_ref))


# --- the calls ------------------------------------------------------------------------------------------------


def _spec(array):
    """One (batch, head)'s block: [L, d] of an array [B, L, H, d], [L] of a per-position array [B, H, L]."""
    if array.ndim == 4:
        return pl.BlockSpec((None, array.shape[1], None, array.shape[3]), lambda b, h: (b, 0, h, 0))
    return pl.BlockSpec((None, None, array.shape[2]), lambda b, h: (b, h, 0))


def _call(kernel, inputs, outputs, chunk: int, interpret: bool):
    """pallas_call of `kernel` over the grid (B, H), its inputs and outputs (ShapeDtypeStructs) in blocks."""
    batch, length, heads, _ = inputs[0].shape
    return pl.pallas_call(
        functools.partial(kernel, chunk=chunk, num_chunks=length // chunk), out_shape=outputs,
        grid=(batch, heads), in_specs=[_spec(x) for x in inputs], out_specs=[_spec(x) for x in outputs],
        # Triton's compiler parameters select the Triton lowering (jax's default on NVIDIA GPUs is Mosaic GPU,
        # which would copy each program's whole-sequence blocks into shared memory).
        compiler_params=pallas_triton.CompilerParams(num_warps=4, num_stages=1), interpret=interpret)(*inputs)


def _per_position(x, batch: int, length: int, heads: int):
    """A scalar or [B, L, H, 1] array -> float32 [B, H, L]."""
    return jnp.broadcast_to(jnp.asarray(x, jnp.float32), (batch, length, heads, 1))[..., 0].transpose(0, 2, 1)


def _rows(phi_q, eps, key_stabiliser, chunk: int):
    """eps [B, H, L'] and, under a stabiliser, its running max [B, H, L'] and the units each chunk receives
    [B, H, n] (the last of the chunk before; chunk 0's first), L' the length padded to whole chunks."""
    batch, length, heads, _ = phi_q.shape
    padding = ((0, 0), (0, 0), (0, -length % chunk))
    eps = jnp.pad(_per_position(eps, batch, length, heads), padding, "edge")
    if key_stabiliser is None:
        return (eps,)
    c = jnp.pad(_per_position(key_stabiliser, batch, length, heads), padding, "edge")
    last = c[..., chunk - 1::chunk]
    return eps, c, jnp.concatenate([c[..., :1], last[..., :-1]], axis=-1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def causal_sums(phi_q, phi_k, v, eps, key_stabiliser, chunk: int, interpret: bool):
    """chunked_sums.causal_sums computed by the kernels (`interpret`: in interpret mode)."""
    return _forward(phi_q, phi_k, v, eps, key_stabiliser, chunk, interpret)[0]


def _like(x, dtype=None):
    return jax.ShapeDtypeStruct(x.shape, dtype or x.dtype)


def _forward(phi_q, phi_k, v, eps, key_stabiliser, chunk, interpret):
    length = phi_q.shape[1]
    q, k, values = (chunked_sums.padded_rows(x, chunk) for x in (phi_q, phi_k, v))
    eps_rows, *stabiliser = _rows(phi_q, eps, key_stabiliser, chunk)
    out, denominators = _call(_forward_kernel, [q, k, values, eps_rows, *stabiliser],
                              [_like(values), _like(eps_rows)], chunk, interpret)
    return out[:, :length], (q, k, values, eps, key_stabiliser, stabiliser, denominators)


def _backward(chunk, interpret, residuals, out_cotangent):
    q, k, values, eps, key_stabiliser, stabiliser, denominators = residuals
    length = out_cotangent.shape[1]
    out_cotangent = chunked_sums.padded_rows(out_cotangent, chunk).astype(values.dtype)
    inputs = [q, k, values, out_cotangent, denominators]
    dq, normalisers = _call(_query_kernel, [*inputs, *stabiliser], [_like(q), _like(denominators)], chunk,
                            interpret)
    dk, dv = _call(_key_kernel, [*inputs, normalisers, *stabiliser], [_like(k), _like(values)], chunk, interpret)
    # D's cotangent [B, H, L'] as eps's.
    normalisers = normalisers[..., :length].transpose(0, 2, 1)[..., None]
    eps_cotangent = normalisers if jnp.ndim(eps) else normalisers.sum()
    stabiliser_cotangent = None if key_stabiliser is None else jnp.zeros_like(key_stabiliser)
    return dq[:, :length], dk[:, :length], dv[:, :length], eps_cotangent, stabiliser_cotangent


causal_sums.defvjp(_forward, _backward)
