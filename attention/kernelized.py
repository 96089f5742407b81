"""Linear attention through a feature map: softmax's exp(q.k) replaced by phi(q).phi(k).

The n x n matrix phi(Q) phi(K)^T (rank <= feature_dim) is never formed in `__call__`: the
bidirectional form sums phi(k) v^T over keys once, O(L m Dv); the causal form works in chunks of C
positions, quadratic inside a chunk and through prefix sums of per-chunk states across chunks, so it
stores L/C states of [m, Dv] rather than one per position.

Mixed precision: with bfloat16 (or float16) inputs, every sum of products (the states, their prefix
sums, the scores, the normaliser) accumulates and stays in float32, and so does the division; only the
output returns to the inputs' dtype. A state sums a term per key: in bfloat16 (8 significant bits) each
addition would round to 2^-8 of the running sum, and a term below half of that would vanish.
"""
import jax
import jax.numpy as jnp
from flax import nnx

from attention import chunking, masks


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


def bidirectional_linear_attention(phi_q, phi_k, v, eps):
    """phi_q [B, Lq, H, m], phi_k [B, Lk, H, m], v [B, Lk, H, Dv] -> [B, Lq, H, Dv] in v's dtype."""
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


def causal_linear_attention(phi_q, phi_k, v, eps, chunk_size: int, key_stabiliser=0.0):
    """Causal linear attention over [B, L, H, *] inputs in chunks of `chunk_size` positions -> [B, L, H, Dv]
    in v's dtype.

    `key_stabiliser` is a scalar where every key shares one scale; else the running max [B, L, H, 1] of the
    keys' stabilisers, phi_k of key j scaled down by exp(key_stabiliser[j]), and query i's output, and its
    `eps`, in the units of exp(key_stabiliser[i]), which no later key changes (`_causal_factors`). A chunk's
    state is kept in the units of its last position, and a state carried across a chunk is rescaled by the
    growth of the running max over it, as a decoding step rescales its state."""
    batch, length, heads, _ = phi_q.shape
    chunk = min(chunk_size or chunking.chunk_size_for(jax.default_backend(), length), length)
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


# The stabiliser of a padded key: below any other, so it sets no scale, and finite, so that exp(it - itself)
# is 1 where no key is allowed yet, not NaN.
_NO_KEY = float(jnp.finfo(jnp.float32).min)


