"""Luong et al. (2015) local attention: each query sees only a window of 2 * `window` + 1 keys around
an aligned position, monotonic (local-m) or predicted from the query (local-p)."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attention import option_specs
from attention.dot_product import SoftmaxAttention
from attention.registry import register
from attention.score_base import ScoreAttention, dot_scores, lecun_normal_per_head, masked_softmax


def aligned_positions(query_length: int, key_length: int, positions=None):
    """Local-m's p_i: i when Lq == Lk, else i * (Lk - 1) / (Lq - 1) rounded half up, so the first and
    last queries align with the first and last keys (a single query aligns with key 0). The lengths
    are the padded ones: the alignment is static. `positions` (default every i < Lq, as numpy) picks
    the rows i, possibly traced (a decoding step)."""
    i = np.arange(query_length) if positions is None else positions
    # Round half up in integer arithmetic: floor((2 i (Lk - 1) + (Lq - 1)) / (2 (Lq - 1))).
    return (2 * i * (key_length - 1) + query_length - 1) // (2 * max(query_length - 1, 1))


def window_band(query_length: int, key_length: int, window: int, positions=None):
    """[Lq, Lk] mask (Lq = len(positions) when given), True where key s is within `window` of query
    i's aligned position."""
    aligned = aligned_positions(query_length, key_length, positions)
    distance = np.arange(key_length)[None, :] - aligned[:, None]
    return jnp.abs(distance) <= window


WINDOW = option_specs.Option("window", 3, "keys within +- window of the aligned position",
                             rule=option_specs.at_least(0))
# Local-p's window sets its Gaussian's width too, which must be positive.
PREDICTED_WINDOW = dataclasses.replace(WINDOW, rule=option_specs.at_least(1, "sigma = window / 2 must be positive"))


@register("local")
class LocalAttention(SoftmaxAttention):
    """Local-m: scaled dot-product attention restricted to keys within `window` of the aligned position
    (see `aligned_positions`), together with the padding and causal masks."""

    # The window, and not softmax_implementation: its fused path is the auto default (see DotAttention.__call__).
    OWN_OPTIONS = (WINDOW,)
    keeps_every_key = False  # the window's outside is 0 (ScoreAttention.keeps_every_key)

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, window: int = 3, **base_options):
        super().__init__(num_heads=num_heads, head_dim=head_dim, rngs=rngs, **base_options)
        self.window = window

    def keys_seen(self, seq_len: int, causal: bool) -> int:
        """The window: the `window` keys before a query and itself, or those after it too."""
        return min(seq_len, (1 if causal else 2) * self.window + 1)

    def narrows_keys(self, seq_len: int) -> bool:
        """Beyond window + 1 keys the first query (and, causally, the last) loses a key to the window, even
        where a bidirectional query in the middle, seeing 2 window + 1 keys, loses none."""
        return seq_len > self.window + 1

    def allowed(self, q, k, mask, causal, rows=None):
        positions, query_length = (None, q.shape[1]) if rows is None else rows
        band = window_band(query_length, k.shape[1], self.window, positions)
        allowed = super().allowed(q, k, mask, causal)
        return band if allowed is None else jnp.logical_and(allowed, band)


@register("local_predictive")
class LocalPredictiveAttention(ScoreAttention):
    """Local-p: query i predicts its aligned position p_i = S_i * sigmoid(v_h^T tanh(W_h^T q_i)).

    S_i is the position of the last key query i may attend to: Lk - 1 with no mask, i under a causal
    mask (a position in its past), the source length - 1 under key padding (Luong's S). Keys s with
    |s - p_i| <= D (D = `window`) get the softmax of scaled dot-product scores over that window and
    the other masks, multiplied by exp(-(s - p_i)^2 / (2 sigma^2)), sigma = D / 2; the Gaussian is
    what carries the gradient to W and v (the window's edges are steps).

    As in Luong, the weights are not renormalised after the Gaussian: a row sums to at most 1 (at
    least e^-2 when its window holds an allowed key), not to 1 as in the other kinds; `weights`
    returns exactly what `__call__` uses.
    """

    OWN_OPTIONS = (PREDICTED_WINDOW,)
    keeps_every_key = False  # the window's outside is 0 (ScoreAttention.keeps_every_key)

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, window: int = 3, **base_options):
        super().__init__(rngs=rngs, **base_options)
        self.scale = head_dim**-0.5
        self.window = window
        self.position_projection = lecun_normal_per_head(rngs, (num_heads, head_dim, head_dim))
        self.position_vector = lecun_normal_per_head(rngs, (num_heads, head_dim))

    def scores(self, q, k):
        return dot_scores(q, k, self.scale)

    def predicted_positions(self, q, last_key):
        """p_i [B, H, Lq] (float32) for q [B, Lq, H, Dk] and S_i = last_key [B, H, Lq].

        Computed in float32 from bfloat16 inputs too: S_i times a bfloat16 fraction (8 significant bits)
        would be off by up to S_i / 512, whole positions in a long sequence, and shift the window."""
        q, projection, vector = (x.astype(jnp.float32) for x in (q, self.position_projection[...],
                                                                  self.position_vector[...]))
        hidden = jnp.tanh(jnp.einsum("bqhd,hde->bhqe", q, projection))
        fraction = jax.nn.sigmoid(jnp.einsum("bhqe,he->bhq", hidden, vector))
        return last_key * fraction

    def weights(self, q, k, mask=None, *, causal=False, rows=None):
        key_positions = jnp.arange(k.shape[1])
        allowed = self.allowed(q, k, mask, causal, rows)
        if allowed is None:
            allowed = jnp.ones(k.shape[1], bool)
        last_key = jnp.max(jnp.where(allowed, key_positions, 0), axis=-1)
        distance = key_positions - self.predicted_positions(q, last_key)[..., None]
        in_window = jnp.logical_and(allowed, jnp.abs(distance) <= self.window)
        sigma = self.window / 2
        gaussian = jnp.exp(-jnp.square(distance) / (2 * sigma**2))
        return masked_softmax(self.scores(q, k), in_window) * gaussian
