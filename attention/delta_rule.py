"""The delta rule's kinds: DeltaNet and Gated DeltaNet, linear attention whose write replaces the value stored
under a key instead of adding to it (their sums in attention/ops/delta_sums.py)."""
import jax.numpy as jnp
from flax import nnx

from attention import feature_maps, key_gates, masks
from attention.ops import delta_sums
from attention.kernelized_base import ONE_PATH_IMPLEMENTATION, KernelizedAttention
from attention.registry import register


@register("delta")
class DeltaAttention(KernelizedAttention):
    """DeltaNet (Schlag et al. 2021; Yang et al. 2024, chunked): causally, with the state S_t [d_v, d] (the
    papers' convention),

        S_t = S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,    o_t = S_t q_t,

    no denominator. Queries and keys are L2-normalised, as DeltaNet does, x / sqrt(|x|^2 + eps) (`eps` keeps a
    zero key finite), so that I - beta k k^T is a contraction and S stays bounded. beta_t = sigmoid(k_t . w_h +
    b_h) in (0, 1) is the write strength per position and head, read from the raw key (attention/key_gates.py
    says why a kind reads it there), w = 0 and b = 0 at the start (beta = 0.5). A padded key has beta 0: it
    writes and erases nothing.

    Bidirectionally (encoder roles, cross-attention) the output is the sum of a forward scan's and a backward
    scan's: the forward one reads S_t after key t, the backward one runs the same rule over the keys T-1..t+1,
    in that order, and reads it before key t, so query t meets key t once, in the forward scan; query t sits at
    position t of the keys' axis (cross-attention too: a query beyond the last key reads the forward state
    after every key, and no backward one).

    o is linear in v, so o = A v with A[t, s] = beta_s k_s^T (prod of (I - beta_r k_r k_r^T), r = s+1..t) q_t
    causally: `weights` returns it, computed as delta_sums' one-chunk form. Rows need not sum to 1 and weights may
    be negative. `feature_dim` is d, and the state holds d x d_v numbers (`state_size`), but the weights are not
    of rank <= d: A = tril(Q K^T) (I + strictly_lower(diag(beta) K K^T))^-1 diag(beta) is a triangular part of
    the rank-d Q K^T, of full rank in general, times an invertible matrix, and bidirectionally the sum of two
    such, so `feature_dim_bounds_rank` is False.

    The O(L) path is delta_sums' chunked scan (a triangular solve per chunk, a lax.scan carrying S across
    chunks), differentiated by XLA's autodiff: `kernelized_implementation` takes "auto" or "autodiff", the same
    path.
    Decoding: a causal step applies the rule to S [B, H, d, d_v] in float32, O(1) in the position;
    cross-attention's memory holds the source's keys, gates and its forward and backward scans' u (the
    values the writes add after erasure), and a step reads its row, O(Lk) as softmax's cache (the state a query
    reads depends on its position, so no single summed state serves every step)."""

    OWN_OPTIONS = (ONE_PATH_IMPLEMENTATION,)  # one path (see above)
    feature_dim_bounds_rank = False  # (see above)

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, **base_options):
        super().__init__(**base_options)
        self.feature_dim = head_dim
        self.beta_weight, self.beta_bias = key_gates.parameters(num_heads, head_dim, 0.0, decay=False)

    def features(self, x):
        """x / sqrt(|x|^2 + eps) in float32."""
        x = feature_maps.in_float32(x)
        return x / jnp.sqrt((x * x).sum(-1, keepdims=True) + self.eps)

    def _log_gate(self, k, key_mask):
        """log g [B, L, H]: 0, no decay (gated_delta reads one from the key)."""
        return jnp.zeros(k.shape[:3], jnp.float32)

    def _keys(self, k, key_mask):
        """(unit keys, beta, log g) of keys [B, L, H, d] under key_mask [B, L] (None: every key): a padded key's
        unit key and beta 0, its log gate 0."""
        unit = self.features(k)
        if key_mask is not None:
            unit = unit * key_mask[:, :, None, None]
        beta = key_gates.strength(k, self.beta_weight, self.beta_bias, key_mask)
        return unit, beta, self._log_gate(k, key_mask)

    def __call__(self, q, k, v, mask=None, *, causal=False):
        keys, beta, log_gate = self._keys(k, masks.key_padding(mask, k.shape[0], k.shape[1]))
        attend = delta_sums.causal_delta_rule if causal else delta_sums.bidirectional_delta_rule
        return attend(self.features(q), keys, v, beta, log_gate, self.chunk_size)

    def weights(self, q, k, mask=None, *, causal=False):
        """A of o = A v (delta_sums.weights)."""
        keys, beta, log_gate = self._keys(k, masks.key_padding(mask, k.shape[0], k.shape[1]))
        return delta_sums.weights(self.features(q), keys, beta, log_gate, causal)

    def init_cache(self, batch: int, max_len: int, num_heads: int, key_dim: int, value_dim: int,
                   dtype=jnp.float32):
        """S [B, H, d, Dv] in float32 whatever the compute dtype (see KernelizedAttention.init_cache)."""
        return {"state": jnp.zeros((batch, num_heads, self.feature_dim, value_dim), jnp.float32)}

    def decode_step(self, q, k, v, cache, index, max_len: int, key_valid):
        keys, beta, log_gate = self._keys(k, key_valid[:, None])
        out, state = delta_sums.step(cache["state"], self.features(q), keys, v, beta, log_gate)
        return out.astype(q.dtype), {"state": state}

    def init_memory(self, k, v, key_mask, max_len: int):
        keys, beta, log_gate = self._keys(k, key_mask)
        forward, backward = delta_sums.source_pseudo_values(keys, beta, log_gate, v, backward=True)
        return {"keys": keys, "log_gate": log_gate, "forward": forward, "backward": backward}

    def attend_memory(self, q, memory, key_mask, index, max_len: int):
        out = delta_sums.explicit(self.features(q), memory["keys"], memory["log_gate"], memory["forward"],
                                  memory["backward"], jnp.atleast_1d(index))
        return out.astype(q.dtype), memory


@register("gated_delta")
class GatedDeltaAttention(DeltaAttention):
    """Gated DeltaNet (Yang, Kautz & Hatamizadeh 2025): `delta` with a data-dependent decay per head,

        S_t = g_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,    o_t = S_t q_t,

    g_t = sigmoid(k_t . w_h + b_h) read from the key as gated_linear's gate (attention/key_gates.py), w = 0 and
    b = `decay_bias` (3) at the start (g = 0.95); a padded key's gate is 1. In the chunked form the decay enters the WY system
    and the carried state through the chunk's cumulative log gates (attention/ops/delta_sums.py). Bidirectionally,
    as `delta`, with key s > t reaching query t decayed by the gates of t+1..s, as gated_linear's backward scan.
    Everything else is `delta`'s: no denominator, no rank bound, the same decoding and state."""

    OWN_OPTIONS = (*DeltaAttention.OWN_OPTIONS, key_gates.DECAY_BIAS)

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs,
                 decay_bias: float = key_gates.DECAY_BIAS.default, **base_options):
        super().__init__(num_heads=num_heads, head_dim=head_dim, rngs=rngs, **base_options)
        self.gate_weight, self.gate_bias = key_gates.parameters(num_heads, head_dim, decay_bias)

    def _log_gate(self, k, key_mask):
        return key_gates.log_gate(k, self.gate_weight, self.gate_bias, key_mask)
