"""Linear attention from features, the sums behind the kernelised kinds: softmax's exp(q.k) replaced by
phi(q).phi(k).

The n x n matrix phi(Q) phi(K)^T (rank <= feature_dim) is never formed but by `explicit_weights`: the
bidirectional form sums phi(k) v^T over keys once, O(L m Dv); the causal form works in chunks of C
positions, quadratic inside a chunk and through the states of the chunks before it across chunks.

`implementation` (the kinds' option `kernelized_implementation`) picks who computes them: "xla", the
custom-VJP sums of attention/ops/chunked_sums.py; "pallas", the kernels of attention/ops/linear_pallas.py (causal: bidirectional
attention is two matmuls and stays on "xla"; off a GPU in interpret mode, for tests); "auto", the kernels
where they compile (a GPU, widths and chunks they take within its shared memory), else "xla"; and
"autodiff", the reference path below (XLA's autodiff of the chunked sums, the normaliser a column of ones
appended to v, every chunk state, its prefix sum and shifted copy stored for the backward), kept as the
reference that tests/test_linear_paths.py and `python -m scripts.bench_linear_paths`
(benchmarks/linear_paths.py) compare the others with.

Mixed precision: with bfloat16 (or float16) inputs, every sum of products (the states, their prefix
sums, the scores, the normaliser) accumulates and stays in float32, and so does the division; only the
output returns to the inputs' dtype. A state sums a term per key: in bfloat16 (8 significant bits) each
addition would round to 2^-8 of the running sum, and a term below half of that would vanish.

The gated sums (the `gated_linear` kind) decay each key's term by the product of the gates between it and
the query: one lax.scan over chunks, differentiated by XLA's autodiff (see their section below).

Decoding (`key_state`, `attend_state`) keeps S = sum phi(k) [v, 1]^T, the normaliser as S's last column:
one step is O(1) in the position either way.
"""
import jax
import jax.numpy as jnp

from attention import masks
from attention.ops import chunked_sums, chunking, linear_pallas

IMPLEMENTATIONS = ("auto", "xla", "pallas", "autodiff")
_said_interpreted = set()  # the platforms where "pallas" has said that it runs in interpret mode


def _with_ones(v):
    """v with a column of ones appended: one contraction then yields numerator and normaliser."""
    return jnp.concatenate([v, jnp.ones(v.shape[:-1] + (1,), v.dtype)], axis=-1)


def _sum_products(subscripts, *operands):
    """jnp.einsum accumulated and returned in float32 (at least), whatever the operands' dtype."""
    return jnp.einsum(subscripts, *operands, preferred_element_type=jnp.float32)


def _denominator(normaliser, eps):
    """normaliser + eps, floored at float32's smallest normal number: a normaliser and a (stabilised) eps
    that both underflowed, for a query with no key or whose terms all underflowed, give 0 / tiny, not
    0 / 0; a sum above the floor is left exact."""
    return jnp.maximum(normaliser + eps, jnp.finfo(jnp.float32).tiny)


def _normalise(numerator_and_normaliser, eps):
    numerator, normaliser = numerator_and_normaliser[..., :-1], numerator_and_normaliser[..., -1:]
    return numerator / _denominator(normaliser, eps)


def key_state(phi_k, v):
    """sum over keys of phi(k) [v, 1]^T: phi_k [B, Lk, H, m], v [B, Lk, H, Dv] -> float32 [B, H, m, Dv + 1]."""
    return _sum_products("bkhm,bkhd->bhmd", phi_k, _with_ones(v))


def attend_state(phi_q, state, eps):
    """phi_q [B, Lq, H, m] against a `key_state` -> float32 [B, Lq, H, Dv]; `eps`, the normaliser's
    floor, is a scalar or per query [B, Lq, H, 1]."""
    return _normalise(_sum_products("bqhm,bhmd->bqhd", phi_q, state), eps)


def reference_bidirectional_linear_attention(phi_q, phi_k, v, eps):
    """The reference bidirectional path (see the module's docstring): phi_q [B, Lq, H, m], phi_k [B, Lk, H, m],
    v [B, Lk, H, Dv] -> [B, Lq, H, Dv] in v's dtype."""
    return attend_state(phi_q, key_state(phi_k, v), eps).astype(v.dtype)


