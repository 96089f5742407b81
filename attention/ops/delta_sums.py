"""The delta rule's sums, behind the `delta` and `gated_delta` kinds (attention/key_gated.py).

With the state S [m, Dv] (the transpose of the papers' Dv x m), key k_t (unit norm), value v_t, write strength
beta_t and decay g_t (1 for `delta`):

    S_t = g_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,    o_t = S_t^T q_t,

that is S_t = g_t S_{t-1} + k_t u_t^T with u_t = beta_t (v_t - g_t S_{t-1}^T k_t): the value stored under k_t is
replaced by v_t to the extent beta_t. Over a chunk of C positions that starts from the state S_0, with
gamma_t = g_1 ... g_t from the chunk's start and G[t, s] = gamma_t / gamma_s (s <= t), the u_t solve the
triangular system (the WY/UT representation of the chunk's product of Householder-like transitions)

    (I + strictly_lower(diag(beta) (K K^T * G))) U = diag(beta) (V - diag(gamma) K S_0),

so U = U_0 - W S_0 with U_0 and W from one triangular solve, independent of S_0; then
o_t = gamma_t S_0^T q_t + sum_{s <= t} G[t, s] (q_t . k_s) u_s and the state leaving the chunk is
gamma_C S_0 + sum_s (gamma_C / gamma_s) k_s u_s^T. The solves and the chunks' scores run for every chunk at once;
one lax.scan over the chunks carries S [B, H, m, Dv], so no state per position is ever formed. Differentiated
by XLA's autodiff (no custom VJP, no Pallas kernels): its backward keeps the L / C states the scan received.

A padded key has beta 0 and log gate 0: it writes nothing, erases nothing and decays nothing. Everything is
computed in float32 (the values too: the triangular solve takes one dtype), the output returned in v's dtype.

The same algebra over the whole sequence as one chunk (S_0 = 0) gives the explicit matrix A of o = A v, A =
(tril(Q K^T) * G) (I + strictly_lower(diag(beta) (K K^T * G)))^-1 diag(beta): `explicit` reads it, for the
weights (x = the identity) and for cross-attention's decoding memory (x = the values).
"""
import jax
import jax.numpy as jnp

from attention.ops import kernel_sums


def _decay_matrix(cumulative, diagonal: bool):
    """exp(c_t - c_s) for s <= t (s < t without the diagonal), 0 elsewhere: [..., C] -> [..., C, C]."""
    size = cumulative.shape[-1]
    below = jnp.tril(jnp.ones((size, size), bool), 0 if diagonal else -1)
    return jnp.exp(jnp.where(below, cumulative[..., :, None] - cumulative[..., None, :], -jnp.inf))


def _solve(k, beta, cumulative, x):
    """(I + strictly_lower(diag(beta) (K K^T * G)))^-1 diag(beta) x for k [..., C, m], beta and the cumulative log
    gates [..., C], x [..., C, d] -> [..., C, d]: the system is unit lower triangular."""
    gram = jnp.einsum("...tm,...sm->...ts", k, k) * _decay_matrix(cumulative, diagonal=False)
    system = jnp.eye(k.shape[-2]) + beta[..., :, None] * gram
    return jax.lax.linalg.triangular_solve(system, beta[..., None] * x, left_side=True, lower=True,
                                           unit_diagonal=True)


def _scan(q, key_rows, log_gate, chunk: int, strict: bool):
    """o_t = S_t^T q_t (g_t S_{t-1}^T q_t where `strict`: key t neither written nor erasing) -> float32 [B, L, H, Dv]
    for q [B, L, H, m] and key_rows (k [B, L, H, m], v [B, L, H, Dv], beta [B, L, H]), in chunks of `chunk`."""
    k, v, beta = key_rows
    value_dim, length = v.shape[-1], q.shape[1]
    q, k, v, beta, log_gate = (kernel_sums.by_chunks(x, chunk) for x in (q, k, v, beta, log_gate))
    cumulative = jnp.cumsum(log_gate, axis=-1)  # within each chunk: a sum over the sequence would lose precision
    solved = _solve(k, beta, cumulative, jnp.concatenate([v, jnp.exp(cumulative)[..., None] * k], axis=-1))
    pseudo_values, erasers = solved[..., :value_dim], solved[..., value_dim:]
    scores = jnp.einsum("...tm,...sm->...ts", q, k) * _decay_matrix(cumulative, diagonal=not strict)

    def step(state, rows):
        q, k, cumulative, pseudo_values, erasers, scores = rows  # [B, H, C, *]
        u = pseudo_values - jnp.einsum("bhcm,bhmd->bhcd", erasers, state)
        out = (jnp.exp(cumulative)[..., None] * jnp.einsum("bhcm,bhmd->bhcd", q, state)
               + jnp.einsum("bhts,bhsd->bhtd", scores, u))
        to_end = jnp.exp(cumulative[..., -1:] - cumulative)[..., None]  # [B, H, C, 1], <= 1
        state = state * jnp.exp(cumulative[..., -1])[..., None, None] + jnp.einsum("bhcm,bhcd->bhmd", k * to_end, u)
        return state, out

    _, batch, heads, _, key_dim = k.shape  # [n, B, H, C, m]
    state = jnp.zeros((batch, heads, key_dim, value_dim), jnp.float32)
    _, out = jax.lax.scan(step, state, (q, k, cumulative, pseudo_values, erasers, scores))
    return kernel_sums.from_chunks(out, length)


