"""Linear attention through a feature map: softmax's exp(q.k) replaced by phi(q).phi(k).

The n x n matrix phi(Q) phi(K)^T (rank <= feature_dim) is never formed in `__call__`: the
bidirectional form sums phi(k) v^T over keys once, O(L m Dv); the causal form works in chunks of C
positions, quadratic inside a chunk and through prefix sums of per-chunk states across chunks, so it
stores L/C states of [m, Dv] rather than one per position.
"""
import jax.numpy as jnp
from flax import nnx

from attention import masks


def _with_ones(v):
    """v with a column of ones appended: one contraction then yields numerator and normaliser."""
    return jnp.concatenate([v, jnp.ones(v.shape[:-1] + (1,), v.dtype)], axis=-1)


def _normalise(numerator_and_normaliser, eps):
    numerator, normaliser = numerator_and_normaliser[..., :-1], numerator_and_normaliser[..., -1:]
    return numerator / (normaliser + eps.astype(normaliser.dtype))


def bidirectional_linear_attention(phi_q, phi_k, v, eps):
    """phi_q [B, Lq, H, m], phi_k [B, Lk, H, m], v [B, Lk, H, Dv] -> [B, Lq, H, Dv]; `eps`, the
    normaliser's floor, is a scalar or per query [B, Lq, H, 1]."""
    state = jnp.einsum("bkhm,bkhd->bhmd", phi_k, _with_ones(v))
    return _normalise(jnp.einsum("bqhm,bhmd->bqhd", phi_q, state), eps)


def causal_linear_attention(phi_q, phi_k, v, eps, chunk_size: int):
    """Causal linear attention over [B, L, H, *] inputs in chunks of `chunk_size` positions."""
    batch, length, heads, _ = phi_q.shape
    chunk = min(chunk_size, length)
    padding = -length % chunk
    num_chunks = (length + padding) // chunk

    def chunked(x):  # [B, L, H, d] -> [B, n, C, H, d]; zero padding at the end adds nothing
        x = jnp.pad(x, ((0, 0), (0, padding), (0, 0), (0, 0)))
        return x.reshape(batch, num_chunks, chunk, heads, x.shape[-1])

    phi_q, phi_k, values = chunked(phi_q), chunked(phi_k), chunked(_with_ones(v))
    chunk_states = jnp.einsum("bnchm,bnchd->bnhmd", phi_k, values)
    # The state seen by chunk i sums the chunks before it (an exclusive prefix sum).
    inclusive = jnp.cumsum(chunk_states, axis=1)
    earlier_states = jnp.concatenate([jnp.zeros_like(inclusive[:, :1]), inclusive[:, :-1]], axis=1)
    from_earlier = jnp.einsum("bnchm,bnhmd->bnchd", phi_q, earlier_states)
    scores = jnp.einsum("bnqhm,bnkhm->bnhqk", phi_q, phi_k) * masks.causal_mask(chunk)
    from_chunk = jnp.einsum("bnhqk,bnkhd->bnqhd", scores, values)
    out = (from_earlier + from_chunk).reshape(batch, num_chunks * chunk, heads, -1)[:, :length]
    return _normalise(out, eps)


# Bounds on the exponent of eps's rescaling: exp(80) keeps eps * exp finite in float32 and bfloat16, and
# exp(-60) keeps it a normal number (a subnormal may flush to 0, and 0 / 0 is NaN).
_LOG_RESCALE_RANGE = (-60.0, 80.0)


class KernelizedAttention(nnx.Module):
    """Base of the linear kinds: a subclass sets `feature_dim` and defines `features(x)` for
    [B, L, H, d] inputs, or `feature_pair` where the two sides' features differ or depend on each other.

    `eps` is the normaliser's floor in the kernel's own units: a feature map that scales its products
    down by exp(stabiliser) for numerical range has eps scaled down alike, so the stabiliser cancels."""

    feature_dim: int

    def __init__(self, *, eps: float, chunk_size: int):
        self.eps = eps
        self.chunk_size = chunk_size

    def features(self, x):
        raise NotImplementedError

    def feature_pair(self, q, k, key_mask):
        """(phi(q), phi(k), stabiliser): `key_mask` [B, Lk] (or None) marks the keys that will count;
        phi(q).phi(k) is the kernel times exp(-stabiliser), a scalar or per query [B, Lq, H, 1]."""
        return self.features(q), self.features(k), 0.0

    def _features_and_eps(self, q, k, mask):
        key_mask = masks.key_padding(mask, k.shape[0], k.shape[1])
        phi_q, phi_k, stabiliser = self.feature_pair(q, k, key_mask)
        if key_mask is not None:
            phi_k = phi_k * key_mask[:, :, None, None].astype(phi_k.dtype)
        log_rescale = jnp.clip(-jnp.asarray(stabiliser, jnp.float32), *_LOG_RESCALE_RANGE)
        return phi_q, phi_k, self.eps * jnp.exp(log_rescale)

    def weights(self, q, k, mask=None, *, causal=False):
        phi_q, phi_k, eps = self._features_and_eps(q, k, mask)
        scores = jnp.einsum("bqhm,bkhm->bhqk", phi_q, phi_k).astype(jnp.float32)
        if causal:
            scores = scores * masks.causal_mask(q.shape[1])
        per_query_eps = jnp.swapaxes(eps, 1, 2) if eps.ndim else eps  # [B, Lq, H, 1] -> [B, H, Lq, 1]
        return scores / (scores.sum(-1, keepdims=True) + per_query_eps)

    def __call__(self, q, k, v, mask=None, *, causal=False):
        phi_q, phi_k, eps = self._features_and_eps(q, k, mask)
        if causal:
            return causal_linear_attention(phi_q, phi_k, v, eps, self.chunk_size)
        return bidirectional_linear_attention(phi_q, phi_k, v, eps)