def _causal_factors(key_stabiliser, length: int):
    """Factors [..., H, Lq, Lk] of causal scores over `length` positions whose keys are scaled down by
    exp(key_stabiliser), a scalar or a running max [..., L, H, 1]: for key j <= query i,
    exp(key_stabiliser[j] - key_stabiliser[i]) <= 1 brings the term to the query's units; 0 for j > i,
    whatever the later key's stabiliser."""
    causal = masks.causal_mask(length)
    if jnp.ndim(key_stabiliser) == 0:  # one scale for every key
        return causal
    stabiliser = jnp.moveaxis(key_stabiliser[..., 0], -1, -2)  # [..., H, L]
    return jnp.exp(jnp.where(causal, stabiliser[..., None, :] - stabiliser[..., :, None], -jnp.inf))


def reference_causal_linear_attention(phi_q, phi_k, v, eps, chunk: int, key_stabiliser=0.0):
    """The reference causal path (see the module's docstring): causal linear attention over [B, L, H, *]
    inputs in chunks of `chunk` positions -> [B, L, H, Dv] in v's dtype.

    `key_stabiliser` is a scalar where every key shares one scale; else the running max [B, L, H, 1] of the
    keys' stabilisers, phi_k of key j scaled down by exp(key_stabiliser[j]), and query i's output, and its
    `eps`, in the units of exp(key_stabiliser[i]), which no later key changes (`_causal_factors`). A chunk's
    state is kept in the units of its last position, and a state carried across a chunk is rescaled by the
    growth of the running max over it, as a decoding step rescales its state."""
    batch, length, heads, _ = phi_q.shape
    padding = -length % chunk
    num_chunks = (length + padding) // chunk

    def chunked(x, mode="constant"):  # [B, L, H, d] -> [B, n, C, H, d]; zero padding at the end adds nothing
        x = jnp.pad(x, ((0, 0), (0, padding), (0, 0), (0, 0)), mode)
        return x.reshape(batch, num_chunks, chunk, heads, x.shape[-1])

    phi_q, phi_k, values = chunked(phi_q), chunked(phi_k), chunked(_with_ones(v))
    if jnp.ndim(key_stabiliser) == 0:
        chunk_states = _sum_products("bnchm,bnchd->bnhmd", phi_k, values)
        inclusive = jnp.cumsum(chunk_states, axis=1)
        to_query = 1.0
    else:
        key_stabiliser = chunked(key_stabiliser, "edge")  # the padding's running max: the last position's
        last = key_stabiliser[:, :, -1:]  # [B, n, 1, H, 1]
        # The units of the state a chunk receives: the previous chunk's last ones (chunk 0 receives none).
        received = jnp.concatenate([key_stabiliser[:, :1, :1], last[:, :-1]], axis=1)
        chunk_states = _sum_products("bnchm,bnchd->bnhmd", phi_k * jnp.exp(key_stabiliser - last), values)
        growth = jnp.exp(received - last)[:, :, 0, :, :, None]  # [B, n, H, 1, 1], <= 1

        def carried(earlier, later):  # (growth, state) of consecutive runs of chunks -> of the whole run
            return earlier[0] * later[0], earlier[1] * later[0] + later[1]

        inclusive = jax.lax.associative_scan(carried, (growth, chunk_states), axis=1)[1]
        to_query = jnp.exp(received - key_stabiliser)
    # The state seen by chunk i sums the chunks before it (an exclusive prefix sum).
    earlier_states = jnp.concatenate([jnp.zeros_like(inclusive[:, :1]), inclusive[:, :-1]], axis=1)
    from_earlier = _sum_products("bnchm,bnhmd->bnchd", phi_q, earlier_states) * to_query
    scores = _sum_products("bnqhm,bnkhm->bnhqk", phi_q, phi_k) * _causal_factors(key_stabiliser, chunk)
    from_chunk = _sum_products("bnhqk,bnkhd->bnqhd", scores, values)
    out = (from_earlier + from_chunk).reshape(batch, num_chunks * chunk, heads, -1)[:, :length]
    return _normalise(out, eps).astype(v.dtype)


def bidirectional_linear_attention(phi_q, phi_k, v, eps, implementation: str = "xla"):
    """phi_q [B, Lq, H, m], phi_k [B, Lk, H, m], v [B, Lk, H, Dv] -> [B, Lq, H, Dv] in v's dtype; `eps` a
    scalar or per query [B, Lq, H, 1]; `implementation` "autodiff", else the custom-VJP sums (see the module's
    docstring)."""
    if implementation == "autodiff":
        return reference_bidirectional_linear_attention(phi_q, phi_k, v, eps)
    return chunked_sums.bidirectional_sums(phi_q, phi_k, v, jnp.asarray(eps, jnp.float32))


