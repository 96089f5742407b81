"""`mala`: magnitude-aware linear attention (Fan et al., *Rectifying Magnitude Neglect in Linear Attention*,
ICCV 2025), elu + 1 features whose rows sharpen as the query grows.

In normalised linear attention phi(q).phi(k_j) / sum_l phi(q).phi(k_l) the query's magnitude cancels: scaling
phi(q) by a leaves every row as it is, so a query cannot sharpen its row the way softmax's does by growing. MALA
keeps phi, and so the feature dimension, and replaces the division by a scale and an offset, as we read the
paper's equations: with s_ij = phi(q_i).phi(k_j), Z_i = sum_j s_ij over the N_i keys query i may attend to,

    A_ij = beta_i s_ij - gamma_i,   beta_i = 1 + 1 / Z_i,   gamma_i = Z_i / N_i,

rows that sum to 1, of which A_ij = s_ij / Z_i + (s_ij - mean_l s_il): linear attention's row plus the scores'
deviation from their row mean, which grows in proportion to |phi(q_i)|. Entries are signed (below the mean
score, negative) and A = diag(beta) S - gamma 1^T has rank at most m + 1, one more than phi(Q) phi(K)^T: that
is `feature_dim` (the rank bound in eval.json), and the state per head is m x Dv plus the sum of the values.
"""
import jax.numpy as jnp
from flax import nnx

from attention import feature_maps, masks
from attention.ops import kernel_sums
from attention.kernelized_base import KernelizedAttention
from attention.registry import register


def _in_float32(x):
    return x.astype(jnp.float32)


