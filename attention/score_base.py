"""Attention as a masked softmax over a score matrix: the base of the score kinds and what they share.

`ScoreAttention` is the base of every kind whose weights are softmax(scores) over the allowed keys: a
kind defines `scores(q, k)` and inherits the masking, the dropout, the weighted sum of values and the
incremental decoding (a key/value cache, see attention/__init__.py).
"""
import jax
import jax.numpy as jnp
from flax import nnx

from attention import masks, option_specs


def dot_scores(q, k, scale: float = 1.0):
    """scale * q.k for every query and key: [B, Lq, H, D], [B, Lk, H, D] -> float32 [B, H, Lq, Lk]."""
    return jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) * scale


def masked_softmax(scores, allowed):
    """Softmax over the keys (last axis) of float32 scores, zero where `allowed` is False.

    `allowed` is None (every key allowed) or boolean, broadcastable to the scores. A finite fill keeps
    a row with no allowed key (and its gradient) free of NaN; that row is then all zeros: it attends
    to nothing.
    """
    if allowed is None:
        return jax.nn.softmax(scores, axis=-1)
    weights = jax.nn.softmax(jnp.where(allowed, scores, jnp.finfo(jnp.float32).min), axis=-1)
    return jnp.where(allowed, weights, 0.0)


def lecun_normal_per_head(rngs: nnx.Rngs, shape):
    """A [H, fan_in, ...] parameter drawn N(0, 1/fan_in): each head's map keeps its input's scale."""
    return nnx.Param(jax.random.normal(rngs.params(), shape) * shape[1] ** -0.5)


DROPOUT_RATE = option_specs.Option("dropout_rate", 0.0, "dropout on the attention weights, in training",
                                   rule=option_specs.fraction())