def causal_linear_attention(phi_q, phi_k, v, eps, chunk_size: int, key_stabiliser=0.0,
                            implementation: str = "xla"):
    """Causal linear attention over [B, L, H, *] inputs in chunks of `chunk_size` positions (0: the size
    attention/ops/chunking.py picks for the platform and length) -> [B, L, H, Dv] in v's dtype.

    `key_stabiliser` is a scalar where every key shares one scale; else the running max [B, L, H, 1] of the
    keys' stabilisers, phi_k of key j scaled down by exp(key_stabiliser[j]), and query i's output, and its
    `eps`, in the units of exp(key_stabiliser[i]), which no later key changes. `implementation`: see the
    module's docstring."""
    platform, length = jax.default_backend(), phi_q.shape[1]
    chunk = min(chunk_size or chunking.chunk_size_for(platform, length), length)
    if implementation == "autodiff":
        return reference_causal_linear_attention(phi_q, phi_k, v, eps, chunk, key_stabiliser)
    stabiliser = None if jnp.ndim(key_stabiliser) == 0 else key_stabiliser
    eps = jnp.asarray(eps, jnp.float32)
    if _by_kernels(implementation, platform, phi_q.shape[-1], v.shape[-1], chunk, phi_q.dtype):
        return linear_pallas.causal_sums(phi_q, phi_k, v, eps, stabiliser, chunk, platform != "gpu")
    return chunked_sums.causal_sums(phi_q, phi_k, v, eps, stabiliser, chunk, chunking.strategy_for(platform, length))


def _by_kernels(implementation: str, platform: str, feature_dim: int, value_dim: int, chunk: int, dtype) -> bool:
    """Whether the Pallas kernels compute the causal sums: for "pallas" (in interpret mode off a GPU; refused
    on a GPU where they cannot compile, and anywhere without Pallas's Triton backend), and for "auto" where
    they compile."""
    if implementation not in ("auto", "pallas"):
        return False
    reason = linear_pallas.unsupported(platform, feature_dim, value_dim, chunk, dtype)
    interpreted = platform != "gpu" and not linear_pallas.UNAVAILABLE
    if implementation == "pallas" and reason is not None and not interpreted:
        raise ValueError(f"attention.kernelized_implementation='pallas' cannot run here: {reason}")
    if implementation == "pallas" and interpreted and platform not in _said_interpreted:
        _said_interpreted.add(platform)  # once per process: every trace of every layer passes here
        print(f"warning: attention.kernelized_implementation='pallas' on {platform}: the Pallas kernels run in "
              f"interpret mode (as XLA operations, far slower than 'xla'; for tests); 'auto' takes XLA's sums here",
              flush=True)
    return reason is None or (implementation == "pallas" and interpreted)


def explicit_attention(scores, v, eps):
    """The output of the linear forms from the matrix they never form: scores [B, H, Lq, Lk], phi(q).phi(k)
    with disallowed keys 0, against v [B, Lk, H, Dv] -> [B, Lq, H, Dv] in v's dtype; for kinds that have a
    cheaper way to the matrix than through features wider than the keys are many (the exact polynomials)."""
    return _normalise(_sum_products("bhqk,bkhd->bqhd", scores, _with_ones(v)), eps).astype(v.dtype)


def explicit_weights(phi_q, phi_k, eps, causal: bool, key_stabiliser=0.0):
    """The [B, H, Lq, Lk] matrix phi(q).phi(k) / normaliser that the linear forms above never form, for
    [B, L, H, m] features whose keys are scaled down by exp(key_stabiliser) (see `causal_linear_attention`);
    `eps` is a scalar or per query [B, Lq, H, 1]."""
    scores = _sum_products("bqhm,bkhm->bhqk", phi_q, phi_k)
    if causal:
        scores = scores * _causal_factors(key_stabiliser, phi_q.shape[1])
    return normalised_weights(scores, eps)


def normalised_weights(scores, eps):
    """scores [B, H, Lq, Lk], disallowed keys 0, divided by their row sums plus `eps` (a scalar or per query
    [B, Lq, H, 1])."""
    per_query_eps = jnp.swapaxes(eps, 1, 2) if jnp.ndim(eps) else eps  # [B, Lq, H, 1] -> [B, H, Lq, 1]
    return scores / _denominator(scores.sum(-1, keepdims=True), per_query_eps)