@register("mala")
class MagnitudeAwareAttention(KernelizedAttention):
    """elu + 1 features as `linear`, rows A_ij = s_ij / (Z_i + eps) + s_ij - Z_i / N_i (the module's docstring):
    output o_i = l_i (1 + Z_i + eps) - Z_i vbar_i, with l_i linear attention's output (num_i / (Z_i + eps)) and
    vbar_i the mean of the values query i may attend to. Bidirectionally every sum is over all the allowed keys;
    causally over the keys up to i: l_i from the chunked sums of the kernelised kinds, Z_i, N_i and vbar_i from
    running sums over [B, L, H, m] features, no [B, H, L, m, Dv] tensor.

    Everything from the inputs on is float32, the features included, the output rounded once to v's dtype: o_i is
    a difference of two terms of size Z_i |v| (Z_i ~ L m for elu + 1 features near 1), which bfloat16 would cancel to
    noise. A query
    with no allowed key has Z = N = 0 and attends to nothing. Decoding keeps S = sum phi(k) [v, 1]^T as
    `linear` does, with the sum of the values and their count beside it."""

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, **base_options):
        super().__init__(**base_options)
        self.phi_dim = head_dim
        self.feature_dim = head_dim + 1  # the rank bound of A = diag(beta) S - gamma 1^T

    def features(self, x):
        return feature_maps.elu_plus_one(x)

    def _inputs(self, q, k, v, mask):
        """float32 phi(q), and phi(k) and v with padded keys zeroed; [B, Lk] 1.0 where a key is allowed."""
        key_mask = masks.key_padding(mask, k.shape[0], k.shape[1])
        valid = jnp.ones(k.shape[:2], jnp.float32) if key_mask is None else key_mask.astype(jnp.float32)
        # Features of float32 inputs: elu + 1 in bfloat16 rounds x + 1 to 8 bits, and the output's difference of two
        # terms of size Z |v| would carry that rounding at full size.
        phi_k, v = (x * valid[:, :, None, None] for x in (self.features(_in_float32(k)), _in_float32(v)))
        return self.features(_in_float32(q)), phi_k, v, valid

    def _combine(self, linear, normaliser, value_sum, count):
        """o = l (1 + Z + eps) - Z vbar: linear [B, Lq, H, Dv], normaliser Z [B, Lq, H, 1], value_sum
        [B, Lq or 1, H, Dv] over count N [B, Lq or 1, 1, 1] keys (0: the query attends to nothing)."""
        mean_value = value_sum / jnp.maximum(count, 1.0)
        return linear * (1.0 + normaliser + self.eps) - normaliser * mean_value

    def weights(self, q, k, mask=None, *, causal=False):
        phi_q, phi_k, _, valid = self._inputs(q, k, k, mask)
        scores = jnp.einsum("bqhm,bkhm->bhqk", phi_q, phi_k)
        keys = jnp.broadcast_to(valid[:, None, None, :], scores.shape)
        if causal:
            scores, keys = (jnp.tril(x) for x in (scores, keys))
        normaliser, count = scores.sum(-1, keepdims=True), keys.sum(-1, keepdims=True)
        offset = normaliser / jnp.maximum(count, 1.0)
        return jnp.where(keys > 0, scores / (normaliser + self.eps) + scores - offset, 0.0)

    def __call__(self, q, k, v, mask=None, *, causal=False):
        phi_q, phi_k, v32, valid = self._inputs(q, k, v, mask)
        if not causal:
            state = kernel_sums.key_state(phi_k, v32)
            linear, normaliser = self._attend(phi_q, state)
            value_sum, count = v32.sum(1, keepdims=True), valid.sum(1)[:, None, None, None]
            return self._combine(linear, normaliser, value_sum, count).astype(v.dtype)
        linear = kernel_sums.causal_linear_attention(phi_q, phi_k, v32, self.eps, self.chunk_size,
                                                     implementation=self.implementation)
        normaliser = jnp.einsum("bqhm,bqhm->bqh", phi_q, jnp.cumsum(phi_k, axis=1))[..., None]
        count = jnp.cumsum(valid, axis=1)[:, :, None, None]
        return self._combine(linear, normaliser, jnp.cumsum(v32, axis=1), count).astype(v.dtype)

    def _attend(self, phi_q, state):
        """(l, Z) of queries phi_q [B, Lq, H, m] against S = sum phi(k) [v, 1]^T [B, H, m, Dv + 1]."""
        numerator_and_normaliser = jnp.einsum("bqhm,bhmd->bqhd", phi_q, state)
        normaliser = numerator_and_normaliser[..., -1:]
        return numerator_and_normaliser[..., :-1] / (normaliser + self.eps), normaliser

    def _row(self, q, memory):
        linear, normaliser = self._attend(self.features(_in_float32(q)), memory["state"])
        out = self._combine(linear, normaliser, memory["value_sum"][:, None], memory["count"][:, None, None, None])
        return out.astype(q.dtype)

    # --- incremental decoding (interface in attention/__init__.py) ------------------------------------

    def state_size(self, key_dim: int, value_dim: int, seq_len: int, causal: bool) -> int:
        """m x Dv numbers of S and Dv of the values' sum per head (the count and S's normaliser column aside)."""
        return self.feature_dim * value_dim

    def _memory(self, k, v, key_mask):
        _, phi_k, v32, valid = self._inputs(k, k, v, None if key_mask is None else key_mask[:, None, None, :])
        return {"state": kernel_sums.key_state(phi_k, v32), "value_sum": v32.sum(1), "count": valid.sum(1)}

    def init_cache(self, batch: int, max_len: int, num_heads: int, key_dim: int, value_dim: int,
                   dtype=jnp.float32):
        """S [B, H, m, Dv + 1], the values' sum [B, H, Dv] and their count [B], float32."""
        return {"state": jnp.zeros((batch, num_heads, self.phi_dim, value_dim + 1), jnp.float32),
                "value_sum": jnp.zeros((batch, num_heads, value_dim), jnp.float32),
                "count": jnp.zeros((batch,), jnp.float32)}

    def decode_step(self, q, k, v, cache, index, max_len: int, key_valid):
        added = self._memory(k, v, key_valid[:, None])
        cache = {name: cache[name] + added[name] for name in cache}
        return self._row(q, cache), cache

    def init_memory(self, k, v, key_mask, max_len: int):
        return self._memory(k, v, key_mask)

    def attend_memory(self, q, memory, key_mask, index, max_len: int):
        return self._row(q, memory), memory
