"""Linear attention's O(L) sums with a hand-written backward (jax.custom_vjp), in plain JAX: the path
`implementation="xla"` of the kernelised kinds (attention/ops/kernel_sums.py dispatches here).

Per head, with phi(q) rows Q, phi(k) rows K and values V, the output of query i is
N_i / D_i with N_i = sum_{j allowed} (Q_i . K_j) V_j and D_i = max(sum_{j allowed} Q_i . K_j + eps, tiny).
The normaliser is a sum of its own, Q . (sum of K), not a column of ones appended to V.

Causal, in chunks of C positions: inside a chunk the C x C scores (Q K^T) * F, F the causal factors;
across chunks the state P = sum phi(k) v^T [m, Dv] and z = sum phi(k) [m] of the chunks before. Under a key
stabiliser c (a running max per position, attention/kernelized_base.py), phi(k_j) is scaled down by
exp(c_j): F_ij = exp(c_j - c_i) brings key j to query i's units, a chunk's own state is summed in the units
of its last position b, and the state it received, in the units r of the previous chunk's last position, is
brought to its queries by exp(r - c_i) and to the next chunk by exp(r - b) <= 1: a carry
P <- exp(r - b) P + S, as a decoding step rescales its state. Without a stabiliser every factor is 1.

Residuals for the backward: phi(q), phi(k), v (in the chunk layout below) and the denominator D, nothing
per chunk. The backward rebuilds the chunk states: a pass in order gives dq and the normaliser's cotangent
(which needs the states each chunk received), a pass in reverse carries the states' cotangent (the reverse
exclusive prefix of Q^T dO / D) for dk and dv. With dN = dO / D, the output's part of D's cotangent is
-sum(dN * N) / D, and sum(dN * N) = rowsum(A * dN V^T) + rowsum(Q * dN P^T) comes from products the
gradients need anyway, so N is neither stored nor recomputed.

Layout: [B, L, H, *] inputs are padded to n chunks and transposed once into [n, B*H, C, *], chunk-major so
that a pass over chunks reads contiguous slabs. Two strategies (attention/ops/chunking.py picks one per platform
and length, from measurements): "sequential", one lax.scan over chunks carrying the state, which writes
outputs and gradients back to [B, L, H, *] chunk by chunk (no transposed copy of them, nor of dO); and
"parallel", every chunk at once in batched matmuls with the prefix over chunk states between them (a
cumsum; under a stabiliser, a scan carry over the states only).

Mixed precision: products of bfloat16 (or float16) operands accumulate in float32, states, normaliser and
division stay in float32, and only outputs and gradients return to the inputs' dtypes.
"""
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from attention import masks

STRATEGIES = ("sequential", "parallel")
# lax.scan's unroll of the loops over chunks. XLA's cost analysis counts a loop's body once, whatever its trip
# count: benchmarks/roofline.py (loop_aware_cost) compiles a program a second time with 2 to count one trip of
# each loop.
UNROLL = 1
_TINY = float(jnp.finfo(jnp.float32).tiny)


def _sums(subscripts, *operands):
    """jnp.einsum accumulated and returned in float32 (at least), whatever the operands' dtype. Operands of two
    dtypes meet in the wider one, explicitly: Triton's dot (linear_pallas.py) takes one element type."""
    dtype = jnp.result_type(*operands)
    operands = [x.astype(dtype) for x in operands]
    return jnp.einsum(subscripts, *operands, preferred_element_type=jnp.float32)


def _times(x, factor):
    """x * factor, or x itself where there is no stabiliser (every factor is 1)."""
    return x if factor is None else x * factor


def _row_sums(x, vector):
    """x [..., C, m] . vector [..., m] -> [..., C, 1] in float32."""
    return (x * vector[..., None, :]).sum(-1, keepdims=True, dtype=jnp.float32)


class Units(NamedTuple):
    """A chunk's stabiliser factors, None without a stabiliser."""
    factors: jax.Array | None  # [..., C, C]: exp(c_j - c_i) for key j <= query i, else 0
    to_query: jax.Array | None  # [..., C, 1]: exp(r - c_i), the received state to query i's units
    to_end: jax.Array | None  # [..., C, 1]: exp(c_j - b), key j to the chunk's last position's units
    decay: jax.Array | None  # [...]: exp(r - b), the received state to the next chunk's units