# --- gated sums: phi(q_t).phi(k_s) decayed by the product of the gates between s and t ----------------------
#
# With log gates l_r <= 0 along the keys' axis [B, L, H] (0 for a padded key: it decays nothing), key s
# reaches query t decayed by prod_{r=s+1..t} g_r = exp(sum_{r=s+1..t} l_r) causally, and bidirectionally by
# the gates between them in either direction. Differentiated by XLA's autodiff (no custom VJP yet): the
# backward keeps each chunk's received state, L / C states of m x (Dv + 1) per head, never one per position.


def _decayed_sums(phi_q, phi_k, values, log_gate, chunk: int, strict: bool):
    """sum over keys s <= t (s < t where `strict`) of phi(q_t).phi(k_s) prod_{r=s+1..t} g_r values_s
    -> float32 [B, L, H, d] for phi [B, L, H, m], values [B, L, H, d] and log_gate [B, L, H], or [B, L, H, m] for a
    gate per key feature (each feature's product decayed by its own): one lax.scan over chunks of `chunk` positions
    carrying the state sum phi(k) values^T [B, H, m, d], whose rows decay by the features' gates. Inside a chunk
    the decays are differences of the chunk's own cumulative log gates (never of a sum over the whole sequence,
    which would lose their float32 precision as it grows); across chunks the state decays by the chunk's total."""
    per_feature = log_gate.ndim == phi_q.ndim
    allowed = jnp.tril(jnp.ones((chunk, chunk), bool), -1 if strict else 0)

    def step(state, rows):
        q, k, x, log_g = rows  # [B, H, C, *]
        decay = jnp.cumsum(log_g.astype(jnp.float32), axis=2)  # log of the gates' product from the chunk's start
        if per_feature:  # [B, H, C, C, m]: a product q_t[f] k_s[f] decays by feature f's gates
            within = jnp.exp(jnp.where(allowed[..., None], decay[..., :, None, :] - decay[..., None, :, :], -jnp.inf))
            scores = _sum_products("bhqm,bhkm,bhqkm->bhqk", q, k, within)
        else:
            within = jnp.exp(jnp.where(allowed, decay[..., :, None] - decay[..., None, :], -jnp.inf))
            scores = _sum_products("bhqm,bhkm->bhqk", q, k) * within
        decay = decay if per_feature else decay[..., None]  # [B, H, C, m or 1]
        out = (_sum_products("bhqk,bhkd->bhqd", scores, x)
               + _sum_products("bhqm,bhmd->bhqd", q * jnp.exp(decay), state))
        to_end = jnp.exp(decay[..., -1:, :] - decay)  # <= 1
        state = state * jnp.exp(decay[..., -1, :])[..., None] + _sum_products("bhkm,bhkd->bhmd", k * to_end, x)
        return state, out

    batch, length, heads, _ = phi_q.shape
    state = jnp.zeros((batch, heads, phi_k.shape[-1], values.shape[-1]), jnp.float32)
    _, out = jax.lax.scan(step, state, tuple(by_chunks(x, chunk) for x in (phi_q, phi_k, values, log_gate)))
    return from_chunks(out, length)