class ScoreAttention(nnx.Module):
    """Base of the kinds whose weights are a softmax of `scores(q, k)` over the allowed keys.

    A subclass defines `scores`; it may narrow the allowed keys (`allowed`, e.g. to a window) or
    change the weights themselves (`weights`); `__call__` applies dropout to whatever `weights` gives.

    `BASE_OPTIONS` are the options every score kind reads (`dropout_rate`): a kind's constructor passes them
    on as **base_options, and declares its own in `OWN_OPTIONS` (attention/registry.py composes the two).
    """

    BASE_OPTIONS = (DROPOUT_RATE,)
    OWN_OPTIONS = ()

    feature_dim = None  # a softmax over scores has no finite feature map: the matrix is not rank-bounded
    feature_dim_bounds_rank = True  # softmax_rank's feature_dim is its rank (see KernelizedAttention's)
    # Row i of the weights depends on the queries up to i alone, so the kind can attend causally and decode one
    # position at a time (init_cache, decode_step, init_memory, attend_memory). A kind whose rows depend on
    # every query (softmax_rank's projection, attention/low_rank.py) sets it False: it refuses causal=True and
    # those methods, training/validate.py keeps it out of causal and decoded roles, and the kind contract
    # (tests/kind_harness.py) checks those refusals in place of its causal and decoding tests.
    incremental = True
    # Its weights are a softmax over every allowed key, none cut to exactly 0, so log(weight) is the score up
    # to a shift per row: the logit spread of eval.json's shape rows (analysis/shape.py) reads the scores. A
    # kind that cuts keys itself (local's window, hard's top k) sets it False: its cut keys would read as
    # scores of -87, the log of float32's smallest normal.
    keeps_every_key = True

    def __init__(self, *, rngs: nnx.Rngs, dropout_rate: float = 0.0):
        self.dropout = nnx.Dropout(dropout_rate, rngs=rngs)

    def scores(self, q, k):
        """[B, Lq, H, Dq], [B, Lk, H, Dk] -> float32 [B, H, Lq, Lk]."""
        raise NotImplementedError

    def allowed(self, q, k, mask, causal, rows=None):
        """The boolean mask of the keys each query may attend to, or None for all of them.

        `rows` = (positions, query_length) when q holds only the rows at `positions` [Lq] of a
        `query_length`-row query (a decoding step); None when q is the whole query. Only kinds whose
        keys depend on the query's position (local attention's window) need it."""
        return masks.combine(mask, causal, q.shape[1], k.shape[1])

    def weights(self, q, k, mask=None, *, causal=False, rows=None):
        return masked_softmax(self.scores(q, k), self.allowed(q, k, mask, causal, rows))

    def __call__(self, q, k, v, mask=None, *, causal=False):
        return self._weighted_values(self.weights(q, k, mask, causal=causal), v)

    def _weighted_values(self, weights, v):
        # The weights meet v in its dtype (a bfloat16 matmul), the sum over keys accumulates in float32.
        return jnp.einsum("bhqk,bkhd->bqhd", self.dropout(weights).astype(v.dtype), v,
                          preferred_element_type=jnp.float32).astype(v.dtype)

    # --- incremental decoding: the cache holds every key and value so far -----------------------------

    def state_size(self, key_dim: int, value_dim: int, seq_len: int, causal: bool) -> int:
        """Numbers a head keeps to attend over `seq_len` positions: every key and value (a decoding
        step's cache), so it grows with the length; `causal` matters only to kinds that see fewer keys."""
        return self.keys_seen(seq_len, causal) * (key_dim + value_dim)

    def keys_seen(self, seq_len: int, causal: bool) -> int:
        """How many keys one query can attend to at most."""
        return seq_len

    def narrows_keys(self, seq_len: int) -> bool:
        """Whether some query sees fewer of `seq_len` keys than the mask and causality allow (a window)."""
        return False

    def init_cache(self, batch: int, max_len: int, num_heads: int, key_dim: int, value_dim: int,
                   dtype=jnp.float32):
        """Keys [B, max_len, H, Dk], values [B, max_len, H, Dv] and which positions hold a real
        (non-padding) key."""
        return {"key": jnp.zeros((batch, max_len, num_heads, key_dim), dtype),
                "value": jnp.zeros((batch, max_len, num_heads, value_dim), dtype),
                "valid": jnp.zeros((batch, max_len), bool)}

    def decode_step(self, q, k, v, cache, index, max_len: int, key_valid):
        """Causal self-attention of position `index` (q, k, v [B, 1, H, D], key_valid [B]) over the
        positions <= index: (out [B, 1, H, D], cache). Every key of the buffer is scored (fixed shapes),
        so a step costs O(max_len)."""
        cache = {
            **cache,
            "key": jax.lax.dynamic_update_slice_in_dim(cache["key"], k.astype(cache["key"].dtype), index, 1),
            "value": jax.lax.dynamic_update_slice_in_dim(cache["value"], v.astype(cache["value"].dtype),
                                                         index, 1),
            "valid": jax.lax.dynamic_update_index_in_dim(cache["valid"], key_valid, index, 1),
        }
        seen = cache["valid"] & (jnp.arange(max_len) <= index)
        return self.attend_memory(q, cache, seen, index, max_len)

    def init_memory(self, k, v, key_mask, max_len: int):
        """What a query of a `max_len`-row decoder needs of keys and values it attends to in full
        (cross-attention over the source): here the keys and values themselves."""
        return {"key": k, "value": v}

    def attend_memory(self, q, memory, key_mask, index, max_len: int):
        """q [B, 1, H, D], row `index` of a `max_len`-row query, over the memory's keys where
        key_mask [B, Lk] is True -> ([B, 1, H, Dv], memory): the memory is unchanged here, but a kind whose
        weights depend on the earlier rows (forced_forward) carries them in it."""
        weights = self.weights(q, memory["key"], key_mask[:, None, None, :], rows=(jnp.atleast_1d(index), max_len))
        return self._weighted_values(weights, memory["value"]), memory
