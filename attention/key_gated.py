"""The gated kinds that read their gates from the key (attention/key_gates.py): `gated_linear` (elu + 1 with a
decay), `delta` and `gated_delta` (the delta rule), on one base over the sums of attention/ops/kernel_sums.py and
attention/ops/delta_sums.py. Their published twins, with gates read from the layer's input, are
attention/input_gated.py's."""
import jax.numpy as jnp
from flax import nnx

from attention import feature_maps, key_gates, masks, option_specs
from attention.kernelized_base import ONE_PATH_IMPLEMENTATION, KernelizedAttention
from attention.ops import delta_sums, kernel_sums
from attention.registry import register


class KeyGatedAttention(KernelizedAttention):
    """Base of the key-gated kinds: the kernelised interface (outputs, weights, the decoding cache and memory) over
    the sums a subclass names. A subclass sets `feature_dim`, defines `features(x)` and

        _keys(k, key_mask)                  what its sums read of the keys [B, L, H, d] (padded keys neutral),
        _sums(q_rows, keys, v, causal)      the output, the O(L) path,
        _weights(q_rows, keys, causal)      A of o = A v,
        _step(state, q_rows, keys, v)       one causal position: (output, state),
        _memory(keys, v), _read(q_rows, memory, positions)   cross-attention's decoding memory and a step of it,
        _state_columns(value_dim)           the width of S [B, H, m, *],

    q_rows being features(q). One path computes the sums, XLA's autodiff of their chunked scans (no custom VJP, no
    Pallas kernels): `kernelized_implementation` takes "auto" or "autodiff". A decay or the delta rule's triangular
    system makes the weights of full rank in general, though `feature_dim` is m."""

    OWN_OPTIONS = (ONE_PATH_IMPLEMENTATION,)
    feature_dim_bounds_rank = False

    def _padded_keys(self, k, mask):
        return self._keys(k, masks.key_padding(mask, k.shape[0], k.shape[1]))

    def __call__(self, q, k, v, mask=None, *, causal=False):
        return self._sums(self.features(q), self._padded_keys(k, mask), v, causal)

    def weights(self, q, k, mask=None, *, causal=False):
        return self._weights(self.features(q), self._padded_keys(k, mask), causal)

    def init_cache(self, batch: int, max_len: int, num_heads: int, key_dim: int, value_dim: int,
                   dtype=jnp.float32):
        """S [B, H, m, _state_columns] in float32 whatever the compute dtype (see KernelizedAttention.init_cache)."""
        shape = (batch, num_heads, self.feature_dim, self._state_columns(value_dim))
        return {"state": jnp.zeros(shape, jnp.float32)}

    def decode_step(self, q, k, v, cache, index, max_len: int, key_valid):
        out, state = self._step(cache["state"], self.features(q), self._keys(k, key_valid[:, None]), v)
        return out.astype(q.dtype), {"state": state}

    def init_memory(self, k, v, key_mask, max_len: int):
        return self._memory(self._keys(k, key_mask), v)

    def attend_memory(self, q, memory, key_mask, index, max_len: int):
        return self._read(self.features(q), memory, jnp.atleast_1d(index)).astype(q.dtype), memory