def by_chunks(x, chunk: int):
    """[B, L, H, *] -> [n, B, H, C, *], the scans' layout: chunks of `chunk` positions first, the last one padded
    with zeros (a padded key adds no term, and its log gate 0 decays nothing)."""
    batch, length = x.shape[:2]
    padding = -length % chunk
    x = jnp.pad(x, ((0, 0), (0, padding)) + ((0, 0),) * (x.ndim - 2))
    return jnp.moveaxis(x.reshape(batch, (length + padding) // chunk, chunk, *x.shape[2:]), (1, 3), (0, 2))


def from_chunks(out, length: int):
    """The inverse of `by_chunks` for a scan's outputs [n, B, H, C, d] -> [B, length, H, d]."""
    num_chunks, batch, heads, chunk, _ = out.shape
    return jnp.moveaxis(out, (0, 2), (1, 3)).reshape(batch, num_chunks * chunk, heads, -1)[:, :length]


def gated_chunk(chunk_size: int, length: int) -> int:
    """The chunk of the scans over `length` positions: `chunk_size`, or attention/ops/chunking.py's for 0, at most
    the length."""
    return min(chunk_size or chunking.chunk_size_for(jax.default_backend(), length), length)


def forward_and_backward(scan, queries, key_rows, log_gate):
    """Bidirectional attention along one axis from a causal `scan(queries, key_rows, log_gate, strict)` over
    [B, L, H, *] arrays -> [B, Lq, H, d]: the forward scan (keys s <= t) plus the backward one (keys s > t,
    decayed by the gates of t+1..s), the latter run on the reversed sequence. Query t sits at position t of the
    keys' axis: queries and keys are padded to the longer side with zeros (`key_rows` must make a zero row a
    padded key: no term, no decay), the padded queries dropped; a query beyond the last key is decayed by the
    gates up to that key only."""
    length = max(queries.shape[1], log_gate.shape[1])
    padded = lambda x: jnp.pad(x, ((0, 0), (0, length - x.shape[1])) + ((0, 0),) * (x.ndim - 2))
    flip = lambda x: x[:, ::-1]
    rows, log_gate = [padded(x) for x in key_rows], padded(log_gate)
    forward = scan(padded(queries), rows, log_gate, False)
    backward = scan(flip(padded(queries)), [flip(x) for x in rows], reversed_gates(log_gate), True)
    return (forward + flip(backward))[:, :queries.shape[1]]


def reversed_gates(log_gate):
    """The log gates [B, L, H, *] a scan over the reversed sequence applies so that key s > t reaches query t decayed
    by the gates of t+1..s: reversed, those are the gates of the positions before each one's, hence shifted by
    one, the first position's gate 1."""
    return jnp.pad(log_gate[:, ::-1][:, :-1], ((0, 0), (1, 0)) + ((0, 0),) * (log_gate.ndim - 2))


def gated_sums(phi_q, phi_k, values, log_gate, chunk_size: int, causal: bool):
    """sum over keys s of phi(q_t).phi(k_s) times the gates between them times values_s -> float32
    [B, Lq, H, d], in chunks of `chunk_size` positions (0: attention/ops/chunking.py's), no normaliser: causally
    keys s <= t; bidirectionally a forward scan (keys s <= t) and a backward one (keys s > t, decayed by the
    gates of t+1..s) added, query t at position t of the keys' axis (cross-attention included; a query beyond
    the last key is decayed by the gates up to that key only, `forward_and_backward`)."""
    chunk = gated_chunk(chunk_size, max(phi_q.shape[1], phi_k.shape[1]))
    if causal:
        return _decayed_sums(phi_q, phi_k, values, log_gate, chunk, strict=False)

    def scan(phi_q, key_rows, log_gate, strict):
        return _decayed_sums(phi_q, *key_rows, log_gate, chunk, strict)

    return forward_and_backward(scan, phi_q, (phi_k, values), log_gate)


def gated_linear_attention(phi_q, phi_k, v, log_gate, eps, chunk_size: int, causal: bool):
    """Gated linear attention: causally S_t = g_t S_{t-1} + phi(k_t) [v_t, 1]^T, o_t = phi(q_t) S_t normalised
    (bidirectionally, numerators and normalisers of both scans added, `gated_sums`) -> [B, Lq, H, Dv] in v's
    dtype."""
    return _normalise(gated_sums(phi_q, phi_k, _with_ones(v), log_gate, chunk_size, causal), eps).astype(v.dtype)


def decayed_scores(phi_q, phi_k, log_gate, positions, causal: bool):
    """The [B, H, Lq, Lk] float32 matrix the gated sums never form: phi(q_t).phi(k_s) times the product of the
    gates between key s and query t (positions [Lq] on the keys' axis, log_gate [B, Lk, H], or [B, Lk, H, m] per
    key feature: each feature's product decayed by its own), 0 for s > t where `causal`. From cumulative log gates
    over the whole sequence: exact enough for the analysed and decoded lengths, not the O(L) path's chunk-local
    sums."""
    per_feature = log_gate.ndim == phi_q.ndim
    cumulative = jnp.moveaxis(jnp.cumsum(log_gate.astype(jnp.float32), axis=1), 1, 2)  # [B, H, Lk, *]
    at_query = cumulative[:, :, jnp.minimum(positions, log_gate.shape[1] - 1)][:, :, :, None]  # [B, H, Lq, 1, *]
    at_key = cumulative[:, :, None]  # [B, H, 1, Lk, *]
    later = jnp.arange(log_gate.shape[1])[None, :] > jnp.asarray(positions)[:, None]  # [Lq, Lk]
    later = later[..., None] if per_feature else later
    log_decay = jnp.where(later, -jnp.inf if causal else at_key - at_query, at_query - at_key)
    if per_feature:
        return _sum_products("bqhm,bkhm,bhqkm->bhqk", phi_q, phi_k, jnp.exp(log_decay))
    return _sum_products("bqhm,bkhm->bhqk", phi_q, phi_k) * jnp.exp(log_decay)