def units(stabiliser) -> Units:
    """The Units of chunks with `stabiliser` (c [..., C], r [...]), or None: no stabiliser."""
    if stabiliser is None:
        return Units(None, None, None, None)
    c, received = stabiliser
    last = c.max(-1)  # the chunk's last: c is a running max
    factors = jnp.exp(jnp.where(masks.causal_mask(c.shape[-1]), c[..., None, :] - c[..., :, None], -jnp.inf))
    return Units(factors, jnp.exp(received[..., None] - c)[..., None], jnp.exp(c - last[..., None])[..., None],
                 jnp.exp(received - last))


def carried(state, added, decay):
    """(P, z) after a chunk: the received state in the next chunk's units plus the chunk's own. The same
    step, run in reverse over chunks, carries the states' cotangent."""
    (matrix, vector), (matrix_added, vector_added) = state, added
    if decay is not None:
        matrix, vector = matrix * decay[..., None, None], vector * decay[..., None]
    return matrix + matrix_added, vector + vector_added


# --- one chunk (any leading axes: [G] in a pass over chunks, [n, G] for all at once) --------------------------


def _causally(x, factors):
    """x [..., C, C] times the causal factors F, or causally masked where there is no stabiliser."""
    return jnp.where(masks.causal_mask(x.shape[-1]), x, 0.0) if factors is None else x * factors


def scores(q, k, factors):
    """(Q K^T) * F [..., C, C] in float32."""
    return _causally(_sums("...qm,...km->...qk", q, k), factors)


def chunk_state(k, v, unit: Units):
    """(sum of phi(k) v^T [..., m, Dv], sum of phi(k) [..., m]) over the chunk, in its last position's units."""
    k = _times(k, unit.to_end)
    return _sums("...km,...kd->...md", k, v), k.sum(-2, dtype=jnp.float32)


def chunk_forward(q, k, v, state, eps, unit: Units):
    """(output N / D [..., C, Dv], denominator D [..., C, 1]) in float32 of a chunk that received `state`;
    `eps` is a scalar or per query [..., C, 1]."""
    matrix, vector = state
    weights = scores(q, k, unit.factors)
    numerator = _times(_sums("...qm,...md->...qd", q, matrix), unit.to_query) + _sums("...qk,...kd->...qd",
                                                                                       weights, v)
    # Products with the vector z as a multiply and a sum: a Triton kernel (linear_pallas.py) has no matvec.
    normaliser = _times(_row_sums(q, vector), unit.to_query) + weights.sum(-1, keepdims=True)
    denominator = jnp.maximum(normaliser + eps, _TINY)
    return numerator / denominator, denominator


class Cotangents(NamedTuple):
    """What both backward passes need of a chunk: its scores, dN = dO / D and dN V^T."""
    scores: jax.Array
    numerator: jax.Array
    by_values: jax.Array


def cotangents(q, k, v, out_cotangent, denominator, unit: Units) -> Cotangents:
    numerator = out_cotangent / denominator
    return Cotangents(scores(q, k, unit.factors), numerator, _sums("...qd,...kd->...qk", numerator, v))


def normaliser_cotangent(q, parts: Cotangents, denominator, matrix, unit: Units):
    """(dN P^T [..., C, m], D's cotangent [..., C, 1]): -sum(dN * N) / D where the denominator is above its
    floor (at the floor it does not depend on the sums)."""
    by_state = _sums("...qd,...md->...qm", parts.numerator, matrix)
    products = ((parts.scores * parts.by_values).sum(-1, keepdims=True)
                + _times((q * by_state).sum(-1, keepdims=True), unit.to_query))
    return by_state, jnp.where(denominator > _TINY, -products / denominator, 0.0)


def score_cotangent(parts: Cotangents, normaliser, unit: Units):
    """The scores' cotangent: dN V^T plus D's cotangent (the normaliser sums each row), times F."""
    return _causally(parts.by_values + normaliser, unit.factors)


def query_gradient(k, vector, by_state, normaliser, score_grad, unit: Units):
    """dq [..., C, m] in float32: through the received state and through the chunk's scores."""
    through_state = _times(by_state + normaliser * vector[..., None, :], unit.to_query)
    return through_state + _sums("...qk,...km->...qm", score_grad, k)


