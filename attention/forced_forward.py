"""Intra-temporal attention (Paulus et al. 2017), which forces a decoder forward over its source.

Step t divides each key's exp-score by what that key received at the earlier steps, e'_ti = exp(e_ti) /
sum_{j<t} exp(e_ji), and normalises over the keys: a source word attended to strongly once is
penalised afterwards, so the decoder moves on instead of attending to the same words again.
"""
import jax
import jax.numpy as jnp

from attention.registry import register
from attention.learned_scores import MultiplicativeAttention
from attention.score_base import masked_softmax

# Stands for exp(-inf) = 0 where a key is not allowed: finite, so no gradient meets inf - inf.
_NOTHING = jnp.finfo(jnp.float32).min


def _shift_down(x, first):
    """x [..., Lq, Lk] moved one row down along Lq, row 0 filled with `first`: what came strictly before."""
    return jnp.concatenate([jnp.full_like(x[..., :1, :], first), x[..., :-1, :]], axis=-2)


def forced_forward_scores(scores, allowed):
    """Scores [B, H, Lq, Lk] minus the log of what each key received at the earlier rows that were
    allowed to attend to it (Paulus's e'_ti in log space); a key no earlier row attended keeps its score
    (e'_1i = exp(e_1i)). `allowed` is None or a boolean mask broadcastable to the scores."""
    allowed = jnp.broadcast_to(True if allowed is None else allowed, scores.shape)
    received = jax.lax.cumlogsumexp(jnp.where(allowed, scores, _NOTHING), axis=scores.ndim - 2)
    attended_before = _shift_down(jnp.cumsum(allowed, axis=-2) > 0, False)
    return scores - jnp.where(attended_before, _shift_down(received, _NOTHING), 0.0)


@register("forced_forward")
class ForcedForwardAttention(MultiplicativeAttention):
    """Luong's bilinear score q^T W_h k (Paulus's choice) with the intra-temporal normalisation: rows are
    decoder steps, so in cross-attention the weights of step t depend on the scores of steps 0..t-1.

    In a causal self-attention a key counts from the first row allowed to see it (its own position).
    Decoding carries per key the log of its exp-scores so far ("received") and whether any earlier step
    attended it: one number per key and head beyond the keys and values.
    """

    def weights(self, q, k, mask=None, *, causal=False, rows=None):
        if rows is not None:
            raise ValueError("forced_forward weights depend on the earlier rows: decode with attend_memory")
        allowed = self.allowed(q, k, mask, causal)
        return masked_softmax(forced_forward_scores(self.scores(q, k), allowed), allowed)

    def state_size(self, key_dim: int, value_dim: int, seq_len: int, causal: bool) -> int:
        return self.keys_seen(seq_len, causal) * (key_dim + value_dim + 1)

    def init_cache(self, batch: int, max_len: int, num_heads: int, key_dim: int, value_dim: int,
                   dtype=jnp.float32):
        return {**super().init_cache(batch, max_len, num_heads, key_dim, value_dim, dtype),
                **_nothing_received(batch, num_heads, max_len)}

    def init_memory(self, k, v, key_mask, max_len: int):
        batch, length, heads, _ = k.shape
        return {**super().init_memory(k, v, key_mask, max_len), **_nothing_received(batch, heads, length)}

    def attend_memory(self, q, memory, key_mask, index, max_len: int):
        """Row `index`: its scores less what each key received before, then what each allowed key
        received is updated with this row's scores."""
        scores = self.scores(q, memory["key"])[:, :, 0]  # [B, H, Lk]
        allowed = key_mask[:, None, :]
        attended = memory["attended"][:, None, :]
        earlier = jnp.where(attended, memory["received"], 0.0)
        weights = masked_softmax(scores - earlier, allowed)[:, :, None]
        received = jnp.where(allowed, jnp.logaddexp(memory["received"], scores), memory["received"])
        memory = {**memory, "received": received, "attended": memory["attended"] | key_mask}
        return self._weighted_values(weights, memory["value"]), memory


def _nothing_received(batch: int, heads: int, length: int) -> dict:
    return {"received": jnp.full((batch, heads, length), _NOTHING, jnp.float32),
            "attended": jnp.zeros((batch, length), bool)}