class KernelizedAttention(nnx.Module):
    """Base of the linear kinds: a subclass sets `feature_dim` and defines `features(x)` for
    [B, L, H, d] inputs, or `row_features` where features depend on positions or carry a stabiliser.

    `eps` is the normaliser's floor in the kernel's own units: a feature map that scales its products
    down by exp(stabiliser) for numerical range has eps scaled down alike, so the stabiliser cancels.

    Decoding keeps S = sum_k phi(k) [v, 1]^T [B, H, m, Dv + 1] in place of the keys: a causal step adds
    its key's term, O(1) in the position; cross-attention sums the source keys once."""

    feature_dim: int

    def __init__(self, *, eps: float, chunk_size: int):
        self.eps = eps
        self.chunk_size = chunk_size

    def features(self, x):
        raise NotImplementedError

    def row_features(self, x, positions, max_len: int):
        """(phi(x), stabiliser) for the queries or keys x [B, L, H, d] at `positions` [L] of an attention
        whose longer side has `max_len` positions: phi(x) is scaled down by exp(stabiliser), a scalar or
        one per row [B, L, H, 1]."""
        return self.features(x), 0.0

    def _eps(self, stabiliser):
        """eps in the units of phi(q).phi(k), scaled down by exp(stabiliser) as they are, in float32 and
        unclipped, so that it cannot outweigh a normaliser it should not: where it underflows, it is
        negligible next to any normaliser above 2e-31 (2^24 times float32's smallest normal number); where
        it overflows to inf, the output is 0, and the exact one below 3e-39 times the number of keys of
        the values (stabilised features keep each phi(q).phi(k) <= 1, so the unscaled normaliser is below
        3e-39 eps per key)."""
        log_eps = jnp.log(jnp.float32(self.eps)) - jax.lax.stop_gradient(jnp.asarray(stabiliser, jnp.float32))
        return jnp.exp(log_eps)

    def _key_features(self, k, key_mask, max_len: int, causal: bool):
        """phi(k) with padded keys zeroed, in the units of the stabiliser returned: the kind's scalar, else
        the largest of the allowed keys' stabilisers [B, 1, H, 1], or causally their running max
        [B, Lk, H, 1], so that a query's units depend on no later key (as in decoding)."""
        phi_k, stabiliser = self.row_features(k, jnp.arange(k.shape[1]), max_len)
        if key_mask is not None:
            phi_k = phi_k * key_mask[:, :, None, None].astype(phi_k.dtype)
        if jnp.ndim(stabiliser) == 0:
            return phi_k, stabiliser
        # It cancels in the output: differentiating through it would only add terms that sum to 0.
        stabiliser = jax.lax.stop_gradient(stabiliser)
        if key_mask is not None:  # a padded key must not set the keys' scale
            stabiliser = jnp.where(key_mask[:, :, None, None], stabiliser, _NO_KEY)
        shared = jax.lax.cummax(stabiliser, axis=1) if causal else stabiliser.max(1, keepdims=True)
        # phi_k times its float32 factor (<= 1) is float32: not rounded a second time to the compute dtype.
        return phi_k * jnp.exp(stabiliser - shared), shared

    def _features_and_eps(self, q, k, mask, causal):
        key_mask = masks.key_padding(mask, k.shape[0], k.shape[1])
        max_len = max(q.shape[1], k.shape[1])
        phi_q, query_stabiliser = self.row_features(q, jnp.arange(q.shape[1]), max_len)
        phi_k, key_stabiliser = self._key_features(k, key_mask, max_len, causal)
        return phi_q, phi_k, key_stabiliser, self._eps(query_stabiliser + key_stabiliser)

    def weights(self, q, k, mask=None, *, causal=False):
        phi_q, phi_k, key_stabiliser, eps = self._features_and_eps(q, k, mask, causal)
        scores = _sum_products("bqhm,bkhm->bhqk", phi_q, phi_k)
        if causal:
            scores = scores * _causal_factors(key_stabiliser, q.shape[1])
        per_query_eps = jnp.swapaxes(eps, 1, 2) if eps.ndim else eps  # [B, Lq, H, 1] -> [B, H, Lq, 1]
        return scores / _denominator(scores.sum(-1, keepdims=True), per_query_eps)

    def __call__(self, q, k, v, mask=None, *, causal=False):
        phi_q, phi_k, key_stabiliser, eps = self._features_and_eps(q, k, mask, causal)
        if causal:
            return causal_linear_attention(phi_q, phi_k, v, eps, self.chunk_size, key_stabiliser)
        return bidirectional_linear_attention(phi_q, phi_k, v, eps)

    # --- incremental decoding (interface in attention/__init__.py) ------------------------------------

    def _attend(self, q, index, max_len: int, state, key_stabiliser):
        phi_q, query_stabiliser = self.row_features(q, jnp.atleast_1d(index), max_len)
        # In q's dtype, the compute dtype: a cache or memory holds no values to take it from.
        return attend_state(phi_q, state, self._eps(query_stabiliser + key_stabiliser)).astype(q.dtype)

    def state_size(self, key_dim: int, value_dim: int, seq_len: int, causal: bool) -> int:
        """m x Dv numbers per head, S = sum phi(k) v^T (its normaliser column aside), at any length:
        the fixed state that bounds what the kind can recall."""
        return self.feature_dim * value_dim

    def init_cache(self, batch: int, max_len: int, num_heads: int, key_dim: int, value_dim: int,
                   dtype=jnp.float32):
        """S [B, H, m, Dv + 1] and the keys' running stabiliser [B, 1, H, 1] (-inf: no key yet), both
        float32 whatever the compute `dtype`: S gains a term per step, which a bfloat16 sum of hundreds
        of terms would round away."""
        return {"state": jnp.zeros((batch, num_heads, self.feature_dim, value_dim + 1), jnp.float32),
                "stabiliser": jnp.full((batch, 1, num_heads, 1), -jnp.inf, jnp.float32)}

    def decode_step(self, q, k, v, cache, index, max_len: int, key_valid):
        """Causal self-attention of position `index` (q, k, v [B, 1, H, D], key_valid [B]): S gains
        phi(k) [v, 1]^T. The stabiliser is the running max of the keys' ones: when it grows, S (held in
        its units) is rescaled by exp(old - new), so the output is the full causal computation's."""
        phi_k, key_stabiliser = self.row_features(k, jnp.atleast_1d(index), max_len)
        # A padding key sets no scale, as in the full computation.
        key_stabiliser = jnp.where(key_valid[:, None, None, None], key_stabiliser, _NO_KEY)
        stabiliser = jnp.maximum(cache["stabiliser"], key_stabiliser)
        weight = key_valid[:, None, None, None] * jnp.exp(key_stabiliser - stabiliser)
        rescale = jnp.exp(cache["stabiliser"] - stabiliser)[:, 0, :, :, None]  # [B, H, 1, 1]
        # phi_k times its float32 weight is float32: the new term is not rounded to the compute dtype.
        state = cache["state"] * rescale + key_state(phi_k * weight, v)
        cache = {"state": state, "stabiliser": stabiliser}
        return self._attend(q, index, max_len, state, stabiliser), cache

    def init_memory(self, k, v, key_mask, max_len: int):
        """The bidirectional S over every allowed key [B, Lk] (cross-attention over the source)."""
        phi_k, stabiliser = self._key_features(k, key_mask, max(max_len, k.shape[1]), causal=False)
        batch, _, heads, _ = k.shape
        return {"state": key_state(phi_k, v),
                "stabiliser": jnp.broadcast_to(jnp.asarray(stabiliser, jnp.float32), (batch, 1, heads, 1))}

    def attend_memory(self, q, memory, key_mask, index, max_len: int):
        out = self._attend(q, index, max(max_len, key_mask.shape[1]), memory["state"], memory["stabiliser"])
        return out, memory