def key_value_gradients(q, k, v, parts: Cotangents, score_grad, state_cotangent, unit: Units):
    """(dk [..., C, m], dv [..., C, Dv]) in float32, given the cotangent (R, r) of the chunk's own state."""
    matrix, vector = state_cotangent
    dk = _sums("...qk,...qm->...km", score_grad, q) + _times(
        _sums("...kd,...md->...km", v, matrix) + vector[..., None, :], unit.to_end)
    dv = _sums("...qk,...qd->...kd", parts.scores, parts.numerator) + _sums(
        "...km,...md->...kd", _times(k, unit.to_end), matrix)
    return dk, dv


def state_cotangent(q, parts: Cotangents, normaliser, unit: Units):
    """The cotangent of the state a chunk received, from its own queries: (Q^T dN, Q^T dD) in its units."""
    q = _times(q, unit.to_query)
    return _sums("...qm,...qd->...md", q, parts.numerator), (q * normaliser).sum(-2)


# --- layout ---------------------------------------------------------------------------------------------------


def to_chunks(x, chunk: int, mode="constant"):
    """[B, L, H, d] -> [n, B*H, C, d], padded at the end (zeros add nothing; `mode="edge"` for stabilisers)."""
    batch, length, heads, width = x.shape
    num_chunks = -(-length // chunk)
    x = jnp.pad(x, ((0, 0), (0, num_chunks * chunk - length), (0, 0), (0, 0)), mode)
    x = x.reshape(batch, num_chunks, chunk, heads, width).transpose(1, 0, 3, 2, 4)
    return x.reshape(num_chunks, batch * heads, chunk, width)


def from_chunks(x, batch: int, length: int):
    """[n, B*H, C, d] -> [B, L, H, d]."""
    num_chunks, groups, chunk, width = x.shape
    x = x.reshape(num_chunks, batch, groups // batch, chunk, width).transpose(1, 0, 3, 2, 4)
    return x.reshape(batch, num_chunks * chunk, groups // batch, width)[:, :length]


def _read(x, index, chunk: int):
    """Chunk `index` [B*H, C, d] of x [B, n C, H, d]."""
    batch, _, heads, width = x.shape
    rows = jax.lax.dynamic_slice_in_dim(x, index * chunk, chunk, 1)
    return rows.transpose(0, 2, 1, 3).reshape(batch * heads, chunk, width)


def _write(buffer, x, index):
    """buffer [B, n C, H, d] with chunk `index` set to x [B*H, C, d] (in the buffer's dtype)."""
    batch, _, heads, width = buffer.shape
    rows = x.reshape(batch, heads, x.shape[1], width).transpose(0, 2, 1, 3).astype(buffer.dtype)
    return jax.lax.dynamic_update_slice_in_dim(buffer, rows, index * x.shape[1], 1)


class Chunks(NamedTuple):
    """The inputs in the chunk layout [n, B*H, C, *]: the residuals of the backward, with D."""
    q: jax.Array
    k: jax.Array
    v: jax.Array
    eps: jax.Array  # [] or [n, B*H, C, 1]
    stabiliser: tuple | None  # (c [n, B*H, C], r [n, B*H]) or None

    @classmethod
    def of(cls, phi_q, phi_k, v, eps, key_stabiliser, chunk: int):
        if jnp.ndim(eps):
            eps = to_chunks(eps, chunk, "edge")
        stabiliser = None
        if key_stabiliser is not None:
            c = to_chunks(key_stabiliser, chunk, "edge")[..., 0]  # the padding's: the last position's
            # The units of the state a chunk receives: the previous chunk's last position's (chunk 0 receives
            # none; its first position's units keep exp(r - c) <= 1).
            stabiliser = (c, jnp.concatenate([c[:1, :, 0], c[:-1, :, -1]]))
        return cls(to_chunks(phi_q, chunk), to_chunks(phi_k, chunk), to_chunks(v, chunk), eps, stabiliser)

    def per_chunk(self):
        """The scan's xs: what each chunk reads (a scalar eps is closed over instead)."""
        return self.q, self.k, self.v, self.eps if jnp.ndim(self.eps) else None, self.stabiliser

    def eps_of(self, eps):
        return self.eps if eps is None else eps

    def zero_state(self):
        groups, width = self.q.shape[1], self.q.shape[-1]
        return (jnp.zeros((groups, width, self.v.shape[-1]), jnp.float32),
                jnp.zeros((groups, width), jnp.float32))


# --- one step of each pass over chunks (the sequential strategy's; the gradients also the Pallas kernels') ----


def forward_step(state, q, k, v, eps, stabiliser):
    """(the state after the chunk, its output N / D, its denominator D) in float32."""
    unit = units(stabiliser)
    out, denominator = chunk_forward(q, k, v, state, eps, unit)
    return carried(state, chunk_state(k, v, unit), unit.decay), out, denominator


def query_gradients(state, q, k, v, out_cotangent, denominator, unit: Units):
    """(dq, D's cotangent, the chunk's Cotangents) in float32 of a chunk that received `state`."""
    parts = cotangents(q, k, v, out_cotangent, denominator, unit)
    by_state, normaliser = normaliser_cotangent(q, parts, denominator, state[0], unit)
    dq = query_gradient(k, state[1], by_state, normaliser, score_cotangent(parts, normaliser, unit), unit)
    return dq, normaliser, parts


def key_gradients(cotangent, q, k, v, out_cotangent, denominator, normaliser, unit: Units):
    """(dk, dv, the chunk's Cotangents) in float32, given the cotangent of the state the chunk passes on."""
    parts = cotangents(q, k, v, out_cotangent, denominator, unit)
    dk, dv = key_value_gradients(q, k, v, parts, score_cotangent(parts, normaliser, unit), cotangent, unit)
    return dk, dv, parts


def query_step(state, q, k, v, out_cotangent, denominator, stabiliser):
    """(the state after the chunk, its dq, its D's cotangent) in float32, given the state it received."""
    unit = units(stabiliser)
    dq, normaliser, _ = query_gradients(state, q, k, v, out_cotangent, denominator, unit)
    return carried(state, chunk_state(k, v, unit), unit.decay), dq, normaliser


def key_step(cotangent, q, k, v, out_cotangent, denominator, normaliser, stabiliser):
    """(the cotangent of the state the chunk received, its dk, its dv) in float32, given the cotangent of the
    state it passes on (a pass in reverse)."""
    unit = units(stabiliser)
    dk, dv, parts = key_gradients(cotangent, q, k, v, out_cotangent, denominator, normaliser, unit)
    return carried(cotangent, state_cotangent(q, parts, normaliser, unit), unit.decay), dk, dv


# --- the sequential strategy: lax.scan passes over chunks -----------------------------------------------------


def _sequential_forward(chunks: Chunks, batch: int, length: int):
    num_chunks, _, chunk, _ = chunks.q.shape

    def step(carry, xs):
        state, out = carry
        index, (q, k, v, eps, stabiliser) = xs
        state, chunk_out, denominator = forward_step(state, q, k, v, chunks.eps_of(eps), stabiliser)
        return (state, _write(out, chunk_out, index)), denominator

    out = jnp.zeros((batch, num_chunks * chunk, chunks.q.shape[1] // batch, chunks.v.shape[-1]), chunks.v.dtype)
    (_, out), denominators = jax.lax.scan(step, (chunks.zero_state(), out),
                                          (jnp.arange(num_chunks), chunks.per_chunk()), unroll=UNROLL)
    return out[:, :length], denominators


def padded_rows(x, chunk: int):
    """x [B, L, H, d] padded with zeros to whole chunks."""
    return jnp.pad(x, ((0, 0), (0, -x.shape[1] % chunk), (0, 0), (0, 0)))


def _sequential_query_pass(chunks: Chunks, denominators, out_cotangent):
    """dq [B, n C, H, m] and D's cotangent [n, B*H, C, 1], in order over chunks (the states they received)."""
    chunk = chunks.q.shape[2]

    def step(carry, xs):
        state, dq = carry
        index, (q, k, v, _, stabiliser), denominator = xs
        state, chunk_dq, normaliser = query_step(state, q, k, v, _read(out_cotangent, index, chunk), denominator,
                                                 stabiliser)
        return (state, _write(dq, chunk_dq, index)), normaliser

    dq = jnp.zeros(out_cotangent.shape[:-1] + chunks.q.shape[-1:], chunks.q.dtype)
    xs = (jnp.arange(chunks.q.shape[0]), chunks.per_chunk(), denominators)
    (_, dq), normalisers = jax.lax.scan(step, (chunks.zero_state(), dq), xs, unroll=UNROLL)
    return dq, normalisers


def _sequential_key_pass(chunks: Chunks, denominators, normalisers, out_cotangent):
    """dk, dv [B, n C, H, *] in reverse over chunks, carrying the cotangent of the states."""
    chunk = chunks.q.shape[2]

    def step(carry, xs):
        cotangent, dk, dv = carry
        index, (q, k, v, _, stabiliser), denominator, normaliser = xs
        cotangent, chunk_dk, chunk_dv = key_step(cotangent, q, k, v, _read(out_cotangent, index, chunk),
                                                 denominator, normaliser, stabiliser)
        return (cotangent, _write(dk, chunk_dk, index), _write(dv, chunk_dv, index)), None

    dk = jnp.zeros(out_cotangent.shape[:-1] + chunks.k.shape[-1:], chunks.k.dtype)
    dv = jnp.zeros(out_cotangent.shape, chunks.v.dtype)
    xs = (jnp.arange(chunks.q.shape[0]), chunks.per_chunk(), denominators, normalisers)
    (_, dk, dv), _ = jax.lax.scan(step, (chunks.zero_state(), dk, dv), xs, reverse=True, unroll=UNROLL)
    return dk, dv


def _sequential_backward(chunks: Chunks, denominators, out_cotangent, length: int):
    out_cotangent = padded_rows(out_cotangent, chunks.q.shape[2])
    dq, normalisers = _sequential_query_pass(chunks, denominators, out_cotangent)
    dk, dv = _sequential_key_pass(chunks, denominators, normalisers, out_cotangent)
    return dq[:, :length], dk[:, :length], dv[:, :length], normalisers


# --- the parallel strategy: every chunk at once ---------------------------------------------------------------


def exclusive_prefix(added, decay, reverse: bool = False):
    """The state each chunk receives from the chunks before it (after it, `reverse`): (P, z) [n, ...] from
    the chunks' own (S, s), a cumsum shifted by one where there is no stabiliser, else a scan carry."""
    if decay is None:
        def shifted(x):
            inclusive = jax.lax.cumsum(x, 0, reverse=reverse)
            zero = jnp.zeros_like(inclusive[:1])
            return jnp.concatenate([inclusive[1:], zero] if reverse else [zero, inclusive[:-1]])

        return tuple(map(shifted, added))

    def step(state, xs):
        return carried(state, xs[0], xs[1]), state

    zero = tuple(jnp.zeros_like(x[0]) for x in added)
    return jax.lax.scan(step, zero, (added, decay), reverse=reverse, unroll=UNROLL)[1]


def _parallel_forward(chunks: Chunks, batch: int, length: int):
    unit = units(chunks.stabiliser)
    received = exclusive_prefix(chunk_state(chunks.k, chunks.v, unit), unit.decay)
    out, denominators = chunk_forward(chunks.q, chunks.k, chunks.v, received, chunks.eps, unit)
    return from_chunks(out.astype(chunks.v.dtype), batch, length), denominators


def _parallel_backward(chunks: Chunks, denominators, out_cotangent, length: int):
    batch, chunk = out_cotangent.shape[0], chunks.q.shape[2]
    q, k, v = chunks.q, chunks.k, chunks.v
    unit = units(chunks.stabiliser)
    matrix, vector = exclusive_prefix(chunk_state(k, v, unit), unit.decay)
    parts = cotangents(q, k, v, to_chunks(out_cotangent, chunk), denominators, unit)
    by_state, normalisers = normaliser_cotangent(q, parts, denominators, matrix, unit)
    score_grad = score_cotangent(parts, normalisers, unit)
    dq = query_gradient(k, vector, by_state, normalisers, score_grad, unit)
    cotangent = exclusive_prefix(state_cotangent(q, parts, normalisers, unit), unit.decay, reverse=True)
    dk, dv = key_value_gradients(q, k, v, parts, score_grad, cotangent, unit)
    grads = (from_chunks(x.astype(y.dtype), batch, length) for x, y in ((dq, q), (dk, k), (dv, v)))
    return (*grads, normalisers)


# --- the custom VJP -------------------------------------------------------------------------------------------

_FORWARD = {"sequential": _sequential_forward, "parallel": _parallel_forward}
_BACKWARD = {"sequential": _sequential_backward, "parallel": _parallel_backward}


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def causal_sums(phi_q, phi_k, v, eps, key_stabiliser, chunk: int, strategy: str):
    """Causal linear attention [B, L, H, Dv] in v's dtype of [B, L, H, *] inputs in chunks of `chunk`;
    `eps` float32, a scalar or per query [B, L, H, 1]; `key_stabiliser` None or the keys' running max
    [B, L, H, 1] (a constant to differentiation: its cotangent is 0)."""
    return _causal_forward(phi_q, phi_k, v, eps, key_stabiliser, chunk, strategy)[0]


def _causal_forward(phi_q, phi_k, v, eps, key_stabiliser, chunk, strategy):
    chunks = Chunks.of(phi_q, phi_k, v, eps, key_stabiliser, chunk)
    out, denominators = _FORWARD[strategy](chunks, v.shape[0], v.shape[1])
    return out, (chunks, denominators, key_stabiliser)


def _causal_backward(chunk, strategy, residuals, out_cotangent):
    chunks, denominators, key_stabiliser = residuals
    length = out_cotangent.shape[1]
    *grads, normalisers = _BACKWARD[strategy](chunks, denominators, out_cotangent, length)
    if jnp.ndim(chunks.eps):
        eps_cotangent = from_chunks(normalisers, out_cotangent.shape[0], length)
    else:
        eps_cotangent = normalisers.sum()
    stabiliser_cotangent = None if key_stabiliser is None else jnp.zeros_like(key_stabiliser)
    return (*grads, eps_cotangent, stabiliser_cotangent)


causal_sums.defvjp(_causal_forward, _causal_backward)


# --- bidirectional: one state over every key, in the layout [B*H, L, *] ---------------------------------------


@jax.custom_vjp
def bidirectional_sums(phi_q, phi_k, v, eps):
    """phi_q [B, Lq, H, m], phi_k [B, Lk, H, m], v [B, Lk, H, Dv] -> [B, Lq, H, Dv] in v's dtype; `eps`
    float32, a scalar or per query [B, Lq, H, 1]."""
    return _bidirectional_forward(phi_q, phi_k, v, eps)[0]


def _whole(x):
    """[B, L, H, d] -> [B*H, L, d]: one chunk of every position."""
    batch, length, heads, width = x.shape
    return x.transpose(0, 2, 1, 3).reshape(batch * heads, length, width)


def _from_whole(x, batch: int):
    """[B*H, L, d] -> [B, L, H, d]."""
    groups, length, width = x.shape
    return x.reshape(batch, groups // batch, length, width).transpose(0, 2, 1, 3)


def _bidirectional_forward(phi_q, phi_k, v, eps):
    q, k, values = _whole(phi_q), _whole(phi_k), _whole(v)
    matrix, vector = chunk_state(k, values, units(None))
    eps_rows = _whole(eps) if jnp.ndim(eps) else eps
    denominator = jnp.maximum(_sums("...qm,...m->...q", q, vector)[..., None] + eps_rows, _TINY)
    out = _sums("...qm,...md->...qd", q, matrix) / denominator
    return _from_whole(out.astype(v.dtype), v.shape[0]), (q, k, values, eps, matrix, vector,
                                                                         denominator)


def _bidirectional_backward(residuals, out_cotangent):
    q, k, values, eps, matrix, vector, denominator = residuals
    batch = out_cotangent.shape[0]
    numerator = _whole(out_cotangent) / denominator
    by_state = _sums("...qd,...md->...qm", numerator, matrix)
    normaliser = jnp.where(denominator > _TINY, -(q * by_state).sum(-1, keepdims=True) / denominator, 0.0)
    dq = by_state + normaliser * vector[..., None, :]
    matrix_cotangent = _sums("...qm,...qd->...md", q, numerator)
    vector_cotangent = _sums("...qm,...q->...m", q, normaliser[..., 0])
    dk = _sums("...kd,...md->...km", values, matrix_cotangent) + vector_cotangent[..., None, :]
    dv = _sums("...km,...md->...kd", k, matrix_cotangent)
    grads = (_from_whole(x.astype(y.dtype), batch) for x, y in ((dq, q), (dk, k), (dv, values)))
    eps_cotangent = _from_whole(normaliser, batch) if jnp.ndim(eps) else normaliser.sum()
    return (*grads, eps_cotangent)


bidirectional_sums.defvjp(_bidirectional_forward, _bidirectional_backward)
