"""Hard attention trained with the straight-through estimator."""
import jax
import jax.numpy as jnp
from flax import nnx

from attention import option_specs
from attention.registry import register
from attention.score_base import ScoreAttention, dot_scores, masked_softmax


TOP_K = option_specs.Option("top_k", 1, "keys attended in the forward pass (1: classic hard attention)",
                            rule=option_specs.at_least(1))


@register("hard")
class HardAttention(ScoreAttention):
    """Each query attends only to its `top_k` highest-scoring allowed keys (scaled dot-product scores),
    with the softmax renormalised over them; top_k = 1 is classic hard attention.

    The selection has no gradient, so the backward pass is the soft one (straight-through): weights =
    soft + stop_gradient(hard - soft), soft being the softmax over all allowed keys. Ties go to the
    lowest key index (jax.lax.top_k's rule); a query with fewer than top_k allowed keys attends to
    all of them, and a disallowed key is never chosen.
    """

    OWN_OPTIONS = (TOP_K,)
    keeps_every_key = False  # all but the top k are 0 (ScoreAttention.keeps_every_key)

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, top_k: int = 1, **base_options):
        super().__init__(rngs=rngs, **base_options)
        self.scale = head_dim**-0.5
        self.top_k = top_k

    def scores(self, q, k):
        return dot_scores(q, k, self.scale)

    def weights(self, q, k, mask=None, *, causal=False, rows=None):
        scores = self.scores(q, k)
        allowed = self.allowed(q, k, mask, causal, rows)
        if allowed is None:
            allowed = jnp.ones(scores.shape[-1], bool)
        # -inf ranks every disallowed key below every allowed one.
        _, top = jax.lax.top_k(jnp.where(allowed, scores, -jnp.inf), min(self.top_k, scores.shape[-1]))
        chosen = jax.nn.one_hot(top, scores.shape[-1], dtype=bool).any(axis=-2)
        soft = masked_softmax(scores, allowed)
        hard = masked_softmax(scores, jnp.logical_and(allowed, chosen))
        return soft + jax.lax.stop_gradient(hard - soft)