@register("gated_linear")
class GatedLinearAttention(KeyGatedAttention):
    """Linear attention (phi = elu + 1, as `linear`) with a data-dependent decay: with `gate="scalar"` one gate per
    position and head, as RetNet's decay made data-dependent or Mamba2's: causally S_t = g_t S_{t-1} +
    phi(k_t) v_t^T and z_t = g_t z_{t-1} + phi(k_t), o_t = phi(q_t)^T S_t / (phi(q_t)^T z_t + eps); with
    `gate="per_feature"` one per key feature, as GLA's: S_t = diag(g_t) S_{t-1} + phi(k_t) v_t^T, z alike, so
    feature f of every stored key decays by its own g_t[f].

    g_t = sigmoid(k_t . w_h + b_h) in (0, 1), read from the key (attention/key_gates.py says why): w [H, d] and
    b [H], or per feature w [H, m, d] and b [H, m] (GLA's own map is of low rank; this one is full). w = 0 and
    b = `decay_bias` (3) start every gate at sigmoid(3) = 0.95, near `linear`'s no decay. A padded key adds no term and decays
    nothing (its gate is 1), so padding is as if it were absent.

    Bidirectionally (encoder roles, cross-attention) a forward and a backward scan are added, numerators and
    normalisers alike: key s reaches query t decayed by the gates between them in either direction, and query
    t sits at position t of the keys' axis (cross-attention too). Under a causal mask or a decay the weights
    are not of rank <= m (the decay matrix is of full rank), though `feature_dim` is m: the feature map's.

    The O(L) path is attention/ops/kernel_sums.py's gated sums, one lax.scan over chunks; per feature, each chunk
    forms its C x C x m decays. Decoding: a causal step decays S [B, H, m, Dv + 1] (its rows, per feature) by its
    gate and adds its key, O(1) in the position; cross-attention's memory holds the source's features, values and
    gates and a step forms its row of weights, O(Lk) as softmax's cache (a decay around the query's position has no
    single summed state)."""

    OWN_OPTIONS = (option_specs.Option(
        "gate", "scalar", "`scalar`: one decay per position and head (RetNet, Mamba2); `per_feature`: one per key "
        "feature (GLA), from a d x d map of the key per head", choices=("scalar", "per_feature")),
        key_gates.DECAY_BIAS, *KeyGatedAttention.OWN_OPTIONS)

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, gate: str = "scalar",
                 decay_bias: float = key_gates.DECAY_BIAS.default, **base_options):
        super().__init__(**base_options)
        self.feature_dim = head_dim
        self.gate = gate
        self.gate_weight, self.gate_bias = key_gates.parameters(
            num_heads, head_dim, decay_bias, self.feature_dim if gate == "per_feature" else None)

    def features(self, x):
        return feature_maps.elu_plus_one(x)

    def _keys(self, k, key_mask):
        """(phi(k), log g [B, Lk, H] or per feature [B, Lk, H, m], in float32) with padded keys' phi 0 and log
        gate 0."""
        phi_k, log_gate = self.features(k), key_gates.log_gate(k, self.gate_weight, self.gate_bias, key_mask)
        if key_mask is None:
            return phi_k, log_gate
        return phi_k * key_mask[:, :, None, None].astype(phi_k.dtype), log_gate

    def _sums(self, phi_q, keys, v, causal):
        phi_k, log_gate = keys
        return kernel_sums.gated_linear_attention(phi_q, phi_k, v, log_gate, self.eps, self.chunk_size, causal)

    def _weights(self, phi_q, keys, causal):
        phi_k, log_gate = keys
        scores = kernel_sums.decayed_scores(phi_q, phi_k, log_gate, jnp.arange(phi_q.shape[1]), causal)
        return kernel_sums.normalised_weights(scores, self.eps)

    def _state_columns(self, value_dim: int) -> int:
        return value_dim + 1  # the normaliser's column

    def _step(self, state, phi_q, keys, v):
        phi_k, log_gate = keys
        decay = jnp.exp(log_gate[:, 0])  # [B, H], or [B, H, m]: S's rows
        decay = decay[..., None] if self.gate == "per_feature" else decay[..., None, None]
        state = state * decay + kernel_sums.key_state(phi_k, v)
        return kernel_sums.attend_state(phi_q, state, self.eps), state

    def _memory(self, keys, v):
        phi_k, log_gate = keys
        return {"keys": phi_k, "values": v, "log_gate": log_gate}

    def _read(self, phi_q, memory, positions):
        scores = kernel_sums.decayed_scores(phi_q, memory["keys"], memory["log_gate"], positions, causal=False)
        return kernel_sums.explicit_attention(scores, memory["values"], self.eps)


@register("delta")
class DeltaAttention(KeyGatedAttention):
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
    such.

    The O(L) path is delta_sums' chunked scan (a triangular solve per chunk, a lax.scan carrying S across
    chunks). Decoding: a causal step applies the rule to S [B, H, d, d_v] in float32, O(1) in the position;
    cross-attention's memory holds the source's keys, gates and its forward and backward scans' u (the
    values the writes add after erasure), and a step reads its row, O(Lk) as softmax's cache (the state a query
    reads depends on its position, so no single summed state serves every step)."""

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

    def _sums(self, q, keys, v, causal):
        unit, beta, log_gate = keys
        attend = delta_sums.causal_delta_rule if causal else delta_sums.bidirectional_delta_rule
        return attend(q, unit, v, beta, log_gate, self.chunk_size)

    def _weights(self, q, keys, causal):
        return delta_sums.weights(q, *keys, causal)

    def _state_columns(self, value_dim: int) -> int:
        return value_dim

    def _step(self, state, q, keys, v):
        unit, beta, log_gate = keys
        return delta_sums.step(state, q, unit, v, beta, log_gate)

    def _memory(self, keys, v):
        unit, beta, log_gate = keys
        forward, backward = delta_sums.source_pseudo_values(unit, beta, log_gate, v, backward=True)
        return {"keys": unit, "log_gate": log_gate, "forward": forward, "backward": backward}

    def _read(self, q, memory, positions):
        return delta_sums.explicit(q, memory["keys"], memory["log_gate"], memory["forward"], memory["backward"],
                                   positions)


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