def causal_delta_rule(q, k, v, beta, log_gate, chunk_size: int):
    """Causal (gated) delta rule over q, k [B, L, H, m] (unit norm), v [B, L, H, Dv], beta and log_gate [B, L, H],
    in chunks of `chunk_size` positions (0: attention/ops/chunking.py's) -> [B, L, H, Dv] in v's dtype."""
    chunk = kernel_sums.gated_chunk(chunk_size, q.shape[1])
    return _scan(q, (k, v.astype(jnp.float32), beta), log_gate, chunk, strict=False).astype(v.dtype)


def bidirectional_delta_rule(q, k, v, beta, log_gate, chunk_size: int):
    """Bidirectional (gated) delta rule -> [B, Lq, H, Dv] in v's dtype: the forward scan's output plus the backward
    scan's (kernel_sums.forward_and_backward), query t at position t of the keys' axis. The forward scan reads
    S_t after key t, the backward one reads, before key t, the state of keys T-1..t+1 written in that order, so
    query t meets key t once; a key s > t reaches it erased by the keys between them and decayed by the gates of
    t+1..s."""
    chunk = kernel_sums.gated_chunk(chunk_size, max(q.shape[1], k.shape[1]))

    def scan(q, key_rows, log_gate, strict):
        return _scan(q, key_rows, log_gate, chunk, strict)

    return kernel_sums.forward_and_backward(scan, q, (k, v.astype(jnp.float32), beta), log_gate).astype(v.dtype)


def source_pseudo_values(k, beta, log_gate, x, backward: bool):
    """The u of the whole sequence [B, L, H, *] as one chunk from S_0 = 0 for the values x [B, L, H, d]: the
    forward scan's and, where `backward`, the backward scan's (run reversed, returned in the keys' order; else
    None), float32. What `explicit` reads; linear in x."""
    heads_first = lambda a: jnp.moveaxis(a, 2, 1)  # [B, L, H, *] -> [B, H, L, *]

    def solved(k, beta, log_gate, x):
        cumulative = jnp.cumsum(heads_first(log_gate), axis=-1)
        return jnp.moveaxis(_solve(heads_first(k), heads_first(beta), cumulative, heads_first(x)), 1, 2)

    x = x.astype(jnp.float32)
    forward = solved(k, beta, log_gate, x)
    if not backward:
        return forward, None
    flip = lambda a: a[:, ::-1]
    return forward, flip(solved(flip(k), flip(beta), kernel_sums.reversed_gates(log_gate), flip(x)))


def explicit(q, k, log_gate, forward, backward, positions):
    """sum over keys s of A[t, s] x_s for queries q [B, Lq, H, m] at `positions` [Lq] of the keys' axis, from
    `source_pseudo_values` of x (backward None: causal, keys s <= t alone) -> float32 [B, Lq, H, d]. The
    decays come from log gates summed over the whole sequence (kernel_sums.decayed_scores): exact enough for the
    analysed and decoded lengths, not the scans' chunk-local sums."""
    causal = backward is None
    scores = kernel_sums.decayed_scores(q, k, log_gate, positions, causal)  # [B, H, Lq, Lk]
    later = jnp.arange(k.shape[1])[None, :] > jnp.asarray(positions)[:, None]
    out = jnp.einsum("bhts,bshd->bthd", jnp.where(later, 0.0, scores), forward)
    if causal:
        return out
    return out + jnp.einsum("bhts,bshd->bthd", jnp.where(later, scores, 0.0), backward)


def weights(q, k, beta, log_gate, causal: bool):
    """A of o = A v [B, H, Lq, Lk] in float32 for queries q [B, Lq, H, m] (at positions 0..Lq-1 of the keys' axis),
    unit keys k, beta and log_gate [B, Lk, H]: the output for values that are the identity, v_s = e_s, whose row t
    is A[t, :]."""
    batch, length, heads, _ = k.shape
    identity = jnp.broadcast_to(jnp.eye(length)[None, :, None, :], (batch, length, heads, length))
    pseudo_values = source_pseudo_values(k, beta, log_gate, identity, backward=not causal)
    return explicit(q, k, log_gate, *pseudo_values, jnp.arange(q.shape[1])).transpose(0, 2, 1, 3)


def step(state, q, k, v, beta, log_gate):
    """One causal position of the rule: state S [B, H, m, Dv] float32, q and unit k [B, 1, H, m], v [B, 1, H, Dv],
    beta and log_gate [B, 1, H] -> (o = S_t^T q [B, 1, H, Dv] float32, S_t): S decays by g, then the value stored
    under k is replaced by v to the extent beta."""
    key, beta = k[:, 0], beta[:, 0, :, None, None]
    state = state * jnp.exp(log_gate)[:, 0, :, None, None]
    stored = jnp.einsum("bhm,bhmd->bhd", key, state)  # what the key reads before the write
    state = state + beta * jnp.einsum("bhm,bhd->bhmd", key, v[:, 0].astype(jnp.float32) - stored)
    return jnp.einsum("bqhm,bhmd->bqhd", q, state), state
